import { keepsSummary, lastSeqMismatchError } from "./append.js";
import { MemoryError } from "./errors.js";
import { ttlFields } from "./ttl.js";
import type { Labels, Role, Strategy, ThreadState } from "./types.js";

/**
 * Fork (ForkRequest): a new thread holding its parent's messages up to a seq,
 * as one decision every store runs inside its own atomic step. How the
 * messages are shared without copying is core/lineage.ts; this file decides
 * whether the Fork may happen and what the new thread is.
 *
 * Order of the store's checks (nothing changes on any refusal): a request_id
 * already recorded on the new thread (replay, or invalid_argument for another
 * payload), then `new_thread_id` taken (forkTargetExistsError; an expired
 * thread of that id is removed first, as Add does), then decideFork on the
 * parent, then the lineage bound (core/lineage.ts planFork), then the quotas.
 */

/** What a Fork asks for, as the service resolved it. */
export interface ForkAsk {
  newThreadId: string;
  /** Undefined: the parent's last_seq. */
  atSeq: number | undefined;
  expectedLastSeq: number | undefined;
  /** Undefined: the parent's. */
  strategy: Strategy | undefined;
  /** Undefined: the parent's. Never empty. */
  labels: Labels | undefined;
  /** Undefined: the parent's ttl; 0: none. */
  ttlMs: number | undefined;
  now: number;
}

/** What a store writes for a Fork. */
export interface ForkPlan {
  /** The new thread (without its incarnation: the store gives one). */
  thread: Omit<ThreadState, "incarnation">;
  /** The fork point: the fork holds the parent's seqs [floor, atSeq]. */
  atSeq: number;
  summaryInherited: boolean;
}

/**
 * The Fork of `parent`, whose oldest stored message has seq `oldestStoredSeq`
 * (undefined when it stores none). Throws not_found (no parent), aborted
 * (expected_last_seq), out_of_range (at_seq past last_seq) or
 * failed_precondition when the fork would lack what the parent's view holds:
 * messages up to at_seq already trimmed (only the summary, or nothing, holds
 * them), or a summary covering seqs after at_seq while the parent no longer
 * stores seq 1 (the fork could not fold its messages anew without losing the
 * trimmed ones).
 */
export function decideFork(
  parent: ThreadState | undefined,
  oldestStoredSeq: number | undefined,
  ask: ForkAsk,
): ForkPlan {
  if (parent === undefined) {
    throw new MemoryError("not_found", "thread_id: no such thread", { field: "thread_id" });
  }
  if (ask.expectedLastSeq !== undefined && ask.expectedLastSeq !== parent.lastSeq) {
    throw lastSeqMismatchError(parent.lastSeq, ask.expectedLastSeq);
  }
  const atSeq = ask.atSeq ?? parent.lastSeq;
  if (atSeq > parent.lastSeq) {
    throw new MemoryError(
      "out_of_range",
      `at_seq: the thread's last_seq is ${parent.lastSeq}, not at least ${atSeq}`,
      { field: "at_seq" },
    );
  }
  const oldest = oldestStoredSeq ?? parent.lastSeq + 1;
  if (atSeq < oldest - 1) {
    throw new MemoryError(
      "failed_precondition",
      `at_seq: the messages up to seq ${oldest - 1} were already trimmed from the store; the earliest fork point is ${oldest - 1}`,
      { field: "at_seq" },
    );
  }
  const strategy = ask.strategy ?? parent.strategy;
  const summaryCovers = parent.summarizedThroughSeq > 0 && parent.summarizedThroughSeq <= atSeq;
  if (parent.summarizedThroughSeq > atSeq && oldest > 1) {
    throw new MemoryError(
      "failed_precondition",
      `at_seq: the summary covers seqs after ${atSeq} and holds messages no longer stored (before seq ${oldest}); a fork there could not fold anew without losing them, so the earliest fork point is ${parent.summarizedThroughSeq}`,
      { field: "at_seq" },
    );
  }
  const summaryInherited = summaryCovers && keepsSummary(parent.strategy, strategy);
  const ttlMs = ask.ttlMs ?? parent.ttlMs ?? 0;
  const labels = ask.labels ?? parent.labels;
  return {
    thread: {
      threadId: ask.newThreadId,
      strategy,
      lastSeq: atSeq,
      summarizedThroughSeq: summaryInherited ? parent.summarizedThroughSeq : 0,
      summary: summaryInherited ? parent.summary : "",
      summaryTime: summaryInherited ? parent.summaryTime : 0,
      createTime: ask.now,
      updateTime: ask.now,
      ...(labels === undefined ? {} : { labels }),
      ...ttlFields(ttlMs, ask.now),
      parent: {
        threadId: parent.threadId,
        atSeq,
        forkTime: ask.now,
        parentCreateTime: parent.createTime,
      },
    },
    atSeq,
    summaryInherited,
  };
}

/** new_thread_id names a live thread. */
export function forkTargetExistsError(): MemoryError {
  return new MemoryError(
    "already_exists",
    "new_thread_id: a thread of this id exists; clear it or choose another",
    { field: "new_thread_id" },
  );
}

/**
 * How many of the fork's oldest messages (seqs from `floor`, the parent's
 * oldest stored, to `atSeq`) its own strategy's max_stored drops at once, as
 * core/append.ts trimCountOf decides for a stored thread, but computed from
 * seqs: `roleAt(seq)` is asked only for the tool results at the cut, so a
 * fork of a long parent with a small max_stored costs no read of the prefix.
 */
export function forkTrimCount(
  strategy: Strategy,
  floor: number,
  atSeq: number,
  summarizedThroughSeq: number,
  roleAt: (seq: number) => Role | undefined,
): number {
  const length = atSeq - floor + 1;
  const excess = length - strategy.maxStored;
  if (excess <= 0) return 0;
  const foldedRun = strategy.kind === "summary" ? summarizedThroughSeq - floor + 1 : length;
  let n = Math.max(0, Math.min(excess, foldedRun));
  if (n === 0) return 0;
  while (n < length && n < foldedRun && roleAt(floor + n) === "tool") n++;
  return n;
}

/** An imported fork's shared prefix (ImportThreadCommand.shareFrom). */
export interface ImportShare {
  /** The parent, in the same namespace: the thread the fork's line names as its parent. */
  threadId: string;
  /** The fork holds the parent's stored messages up to this seq, and its own after it. */
  throughSeq: number;
  /** The parent's last_seq when the importer checked its messages against the file. */
  parentLastSeq: number;
}

/**
 * Whether an imported fork may share `parent`'s messages as `share` says
 * (the parent's oldest stored seq is `oldestStoredSeq`): the parent is there,
 * unchanged since the importer compared it with the file (its last_seq), and
 * stores seq `throughSeq`. Throws failed_precondition naming the parent
 * otherwise; the store then writes nothing.
 */
export function checkImportShare(
  parent: ThreadState | undefined,
  oldestStoredSeq: number | undefined,
  share: ImportShare,
): void {
  const refuse = (why: string) =>
    new MemoryError(
      "failed_precondition",
      `parent: the imported fork shares the messages of thread "${share.threadId}" through seq ${share.throughSeq}, but ${why}; import the export file whole, in its order`,
      { field: "parent" },
    );
  if (parent === undefined) throw refuse("that thread is not in the store");
  if (parent.lastSeq !== share.parentLastSeq) {
    throw refuse(
      `its last_seq is ${parent.lastSeq}, not ${share.parentLastSeq} as when it was compared`,
    );
  }
  const oldest = oldestStoredSeq ?? parent.lastSeq + 1;
  if (share.throughSeq < oldest || share.throughSeq > parent.lastSeq) {
    throw refuse(`it stores seqs ${oldest} to ${parent.lastSeq}`);
  }
}
