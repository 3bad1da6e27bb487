import { randomUUID } from "node:crypto";
import {
  decideFork,
  type ForkPlan,
  forkTargetExistsError,
  forkTrimCount,
} from "../../../core/fork.js";
import {
  type ForkLineagePlan,
  floorOf,
  type Lineage,
  planForkLineage,
} from "../../../core/lineage.js";
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
  const { parent, plan } = checkedParent(ctx, cmd);
  const lineagePlan = planForkLineage(parent.lineage, parent.row.last_seq, plan.atSeq);
  const copied = copiedMessages(ctx, parent, lineagePlan);
  const copiedBytes = bytesOf(copied);
  const delta = { threads: 1, messages: copied.length, bytes: copiedBytes };
  checkQuotas(ctx.lim, ctx.threads.usage(cmd.namespace), delta);
  const state: ThreadState = { ...plan.thread, incarnation: randomUUID() };
  const { key, lineage, parentEnded } = writeForkThread(
    ctx,
    cmd.namespace,
    parent,
    plan.atSeq,
    lineagePlan,
    state,
    copied,
  );
  ctx.threads.use(cmd.namespace, delta, key);
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
    ended: [...(expired === undefined ? [] : [expired.incarnation]), ...parentEnded],
  };
}

/** A thread a Fork (or an imported fork) shares from: its row and lineage, read once. */
export interface LiveParent {
  row: ThreadRow;
  lineage: Lineage;
}

/**
 * The thread if it is there and not expired, with its state and oldest
 * stored seq (undefined when it stores none) as core/fork.ts's checks take them.
 */
export function liveParent(
  ctx: WriteContext,
  namespace: string,
  threadId: string,
  now: number,
): { parent: LiveParent | undefined; state: ThreadState | undefined; oldest: number | undefined } {
  const found = ctx.threads.get(namespace, threadId);
  if (found === undefined || isExpired(expiryOf(found), now)) {
    return { parent: undefined, state: undefined, oldest: undefined };
  }
  const lineage = ctx.threads.lineages.of(found);
  const floor = floorOf(lineage, found.last_seq);
  const oldest = floor > found.last_seq ? undefined : floor;
  return { parent: { row: found, lineage }, state: toThread(found), oldest };
}

/** The live parent and core/fork.ts decideFork on it (throws its refusals). */
function checkedParent(
  ctx: WriteContext,
  cmd: ForkCommand,
): { parent: LiveParent; plan: ForkPlan } {
  const { parent, state, oldest } = liveParent(ctx, cmd.namespace, cmd.threadId, cmd.now);
  const plan = decideFork(state, oldest, cmd);
  // Unreachable: decideFork threw not_found.
  if (parent === undefined) throw new Error("sqlite store: no parent");
  return { parent, plan };
}

/** The parent's head messages the plan copies (at most FORK_COPY_MAX), read in one range. */
export function copiedMessages(
  ctx: WriteContext,
  parent: LiveParent,
  plan: ForkLineagePlan,
): StoredMessage[] {
  const copy = plan.copy;
  if (copy === undefined) return [];
  return ctx.threads.lineages.read(parent.lineage, parent.row.last_seq, copy.from, copy.to);
}

/**
 * Writes a thread whose messages `plan` lays out on `parent` at `atSeq` (its head
 * frozen if the plan says so; its frozen segments referenced), its own head
 * `head` (the copied messages, then any of its own), its row from `state`,
 * labels, retention and forks index entry under the parent. The caller
 * charges the usage (the thread and its head) and logs the event;
 * `parentEnded` is for its Committed.ended.
 */
export function writeForkThread(
  ctx: WriteContext,
  namespace: string,
  parent: LiveParent,
  atSeq: number,
  plan: ForkLineagePlan,
  state: ThreadState,
  head: readonly StoredMessage[],
): { key: number; lineage: Lineage; parentEnded: string[] } {
  if (plan.headFrozen) freezeHead(ctx, parent.row, parent.lineage, plan.parent);
  const key = ctx.threads.insertFork(namespace, state);
  for (const m of head) ctx.threads.insertMessage(key, m.seq, m.createTime, m);
  ctx.threads.segments.reference(plan.forkEntries);
  // The head starts at the copied messages, else right after the shared ones.
  const low = plan.copy?.from ?? atSeq + 1;
  const lineage: Lineage = { entries: plan.forkEntries, head: { segment: String(key), low } };
  if (lineage.entries.length > 0) ctx.threads.saveLineage(key, lineage);
  if (state.labels !== undefined) ctx.labels.set(namespace, state.threadId, key, state.labels);
  if (state.ttlMs !== undefined && state.expireTime !== undefined) {
    ctx.ttl.set.run(state.ttlMs, state.expireTime, namespace, state.threadId);
  }
  ctx.forks.add(namespace, parent.row.thread_id, state.threadId, key);
  // The parent's cached tail stays true (its messages did not change), but
  // is dropped with a frozen head so no entry outlives the storage it mirrored.
  const parentEnded = plan.headFrozen ? [parent.row.incarnation] : [];
  return { key, lineage, parentEnded };
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
