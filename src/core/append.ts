import { MemoryError } from "./errors.js";
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
    throw new MemoryError(
      "aborted",
      `expected_last_seq: the thread's last_seq is ${lastSeq}, not ${cmd.expectedLastSeq}`,
      { field: "expected_last_seq" },
    );
  }
  if (thread === undefined) return cmd.strategy ?? cmd.defaultStrategy;
  if (cmd.strategy === undefined) return thread.strategy;
  if (sameStrategy(cmd.strategy, thread.strategy)) return thread.strategy;
  if (cmd.replaceStrategy) return cmd.strategy;
  throw new MemoryError(
    "failed_precondition",
    `strategy: the thread has ${strategyKey(thread.strategy)}, the request asks for ${strategyKey(cmd.strategy)}; set replace_strategy to change it`,
    { field: "strategy" },
  );
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
  const excess = messages.length - strategy.maxStored;
  if (excess <= 0) return 0;
  // Summary threads may only lose what the summary already holds.
  const mayDrop = (i: number): boolean =>
    strategy.kind !== "summary" || (messages[i]?.seq ?? Infinity) <= summarizedThroughSeq;
  let n = 0;
  while (n < excess && mayDrop(n)) n++;
  if (n === 0) return 0;
  while (n < messages.length && messages[n]?.role === "tool" && mayDrop(n)) n++;
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
