import { randomUUID } from "node:crypto";
import { checkQuotas } from "../../../core/quota.js";
import { importDelta } from "../../../core/usage.js";
import type { ImportThreadCommand } from "../../store.js";
import type { WriteContext } from "./context.js";
import type { Committed } from "./outcomes.js";

/**
 * Store.importThread: the whole thread as given, under a new incarnation,
 * unless the namespace has one of that id (then nothing changes); counted
 * by the quotas like an Add. A `parent` origin is kept and indexed, nothing shared.
 */
export function importThread(ctx: WriteContext, cmd: ImportThreadCommand): Committed<boolean> {
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
