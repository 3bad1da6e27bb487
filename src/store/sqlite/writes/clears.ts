import { isExpired } from "../../../core/ttl.js";
import { expiryOf, type ThreadRow } from "../codec.js";
import type { WriteContext } from "./context.js";
import type { Committed, LoggedEvent } from "./outcomes.js";

/**
 * The writes that remove threads: Clear, one batch of Clear(all), the TTL
 * sweep of one thread, and the removal of an expired thread an Add finds.
 * Each thread's messages, records and labels go with it by cascade.
 */

/** Clear of one thread: whether it existed. */
export function clearThread(
  ctx: WriteContext,
  namespace: string,
  threadId: string,
  now: number,
): Committed<boolean> {
  const row = ctx.threads.get(namespace, threadId);
  if (row === undefined) return { value: false, events: [] };
  ctx.threads.delete(namespace, row);
  return {
    value: true,
    events: [ctx.events.log(namespace, threadId, now, { type: "thread_cleared" })],
    ended: [row.incarnation],
  };
}

/** One batch of clearAll: the first `limit` threads of the namespace in byte order. */
export function clearBatch(
  ctx: WriteContext,
  namespace: string,
  now: number,
  limit: number,
): Committed<number> {
  // SQLite's BINARY collation compares UTF-8 bytes: the order ListThreads promises.
  const threads = ctx.threads.first(namespace, limit);
  for (const t of threads) ctx.threads.delete(namespace, t);
  return {
    value: threads.length,
    events: threads.map((t) =>
      ctx.events.log(namespace, t.thread_id, now, { type: "thread_cleared" }),
    ),
    ended: threads.map((t) => t.incarnation),
  };
}

/** The sweep of one thread found due: removed only if it is still expired (not written since). */
export function sweepOne(
  ctx: WriteContext,
  namespace: string,
  threadId: string,
  now: number,
): Committed<boolean> {
  const expired = expireIfDue(ctx, namespace, threadId, now);
  if (expired === undefined) return { value: false, events: [] };
  return { value: true, events: [expired.event], ended: [expired.incarnation] };
}

/**
 * Removes the thread if it has expired at `now` (core/ttl.ts isExpired),
 * logging thread_cleared {reason: expired}; `row` is the thread's row when
 * the caller has read it already.
 */
export function expireIfDue(
  ctx: WriteContext,
  namespace: string,
  threadId: string,
  now: number,
  row: ThreadRow | undefined = ctx.threads.get(namespace, threadId),
): { event: LoggedEvent; incarnation: string } | undefined {
  if (row === undefined || !isExpired(expiryOf(row), now)) return undefined;
  ctx.threads.delete(namespace, row);
  const event = ctx.events.log(namespace, threadId, now, {
    type: "thread_cleared",
    reason: "expired",
  });
  return { event, incarnation: row.incarnation };
}
