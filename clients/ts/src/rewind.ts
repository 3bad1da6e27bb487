import { Code } from "@connectrpc/connect";
import { MemoryError } from "./errors.js";
import type {
  ChatMessage,
  GetResponse,
  RewindResponse,
} from "./gen/windlass/memory/v1/memory_pb.js";
import { bufferStrategy, type StrategyInit } from "./messages.js";

/** Per-call options of rewind. */
export interface RewindOptions {
  /** Fail with ABORTED and drop nothing unless the thread's last_seq equals this. */
  expectedLastSeq?: bigint | number;
  /** Idempotency key. Default: a new random UUID per rewind() call, reused by its retries. */
  requestId?: string;
  signal?: AbortSignal;
  timeoutMs?: number;
}

/** What pop and newest need of the client. */
export interface RewindCalls {
  get(
    threadId: string,
    options: { limit: number; recall: StrategyInit; signal?: AbortSignal },
  ): Promise<GetResponse>;
  rewind(threadId: string, toSeq: bigint, options: RewindOptions): Promise<RewindResponse>;
}

/** How often pop reads again after an add landed between its read and its rewind. */
export const POP_ATTEMPTS = 3;

/** A seq argument as a bigint, refusing what is not a non-negative integer. */
export function seqArgument(name: string, value: bigint | number): bigint {
  if (typeof value === "bigint" ? value < 0n : !Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`${name} must be a non-negative integer, got ${String(value)}`);
  }
  return BigInt(value);
}

/** The thread's newest `count` stored messages, oldest first, past any window or summary. */
export async function newestMessages(
  calls: RewindCalls,
  threadId: string,
  count: number,
  signal: AbortSignal | undefined,
): Promise<ChatMessage[]> {
  if (!Number.isSafeInteger(count) || count < 0) {
    throw new RangeError(`count must be a non-negative integer, got ${count}`);
  }
  if (count === 0) return [];
  const got = await calls.get(threadId, { limit: count, recall: bufferStrategy(), signal });
  return got.messages;
}

/**
 * Removes and returns the newest stored message: a read, then a rewind to
 * the seq before it guarded by expected_last_seq, so a message added in
 * between is never dropped unseen. On that ABORTED it reads again, up to
 * POP_ATTEMPTS times, then throws the ABORTED MemoryError.
 */
export async function popNewest(
  calls: RewindCalls,
  threadId: string,
  signal: AbortSignal | undefined,
): Promise<ChatMessage | undefined> {
  for (let attempt = 1; ; attempt++) {
    const got = await calls.get(threadId, { limit: 1, recall: bufferStrategy(), signal });
    const newest = got.messages.at(-1);
    if (newest === undefined) return undefined;
    try {
      await calls.rewind(threadId, newest.seq - 1n, {
        expectedLastSeq: got.thread?.lastSeq ?? newest.seq,
        signal,
      });
      return newest;
    } catch (err) {
      const lostRace = err instanceof MemoryError && err.code === Code.Aborted;
      if (!lostRace || attempt >= POP_ATTEMPTS) throw err;
    }
  }
}
