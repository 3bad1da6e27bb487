import { cutLineage } from "../../core/lineage.js";
import { decideRewind, type RewindPlan } from "../../core/rewind.js";
import { isExpired } from "../../core/ttl.js";
import { bytesOf, droppedDelta } from "../../core/usage.js";
import type { RewindCommand, RewindResult } from "../store.js";
import {
  layoutOf,
  lineageColumn,
  type MessageRow,
  oldestSeq,
  type ThreadRow,
  toMessage,
  toThread,
} from "./codec.js";
import { fenceFoldLease } from "./leases.js";
import { forgetRequestsAfter, recordedResult, recordRequest } from "./requests.js";
import { releaseSegments } from "./segments.js";
import { saveThread, threadRow } from "./thread-rows.js";
import type { WriteContext } from "./writes.js";

/** What a Rewind's request-id record keeps: its first result. */
type RecordedRewind = Omit<RewindResult, "replayed">;

/**
 * Store.rewind, one write of a group transaction (group-commit.ts): behind
 * the namespace's row lock, like every Add of the thread, so a Rewind and
 * the Adds around it apply in one order, and acknowledged only once the
 * group has committed. The decision is core/rewind.ts decideRewind's; this
 * applies its plan to the rows.
 */
export async function rewind(ctx: WriteContext, cmd: RewindCommand): Promise<RewindResult> {
  const { q, log, lim } = ctx;
  await log.lock(cmd.namespace);
  const found = await threadRow(q, cmd.namespace, cmd.threadId);
  // Expired is gone (the sweep removes it later, logging thread_cleared).
  const row = found !== undefined && isExpired(toThread(found), cmd.now) ? undefined : found;
  if (row !== undefined) {
    const first = await recordedResult<RecordedRewind>(q, lim, cmd, "rewind");
    if (first !== undefined) return { ...first, replayed: true };
  }
  const thread = row === undefined ? undefined : toThread(row);
  const floor = row === undefined ? 0 : oldestSeq(row);
  const oldest = row !== undefined && floor <= row.last_seq ? floor : undefined;
  const plan = decideRewind(thread, oldest, cmd);
  // decideRewind refused a missing thread (not_found).
  if (row === undefined || thread === undefined) throw new Error("postgres store: no thread");
  const result: RewindResult =
    plan === "unchanged"
      ? { thread, removedCount: 0, summaryDropped: false, replayed: false }
      : await applyPlan(ctx, cmd, row, plan);
  if (cmd.requestId !== "") await recordRequest(q, lim, cmd, result, undefined);
  return result;
}

/**
 * Drops the messages after the plan's seq (core/lineage.ts cutLineage: the
 * frozen entries wholly after it released, the owned head's messages after
 * it deleted in place), forgets the Adds' request ids that named them,
 * fences the fold lease, writes the planned thread, gives the room back and
 * logs thread_rewound.
 */
async function applyPlan(
  ctx: WriteContext,
  cmd: RewindCommand,
  row: ThreadRow,
  plan: RewindPlan,
): Promise<RewindResult> {
  const { q, log } = ctx;
  const layout = layoutOf(row);
  const cut = cutLineage(layout.lineage, row.last_seq, plan.dropAfterSeq);
  await releaseSegments(
    q,
    log,
    cmd.namespace,
    cut.released.map((e) => e.segment),
  );
  // The owned head holds seqs after every entry's: its part after the seq, or all of it.
  const dropped = (
    await q<MessageRow>(
      `DELETE FROM messages WHERE namespace = $1 AND thread_id = $2 AND seq > $3
       RETURNING seq, role, create_time, content, extra`,
      [cmd.namespace, layout.headId, plan.dropAfterSeq],
    )
  ).map(toMessage);
  const bytes = bytesOf(dropped);
  const removedCount = row.last_seq - Math.max(plan.dropAfterSeq, oldestSeq(row) - 1);
  await forgetRequestsAfter(q, cmd.namespace, cmd.threadId, plan.dropAfterSeq);
  await fenceFoldLease(q, cmd.namespace, cmd.threadId);
  await saveThread(
    q,
    cmd.namespace,
    plan.thread,
    { stored: row.stored - dropped.length, bytes: row.bytes - bytes },
    { head: row.head, lineage: lineageColumn(cut.lineage.entries) },
  );
  log.use(cmd.namespace, droppedDelta(dropped.length, bytes));
  log.log(cmd.namespace, cmd.threadId, cmd.now, {
    type: "thread_rewound",
    toSeq: cmd.toSeq,
    removedCount,
    summaryDropped: plan.summaryDropped,
  });
  return {
    thread: plan.thread,
    removedCount,
    summaryDropped: plan.summaryDropped,
    replayed: false,
  };
}
