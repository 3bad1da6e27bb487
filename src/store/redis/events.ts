import { MemoryError } from "../../core/errors.js";
import type { MemoryEvent } from "../../core/types.js";
import { asArray, asString, decodeEvent, streamPosition } from "./codec.js";
import { confirmRead, type RedisContext } from "./context.js";
import { historyLost } from "./incarnation.js";
import { HEAD, READ_EVENTS } from "./lua/events.js";

/**
 * The namespace event log's reads (Store.readEvents, headCursor): one
 * stream per namespace (keys.ts `B log`), keeping at least eventRetention
 * entries (trimmed in batches of at least 64 or an eighth of that). Entry
 * ids are "0-<n>" (XADD 0-*): n counts the namespace's own events, with no
 * clock in it. A cursor (resume-token.ts) is n signed with the store's
 * incarnation (incarnation.ts), so it means the same on every replica,
 * which is what makes Watch resume tokens portable. Trimming records the
 * newest dropped id as the stream's max-deleted-entry-id (XSETID; Redis
 * 7.0 does not do it on trim), so a cursor below it has lost events after
 * it: out_of_range, never a skip. Streams of earlier versions (`events`,
 * ids from the clock) are deleted when their namespace logs its first
 * event into `log`; their tokens are out_of_range.
 */

export async function readEvents(
  ctx: RedisContext,
  namespace: string,
  cursor: string,
  limit: number,
): Promise<MemoryEvent[]> {
  const position = ctx.incarnation.tokens.open(namespace, cursor);
  const issuedIn = ctx.incarnation.value;
  const k = ctx.keys.namespace(namespace);
  const reply = await ctx.io.run(
    READ_EVENTS,
    [k.events, k.incarnationMarker],
    [`0-${position}`, String(Math.max(1, limit)), issuedIn],
  );
  const [status, entries] = asArray(reply);
  if (status === "lost") {
    // The key no longer holds the incarnation the cursor was checked against.
    await ctx.incarnation.markerMissed(issuedIn, k.incarnationMarker, entries, false);
    throw historyLost();
  }
  if (status === "ahead") {
    // Signed here, so this history once reached it: events were lost since.
    await ctx.incarnation.rotate(issuedIn);
    throw historyLost();
  }
  if (status === "gone") {
    throw new MemoryError(
      "out_of_range",
      "resume_token: the events after it are no longer retained; re-read with Get and watch from now",
      { field: "resume_token" },
    );
  }
  const events = asArray(entries)
    .map((e) => decodeEvent(e, namespace, ctx.incarnation.tokens))
    .slice(0, Math.max(0, limit));
  if (events.length > 0) await confirmRead(ctx, k);
  return events;
}

/** The namespace's head stream id and the incarnation it belongs to, adopting a changed one. */
export async function head(ctx: RedisContext, namespace: string, attempt = 0): Promise<string> {
  const k = ctx.keys.namespace(namespace);
  const [last, found] = asArray(await ctx.io.run(HEAD, [k.events, k.incarnationMarker], []));
  if (found !== ctx.incarnation.value) {
    // Another replica may be rotating at the same time: a few rounds, then unavailable.
    if (attempt >= HEAD_ATTEMPTS) {
      throw new MemoryError("unavailable", "the redis store's incarnation is changing; retry");
    }
    await ctx.incarnation.markerMissed(ctx.incarnation.value, k.incarnationMarker, found, true);
    return head(ctx, namespace, attempt + 1);
  }
  return asString(last);
}

const HEAD_ATTEMPTS = 5;

export async function headCursor(ctx: RedisContext, namespace: string): Promise<string> {
  const at = await head(ctx, namespace);
  // A token at an event a failover could take back would be ahead of the new primary's head.
  await confirmRead(ctx, ctx.keys.namespace(namespace));
  return ctx.incarnation.tokens.issue(namespace, streamPosition(at));
}
