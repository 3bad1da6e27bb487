import type { Duration } from "@bufbuild/protobuf/wkt";
import type { StrategyInit } from "./messages.js";
import { seqArgument } from "./rewind.js";

/** Per-call options of fork. */
export interface ForkOptions {
  /** The fork holds the parent's messages up to and including this seq. Default: all; 0: none. */
  atSeq?: bigint | number;
  /** Fail with ABORTED and create nothing unless the parent's last_seq equals this. */
  expectedLastSeq?: bigint | number;
  /** The fork's strategy. Default: the parent's. */
  strategy?: StrategyInit;
  /** The fork's labels. Default (or empty): the parent's. */
  labels?: Record<string, string>;
  /** The fork's time to live in seconds. Default: the parent's; 0: none. */
  ttl?: number;
  /** Idempotency key. Default: a new random UUID per fork() call, reused by its retries. */
  requestId?: string;
  signal?: AbortSignal;
  timeoutMs?: number;
}

/** Options of listThreads and threads. */
export interface ListThreadsOptions {
  /** Only the direct forks of this thread (Thread.parent.threadId). */
  forksOf?: string;
  /** Only threads carrying every one of these labels. */
  labels?: Record<string, string>;
  /** Page size; 0: the server's default (100). */
  pageSize?: number;
  signal?: AbortSignal;
}

/** The ForkRequest fields of fork(threadId, newThreadId, options); throws on a bad seq or ttl. */
export function forkFields(
  threadId: string,
  newThreadId: string,
  options: ForkOptions,
  requestId: string,
) {
  return {
    threadId,
    newThreadId,
    atSeq: options.atSeq === undefined ? undefined : seqArgument("atSeq", options.atSeq),
    expectedLastSeq:
      options.expectedLastSeq === undefined
        ? undefined
        : seqArgument("expectedLastSeq", options.expectedLastSeq),
    strategy: options.strategy,
    labels: options.labels ?? {},
    ttl: options.ttl === undefined ? undefined : ttlDuration(options.ttl),
    requestId: options.requestId ?? requestId,
  };
}

function ttlDuration(seconds: number): Pick<Duration, "seconds" | "nanos"> {
  if (!Number.isFinite(seconds) || seconds < 0) {
    throw new RangeError(`ttl must be a non-negative number of seconds, got ${String(seconds)}`);
  }
  const whole = Math.floor(seconds);
  return { seconds: BigInt(whole), nanos: Math.round((seconds - whole) * 1e9) };
}

/** The ListThreadsRequest fields of one page. */
export function listFields(
  options: ListThreadsOptions,
  pageToken: string,
  includeThreads: boolean,
) {
  return {
    pageSize: options.pageSize ?? 0,
    pageToken,
    forksOf: options.forksOf ?? "",
    labels: options.labels ?? {},
    includeThreads,
  };
}
