import { mayCommitSummary } from "../../../core/fold-commit.js";
import type { ThreadState } from "../../../core/types.js";
import { droppedDelta } from "../../../core/usage.js";
import type { CommitSummaryCommand, FoldFailureCommand } from "../../store.js";
import { toThread } from "../codec.js";
import type { WriteContext } from "./context.js";
import type { Committed } from "./outcomes.js";

/**
 * A fold's summary, written only while core/fold-commit.ts mayCommitSummary
 * holds (same incarnation, same starting point, the lease's token); then the
 * folded messages beyond max_stored are trimmed.
 */
export function commitSummary(
  ctx: WriteContext,
  cmd: CommitSummaryCommand,
): Committed<ThreadState | undefined> {
  const row = ctx.threads.get(cmd.namespace, cmd.threadId);
  const lease = ctx.leases.held(cmd.namespace, cmd.threadId);
  const thread =
    row === undefined
      ? undefined
      : { incarnation: row.incarnation, summarizedThroughSeq: row.summarized_through_seq };
  if (row === undefined || !mayCommitSummary(thread, lease, cmd)) {
    return { value: undefined, events: [] };
  }
  const state = toThread(row);
  state.summary = cmd.summary;
  state.summaryTime = cmd.now;
  state.summarizedThroughSeq = cmd.throughSeq;
  state.updateTime = cmd.now;
  const trimmed = ctx.threads.trim(cmd.namespace, row.id, ctx.threads.lineages.of(row), state);
  ctx.threads.use(cmd.namespace, droppedDelta(trimmed.count, trimmed.bytes), row.id);
  ctx.threads.save(row.id, state);
  const event = ctx.events.log(cmd.namespace, cmd.threadId, cmd.now, {
    type: "summary_updated",
    summary: cmd.summary,
    summarizedThroughSeq: cmd.throughSeq,
    foldedCount: cmd.foldedCount,
  });
  return {
    value: state,
    events: [event],
    messages: {
      incarnation: state.incarnation,
      created: false,
      lastSeqBefore: state.lastSeq,
      added: [],
      droppedThrough: trimmed.through,
    },
  };
}

/** Logs summary_failed if the thread still has the fold's incarnation. */
export function recordFoldFailure(ctx: WriteContext, cmd: FoldFailureCommand): Committed<void> {
  const row = ctx.threads.get(cmd.namespace, cmd.threadId);
  if (row === undefined || row.incarnation !== cmd.incarnation) {
    return { value: undefined, events: [] };
  }
  const event = ctx.events.log(cmd.namespace, cmd.threadId, cmd.now, {
    type: "summary_failed",
    reason: cmd.reason,
    attempt: cmd.attempt,
  });
  return { value: undefined, events: [event] };
}
