import { invalidArgument, MemoryError } from "./errors.js";
import { sameStrategy, strategyKey } from "./strategy.js";
import type { Role, Strategy, ThreadState } from "./types.js";

/**
 * The rules an Add must pass against the thread as it is at the moment of the
 * append. Stores run this inside their atomic section (the Redis store runs
 * the same rules in Lua), so the check and the write cannot interleave.
 * Returns the strategy the thread has after the append.
 */
export function decideAppend(
  thread: ThreadState | undefined,
  cmd: {
    strategy: Strategy | undefined;
    defaultStrategy: Strategy;
    replaceStrategy: boolean;
    expectedLastSeq: number | undefined;
  },
): Strategy {
  const lastSeq = thread?.lastSeq ?? 0;
  if (cmd.expectedLastSeq !== undefined && cmd.expectedLastSeq !== lastSeq) {
    throw lastSeqMismatchError(lastSeq, cmd.expectedLastSeq);
  }
  if (thread === undefined) return cmd.strategy ?? cmd.defaultStrategy;
  if (cmd.strategy === undefined) return thread.strategy;
  if (sameStrategy(cmd.strategy, thread.strategy)) return thread.strategy;
  if (cmd.replaceStrategy) return cmd.strategy;
  throw strategyMismatchError(strategyKey(thread.strategy), strategyKey(cmd.strategy));
}

/**
 * The aborted error of an Add whose expected_last_seq is not the thread's
 * last_seq. Exported so a store that runs decideAppend's rules elsewhere (the
 * Redis store, in Lua) reports exactly the same error.
 */
export function lastSeqMismatchError(lastSeq: number, expectedLastSeq: number): MemoryError {
  return new MemoryError(
    "aborted",
    `expected_last_seq: the thread's last_seq is ${lastSeq}, not ${expectedLastSeq}`,
    { field: "expected_last_seq" },
  );
}

/**
 * The failed_precondition error of an Add whose strategy differs from the
 * thread's, built from the two strategyKey texts (all a store that compares
 * keys outside JavaScript has at hand).
 */
export function strategyMismatchError(threadKey: string, requestKey: string): MemoryError {
  return new MemoryError(
    "failed_precondition",
    `strategy: the thread has ${threadKey}, the request asks for ${requestKey}; set replace_strategy to change it`,
    { field: "strategy" },
  );
}

/** The invalid_argument error of a request_id already used on the thread for another payload. */
export function requestIdReusedError(): MemoryError {
  return invalidArgument("request_id", "was already used for a different request on this thread");
}

/**
 * How many of the oldest stored messages to drop so the thread keeps at most
 * `maxStored`. For the summary strategy only messages already folded into the
 * summary may go: dropping unfolded ones would lose them from both the summary
 * and the recalled list. Tool results left at the front without their call are
 * dropped too, so a trimmed thread never starts with an orphaned tool result.
 *
 * @param messages the stored messages, oldest first.
 */
export function trimCount(
  strategy: Strategy,
  messages: readonly { seq: number; role: Role }[],
  summarizedThroughSeq: number,
): number {
  return trimCountOf(strategy, messages.length, (i) => messages[i], summarizedThroughSeq);
}

/**
 * trimCount over a thread of `length` messages whose i-th oldest is `at(i)`,
 * asked for in order from 0 and only as far as the answer needs (the excess
 * plus the tool results after it), so a store can trim a long thread without
 * reading or copying all of it.
 */
export function trimCountOf(
  strategy: Strategy,
  length: number,
  at: (i: number) => { seq: number; role: Role } | undefined,
  summarizedThroughSeq: number,
): number {
  const excess = length - strategy.maxStored;
  if (excess <= 0) return 0;
  // Summary threads may only lose what the summary already holds.
  const mayDrop = (i: number): boolean =>
    strategy.kind !== "summary" || (at(i)?.seq ?? Infinity) <= summarizedThroughSeq;
  let n = 0;
  while (n < excess && mayDrop(n)) n++;
  if (n === 0) return 0;
  while (n < length && at(n)?.role === "tool" && mayDrop(n)) n++;
  return n;
}

/**
 * Whether a thread's summary stays valid when its strategy changes: only
 * between summary strategies that see the same messages. Otherwise the summary
 * is dropped and everything still stored is folded again from the start, so
 * no message stored under the other strategy falls between summary and list.
 */
export function keepsSummary(from: Strategy, to: Strategy): boolean {
  return (
    from.kind === "summary" && to.kind === "summary" && from.excludeSystem === to.excludeSystem
  );
}

/** A thread as its first Add creates it: no messages yet, no summary. */
export function newThreadState(
  threadId: string,
  strategy: Strategy,
  incarnation: string,
  now: number,
): ThreadState {
  return {
    threadId,
    incarnation,
    strategy,
    lastSeq: 0,
    summarizedThroughSeq: 0,
    summary: "",
    summaryTime: 0,
    createTime: now,
    updateTime: now,
  };
}
