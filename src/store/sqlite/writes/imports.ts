import { randomUUID } from "node:crypto";
import { checkImportShare } from "../../../core/fork.js";
import { importedState } from "../../../core/import.js";
import { floorOf, planForkLineage } from "../../../core/lineage.js";
import { checkQuotas } from "../../../core/quota.js";
import type { ThreadState } from "../../../core/types.js";
import { bytesOf, importDelta } from "../../../core/usage.js";
import type { ImportThreadCommand } from "../../store.js";
import type { WriteContext } from "./context.js";
import { copiedMessages, liveParent, writeForkThread } from "./forks.js";
import type { Committed } from "./outcomes.js";

/**
 * Store.importThread: the whole thread as given, under a new incarnation,
 * unless the namespace has one of that id (then nothing changes); counted
 * by the quotas like an Add. A `parent` origin is kept and indexed; with
 * `shareFrom` the parent's prefix is shared (importFork), else nothing is.
 */
export function importThread(ctx: WriteContext, cmd: ImportThreadCommand): Committed<boolean> {
  if (cmd.shareFrom !== undefined) return importFork(ctx, cmd, cmd.shareFrom);
  const exists = ctx.threads.get(cmd.namespace, cmd.threadId) !== undefined;
  const delta = importDelta(exists, cmd.messages);
  if (delta === undefined) return { value: false, events: [] };
  checkQuotas(ctx.lim, ctx.threads.usage(cmd.namespace), delta);
  const key = ctx.threads.insertImported(cmd, randomUUID());
  for (const m of cmd.messages) ctx.threads.insertMessage(key, m.seq, m.createTime, m);
  ctx.threads.use(cmd.namespace, delta, key);
  if (cmd.labels !== undefined) ctx.labels.set(cmd.namespace, cmd.threadId, key, cmd.labels);
  // An imported fork is listed under the parent it names, as a Fork lists it.
  if (cmd.parent !== undefined) {
    ctx.forks.add(cmd.namespace, cmd.parent.threadId, cmd.threadId, key);
  }
  if (cmd.ttlMs !== undefined && cmd.expireTime !== undefined) {
    ctx.ttl.set.run(cmd.ttlMs, cmd.expireTime, cmd.namespace, cmd.threadId);
  }
  const first = cmd.messages[0];
  if (first === undefined) return { value: true, events: [] };
  const event = ctx.events.log(cmd.namespace, cmd.threadId, cmd.now, {
    type: "messages_added",
    firstSeq: first.seq,
    lastSeq: cmd.lastSeq,
  });
  return { value: true, events: [event] };
}

/**
 * Store.importThread with shareFrom: the thread written as a Fork of its
 * parent at throughSeq would be (forks.ts writeForkThread: the frozen
 * segments shared, the parent's head frozen or at most FORK_COPY_MAX of it
 * copied), its own messages after the copied ones in its head, its state as
 * the command gives it; no trim, no request record, no thread_forked. Like
 * the plain import, any row of the id (expired or not) leaves it unwritten.
 * Every refusal throws before a write, inside the caller's savepoint.
 */
function importFork(
  ctx: WriteContext,
  cmd: ImportThreadCommand,
  share: NonNullable<ImportThreadCommand["shareFrom"]>,
): Committed<boolean> {
  if (ctx.threads.get(cmd.namespace, cmd.threadId) !== undefined) {
    return { value: false, events: [] };
  }
  const {
    parent,
    state: parentState,
    oldest,
  } = liveParent(ctx, cmd.namespace, share.threadId, cmd.now);
  checkImportShare(parentState, oldest, share);
  // Unreachable: checkImportShare refused a missing parent.
  if (parent === undefined) throw new Error("sqlite store: no parent to share from");
  const plan = planForkLineage(parent.lineage, parent.row.last_seq, share.throughSeq);
  // The messages are the plain import's: stored as given, their seqs and times kept.
  const head = [...copiedMessages(ctx, parent, plan), ...cmd.messages];
  const delta = { threads: 1, messages: head.length, bytes: bytesOf(head) };
  checkQuotas(ctx.lim, ctx.threads.usage(cmd.namespace), delta);
  const state: ThreadState = importedState(cmd, randomUUID());
  if (cmd.parent !== undefined) state.parent = { ...cmd.parent };
  const written = writeForkThread(ctx, cmd.namespace, parent, share.throughSeq, plan, state, head);
  ctx.threads.use(cmd.namespace, delta, written.key);
  // Every stored seq, the shared ones included: from the parent's oldest.
  const event = ctx.events.log(cmd.namespace, cmd.threadId, cmd.now, {
    type: "messages_added",
    firstSeq: floorOf(written.lineage, cmd.lastSeq),
    lastSeq: cmd.lastSeq,
  });
  return { value: true, events: [event], ended: written.parentEnded };
}
