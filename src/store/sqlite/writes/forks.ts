import { randomUUID } from "node:crypto";
import {
  decideFork,
  type ForkPlan,
  forkTargetExistsError,
  forkTrimCount,
} from "../../../core/fork.js";
import { floorOf, type Lineage, planForkLineage } from "../../../core/lineage.js";
import { checkQuotas } from "../../../core/quota.js";
import { isExpired } from "../../../core/ttl.js";
import type { StoredMessage, ThreadState } from "../../../core/types.js";
import { bytesOf, droppedDelta } from "../../../core/usage.js";
import type { ForkCommand, ForkResult } from "../../store.js";
import { expiryOf, type RecordedFork, type ThreadRow, toThread } from "../codec.js";
import { expireIfDue } from "./clears.js";
import type { WriteContext } from "./context.js";
import type { Committed } from "./outcomes.js";

/**
 * Store.fork on the write connection, inside its savepoint, in the order
 * store.ts gives: replay, target taken (an expired one removed first),
 * decideFork, the lineage bound, the quotas; then the fork's row, its
 * lineage (frozen references, or its copied head), the request record, the
 * forks index entry, its own trim, and thread_forked.
 */
export function fork(ctx: WriteContext, cmd: ForkCommand): Committed<ForkResult> {
  const target = ctx.threads.get(cmd.namespace, cmd.newThreadId);
  const live = target !== undefined && !isExpired(expiryOf(target), cmd.now) ? target : undefined;
  const first = ctx.requests.replayOf<RecordedFork>(live?.id, cmd);
  if (first !== undefined && live !== undefined) {
    const thread = toThread(live);
    return { value: { ...first, thread, replayed: true }, events: [] };
  }
  const expired = expireIfDue(ctx, cmd.namespace, cmd.newThreadId, cmd.now, target);
  if (live !== undefined) throw forkTargetExistsError();
  const { row: parentRow, lineage: parentLineage, plan } = checkedParent(ctx, cmd);
  const lineagePlan = planForkLineage(parentLineage, parentRow.last_seq, plan.atSeq);
  const copied =
    lineagePlan.copy === undefined
      ? []
      : ctx.threads.lineages.read(
          parentLineage,
          parentRow.last_seq,
          lineagePlan.copy.from,
          lineagePlan.copy.to,
        );
  const copiedBytes = bytesOf(copied);
  checkQuotas(ctx.lim, ctx.threads.usage(cmd.namespace), {
    threads: 1,
    messages: copied.length,
    bytes: copiedBytes,
  });
  if (lineagePlan.headFrozen) freezeHead(ctx, parentRow, parentLineage, lineagePlan.parent);
  const state: ThreadState = { ...plan.thread, incarnation: randomUUID() };
  const key = ctx.threads.insertFork(cmd.namespace, state);
  for (const m of copied) ctx.threads.insertMessage(key, m.seq, m.createTime, m);
  ctx.threads.segments.reference(lineagePlan.forkEntries);
  const lineage: Lineage = {
    entries: lineagePlan.forkEntries,
    head: { segment: String(key), low: plan.atSeq - copied.length + 1 },
  };
  if (lineage.entries.length > 0) ctx.threads.saveLineage(key, lineage);
  ctx.threads.use(cmd.namespace, { threads: 1, messages: copied.length, bytes: copiedBytes }, key);
  if (state.labels !== undefined) ctx.labels.set(cmd.namespace, state.threadId, key, state.labels);
  if (state.ttlMs !== undefined && state.expireTime !== undefined) {
    ctx.ttl.set.run(state.ttlMs, state.expireTime, cmd.namespace, state.threadId);
  }
  ctx.forks.add(cmd.namespace, cmd.threadId, state.threadId, key);
  trimFork(ctx, cmd.namespace, key, lineage, state, copied);
  const recorded: RecordedFork = {
    sharedCount: lineagePlan.sharedCount,
    summaryInherited: plan.summaryInherited,
  };
  ctx.requests.record(key, cmd, recorded);
  const event = ctx.events.log(cmd.namespace, state.threadId, cmd.now, {
    type: "thread_forked",
    parentThreadId: cmd.threadId,
    atSeq: plan.atSeq,
    ...recorded,
  });
  return {
    value: { thread: state, ...recorded, replayed: false },
    events: expired === undefined ? [event] : [expired.event, event],
    // The parent's cached tail stays true (its messages did not change), but
    // is dropped with a frozen head so no entry outlives the storage it mirrored.
    ended: [
      ...(expired === undefined ? [] : [expired.incarnation]),
      ...(lineagePlan.headFrozen ? [parentRow.incarnation] : []),
    ],
  };
}

/** The live parent and core/fork.ts decideFork on it (throws its refusals). */
function checkedParent(
  ctx: WriteContext,
  cmd: ForkCommand,
): { row: ThreadRow; lineage: Lineage; plan: ForkPlan } {
  const found = ctx.threads.get(cmd.namespace, cmd.threadId);
  const row = found !== undefined && !isExpired(expiryOf(found), cmd.now) ? found : undefined;
  const lineage = row === undefined ? undefined : ctx.threads.lineages.of(row);
  const floor = row === undefined || lineage === undefined ? 0 : floorOf(lineage, row.last_seq);
  const parent = row === undefined ? undefined : toThread(row);
  const oldest = parent === undefined || floor > parent.lastSeq ? undefined : floor;
  const plan = decideFork(parent, oldest, cmd);
  // Unreachable: decideFork threw not_found.
  if (row === undefined || lineage === undefined) throw new Error("sqlite store: no parent");
  return { row, lineage, plan };
}

/**
 * The parent's owned head becomes a frozen segment (its count and bytes
 * move from the thread to the segment; the usage does not change) that the
 * parent's new last entry references; the fork's entries add theirs.
 */
function freezeHead(ctx: WriteContext, row: ThreadRow, before: Lineage, after: Lineage): void {
  const head = before.head;
  if (head === undefined) return;
  ctx.threads.segments.freeze(Number(head.segment), row.last_seq - head.low + 1, row.bytes);
  const last = after.entries[after.entries.length - 1];
  if (last !== undefined) ctx.threads.segments.reference([last]);
  ctx.threads.saveLineage(row.id, after);
  ctx.threads.setBytes(row.id, 0);
}

/**
 * The fork's own trim when its strategy stores fewer (core/fork.ts
 * forkTrimCount): roles are read only at the cut, one message each, so a
 * fork of a long parent reads none of the prefix it drops.
 */
function trimFork(
  ctx: WriteContext,
  namespace: string,
  key: number,
  lineage: Lineage,
  state: ThreadState,
  copied: readonly StoredMessage[],
): void {
  const floor = floorOf(lineage, state.lastSeq);
  const roleAt = (seq: number) =>
    ctx.threads.lineages.read(lineage, state.lastSeq, seq, seq, 1)[0]?.role;
  const n = forkTrimCount(state.strategy, floor, state.lastSeq, state.summarizedThroughSeq, roleAt);
  if (n <= 0) return;
  const dropped = ctx.threads.raise(namespace, key, lineage, floor + n, copied);
  ctx.threads.use(namespace, droppedDelta(dropped.count, dropped.bytes), key);
}
