import { lastSeqMismatchError } from "./append.js";
import { MemoryError } from "./errors.js";
import type { ThreadState } from "./types.js";

/**
 * Rewind (RewindRequest): dropping a thread's messages after a seq, as one
 * decision every store runs inside its own atomic step. The store supplies
 * the thread and the seq of its oldest stored message; it then deletes the
 * stored messages after `toSeq`, writes `thread` as returned, forgets the
 * request ids whose Add stored a message after `toSeq` (forgetRequest), ends
 * the fold lease by advancing its token (so a fold running meanwhile never
 * commits: core/fold-commit.ts mayCommitSummary), gives the quota room back
 * and logs thread_rewound, all or nothing.
 */

/** What a Rewind asks for. */
export interface RewindAsk {
  toSeq: number;
  expectedLastSeq: number | undefined;
  now: number;
}

/** What a store does for a Rewind that changes something. */
export interface RewindPlan {
  /** The thread after the Rewind: last_seq toSeq, the summary kept or dropped, updated now. */
  thread: ThreadState;
  /** Delete the stored messages whose seq is above this. */
  dropAfterSeq: number;
  summaryDropped: boolean;
}

/**
 * The Rewind of `thread`, whose oldest stored message has seq
 * `oldestStoredSeq` (undefined when it stores none), or "unchanged" when
 * toSeq is already its last_seq. Throws not_found (no thread), aborted
 * (expected_last_seq), out_of_range (toSeq past last_seq) or
 * failed_precondition when the Rewind would lose what it did not ask to:
 * messages after toSeq already trimmed from the store (only a summary, or
 * nothing, holds them), or a summary covering seqs after toSeq that also
 * holds messages no longer stored (dropping it would lose those).
 */
export function decideRewind(
  thread: ThreadState | undefined,
  oldestStoredSeq: number | undefined,
  ask: RewindAsk,
): RewindPlan | "unchanged" {
  if (thread === undefined) {
    throw new MemoryError("not_found", "thread_id: no such thread", { field: "thread_id" });
  }
  if (ask.expectedLastSeq !== undefined && ask.expectedLastSeq !== thread.lastSeq) {
    throw lastSeqMismatchError(thread.lastSeq, ask.expectedLastSeq);
  }
  if (ask.toSeq > thread.lastSeq) {
    throw new MemoryError(
      "out_of_range",
      `to_seq: the thread's last_seq is ${thread.lastSeq}, not at least ${ask.toSeq}`,
      { field: "to_seq" },
    );
  }
  if (ask.toSeq === thread.lastSeq) return "unchanged";
  const oldest = oldestStoredSeq ?? thread.lastSeq + 1;
  if (ask.toSeq < oldest - 1) {
    throw new MemoryError(
      "failed_precondition",
      `to_seq: the messages up to seq ${oldest - 1} were already trimmed from the store; the earliest point a Rewind can go back to is ${oldest - 1}`,
      { field: "to_seq" },
    );
  }
  const summaryDropped = thread.summarizedThroughSeq > ask.toSeq;
  if (summaryDropped && oldest > 1) {
    throw new MemoryError(
      "failed_precondition",
      `to_seq: the summary covers seqs after ${ask.toSeq} and holds messages no longer stored (before seq ${oldest}); rewinding past it would lose them, so the earliest point is ${thread.summarizedThroughSeq}`,
      { field: "to_seq" },
    );
  }
  return {
    thread: {
      ...thread,
      lastSeq: ask.toSeq,
      updateTime: ask.now,
      ...(summaryDropped ? { summary: "", summarizedThroughSeq: 0, summaryTime: 0 } : {}),
    },
    dropAfterSeq: ask.toSeq,
    summaryDropped,
  };
}

/**
 * Whether a Rewind to `toSeq` forgets the request id of an earlier Add whose
 * newest message had seq `recordedLastSeq`: it does when that Add stored a
 * message the Rewind drops, so a retry of it adds its messages again instead
 * of answering with seqs that now name other messages (or none).
 */
export function forgetRequest(recordedLastSeq: number, toSeq: number): boolean {
  return recordedLastSeq > toSeq;
}
