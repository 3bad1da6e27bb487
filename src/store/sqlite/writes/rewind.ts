import { floorOf } from "../../../core/lineage.js";
import { decideRewind } from "../../../core/rewind.js";
import { isExpired } from "../../../core/ttl.js";
import { droppedDelta } from "../../../core/usage.js";
import type { RewindCommand, RewindResult } from "../../store.js";
import { expiryOf, type RecordedRewind, toThread } from "../codec.js";
import type { WriteContext } from "./context.js";
import type { Committed } from "./outcomes.js";

/**
 * Store.rewind on the write connection, inside its savepoint (so all of it
 * or none): a retry of its request id answers with the first result;
 * otherwise core/rewind.ts decideRewind plans it on the live thread (an
 * expired one is not found), and the messages after to_seq go with their
 * quota room, the Adds that stored them are forgotten, the fold lease ends,
 * and thread_rewound is logged. The store cuts its cached tail of the
 * thread once this commits (Committed.rewound): the next Add reuses the seqs.
 */
export function rewind(ctx: WriteContext, cmd: RewindCommand): Committed<RewindResult> {
  const found = ctx.threads.get(cmd.namespace, cmd.threadId);
  const row = found !== undefined && !isExpired(expiryOf(found), cmd.now) ? found : undefined;
  const first = ctx.requests.replayOf<RecordedRewind>(row?.id, cmd);
  if (first !== undefined) return { value: { ...first, replayed: true }, events: [] };
  const thread = row === undefined ? undefined : toThread(row);
  const lineage = row === undefined ? undefined : ctx.threads.lineages.of(row);
  const floor = row === undefined || lineage === undefined ? 0 : floorOf(lineage, row.last_seq);
  const oldest = row === undefined || floor > row.last_seq ? undefined : floor;
  const plan = decideRewind(thread, oldest, cmd);
  // Unreachable: decideRewind throws not_found when there is no thread.
  if (row === undefined || thread === undefined || lineage === undefined) {
    throw new Error("sqlite store: no thread");
  }
  if (plan === "unchanged") {
    const result: RecordedRewind = { thread, removedCount: 0, summaryDropped: false };
    ctx.requests.record(row.id, cmd, result);
    return { value: { ...result, replayed: false }, events: [] };
  }
  const dropped = ctx.threads.cut(cmd.namespace, row, lineage, plan.dropAfterSeq);
  ctx.threads.use(cmd.namespace, droppedDelta(dropped.count, dropped.bytes), row.id);
  ctx.threads.save(row.id, plan.thread);
  ctx.requests.forgetDropped(row.id, cmd.toSeq);
  ctx.leases.end(cmd.namespace, cmd.threadId);
  const result: RecordedRewind = {
    thread: plan.thread,
    removedCount: dropped.removed,
    summaryDropped: plan.summaryDropped,
  };
  ctx.requests.record(row.id, cmd, result);
  const event = ctx.events.log(cmd.namespace, cmd.threadId, cmd.now, {
    type: "thread_rewound",
    toSeq: cmd.toSeq,
    removedCount: dropped.removed,
    summaryDropped: plan.summaryDropped,
  });
  return {
    value: { ...result, thread: { ...plan.thread }, replayed: false },
    events: [event],
    rewound: { incarnation: row.incarnation, lastSeqBefore: row.last_seq, toSeq: cmd.toSeq },
  };
}
