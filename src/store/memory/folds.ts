import { mayCommitSummary } from "../../core/fold-commit.js";
import type { ThreadState } from "../../core/types.js";
import { droppedDelta } from "../../core/usage.js";
import type { CommitSummaryCommand, FoldFailureCommand } from "../store.js";
import { addUsage, type MemoryState, type NamespaceState } from "./namespaces.js";
import { dropFront, trimCount } from "./segments.js";
import { copyThread, type ThreadRecord } from "./thread-record.js";

/** Store.commitSummary: writes a fold's summary if it still applies (fencing), then trims. */
export function commitSummary(m: MemoryState, cmd: CommitSummaryCommand): ThreadState | undefined {
  const s = m.find(cmd.namespace);
  const rec = s?.threads.get(cmd.threadId);
  const lease = m.leases.current(cmd.namespace, cmd.threadId);
  if (s === undefined || rec === undefined || !mayCommitSummary(rec.state, lease, cmd)) {
    return undefined;
  }
  rec.state.summary = cmd.summary;
  rec.state.summaryTime = cmd.now;
  rec.state.summarizedThroughSeq = cmd.throughSeq;
  rec.state.updateTime = cmd.now;
  trim(s, rec);
  s.log.emit(cmd.threadId, cmd.now, {
    type: "summary_updated",
    summary: cmd.summary,
    summarizedThroughSeq: cmd.throughSeq,
    foldedCount: cmd.foldedCount,
  });
  return copyThread(rec.state);
}

/** Store.recordFoldFailure: logs summary_failed if the thread still has the incarnation. */
export function recordFoldFailure(m: MemoryState, cmd: FoldFailureCommand): void {
  const s = m.find(cmd.namespace);
  const rec = s?.threads.get(cmd.threadId);
  if (s === undefined || rec === undefined || rec.state.incarnation !== cmd.incarnation) return;
  s.log.emit(cmd.threadId, cmd.now, {
    type: "summary_failed",
    reason: cmd.reason,
    attempt: cmd.attempt,
  });
}

/** Trims the thread to its strategy's max_stored and gives the room back. */
function trim(s: NamespaceState, rec: ThreadRecord): void {
  const n = trimCount(s.segments, rec, rec.state.strategy, rec.state.summarizedThroughSeq);
  if (n === 0) return;
  const freed = dropFront(s.segments, rec, n);
  addUsage(s.usage, droppedDelta(freed.count, freed.bytes));
}
