import { MemoryError } from "./errors.js";
import { sameStrategy, strategyKey } from "./strategy.js";
import type { Strategy, ThreadState } from "./types.js";

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
 * and the recalled list.
 *
 * @param seqsOldestFirst seqs of the stored messages, oldest first.
 */
export function trimCount(
  strategy: Strategy,
  seqsOldestFirst: readonly number[],
  summarizedThroughSeq: number,
): number {
  const excess = seqsOldestFirst.length - strategy.maxStored;
  if (excess <= 0) return 0;
  if (strategy.kind !== "summary") return excess;
  let folded = 0;
  while (folded < excess && (seqsOldestFirst[folded] ?? Infinity) <= summarizedThroughSeq) folded++;
  return folded;
}
