import { MemoryError } from "../../core/errors.js";
import type { MemoryEvent } from "../../core/types.js";
import { asArray, asString, decodeEvent, streamPosition } from "./codec.js";
import { confirmRead, type RedisContext } from "./context.js";
import { historyLost } from "./incarnation.js";
import type { NamespaceKeys } from "./keys.js";
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
  const tokens = ctx.incarnation.tokens;
  const shards = ctx.keys.shardsOf(namespace);
  if (shards.length > 1) return readShardedEvents(ctx, namespace, shards, cursor, limit);
  const k = shards[0] as NamespaceKeys;
  const position = tokens.open(namespace, cursor);
  const entries = await readLog(ctx, k, position, limit);
  const events = entries
    .map((e) => decodeEvent(e, (p) => tokens.issue(namespace, p)))
    .slice(0, Math.max(0, limit));
  if (events.length > 0) await confirmRead(ctx, k);
  return events;
}

/**
 * The entries of one shard's log after `position`, at most `limit` (more
 * than one shard: see readShardedEvents); throws out_of_range when the log
 * no longer holds what follows `position`, or holds another history.
 */
async function readLog(
  ctx: RedisContext,
  k: NamespaceKeys,
  position: number,
  limit: number,
): Promise<unknown[]> {
  const issuedIn = ctx.incarnation.value;
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
  return asArray(entries).slice(0, Math.max(0, limit));
}

/**
 * readEvents of a namespace split into shards (keys.ts): each shard keeps a
 * log of its own threads' events, numbered on its own, and the cursor holds
 * one position per shard (resume-token.ts issueVector). Every shard's log
 * is read after its position at once (one READ_EVENTS each), and the
 * events are merged by time (ties: lower shard first), each shard's in its
 * own order, cut to `limit`; each event's cursor is the vector after it.
 * So a thread's events (all in one shard) keep their order, a resume from
 * any event's cursor misses nothing and repeats nothing, and events of
 * threads in different shards are ordered by their time only.
 */
async function readShardedEvents(
  ctx: RedisContext,
  namespace: string,
  shards: readonly NamespaceKeys[],
  cursor: string,
  limit: number,
): Promise<MemoryEvent[]> {
  const tokens = ctx.incarnation.tokens;
  const at = tokens.openVector(namespace, cursor, shards.length);
  const logs = await Promise.all(shards.map((k, i) => readLog(ctx, k, at[i] ?? 0, limit)));
  const next = logs.map(() => 0);
  const read = new Set<number>();
  const events: MemoryEvent[] = [];
  while (events.length < limit) {
    let pick = -1;
    let pickTime = Number.POSITIVE_INFINITY;
    logs.forEach((log, i) => {
      const e = log[next[i] ?? 0];
      if (e === undefined) return;
      const time = entryTime(e);
      if (time < pickTime) {
        pick = i;
        pickTime = time;
      }
    });
    if (pick < 0) break;
    const entry = logs[pick]?.[next[pick] ?? 0];
    next[pick] = (next[pick] ?? 0) + 1;
    read.add(pick);
    const shard = pick;
    events.push(
      decodeEvent(entry, (p) => {
        at[shard] = p;
        return tokens.issueVector(namespace, at);
      }),
    );
  }
  await Promise.all([...read].map((i) => confirmRead(ctx, shards[i] as NamespaceKeys)));
  return events;
}

/** An event entry's time field (its logging time, ms). */
function entryTime(entry: unknown): number {
  const flat = asArray(asArray(entry)[1]);
  for (let i = 0; i + 1 < flat.length; i += 2) {
    if (flat[i] === "time") return Number(flat[i + 1]);
  }
  return 0;
}

/** A shard's head stream id and the incarnation it belongs to, adopting a changed one. */
export async function head(ctx: RedisContext, k: NamespaceKeys, attempt = 0): Promise<string> {
  const [last, found] = asArray(await ctx.io.run(HEAD, [k.events, k.incarnationMarker], []));
  if (found !== ctx.incarnation.value) {
    // Another replica may be rotating at the same time: a few rounds, then unavailable.
    if (attempt >= HEAD_ATTEMPTS) {
      throw new MemoryError("unavailable", "the redis store's incarnation is changing; retry");
    }
    await ctx.incarnation.markerMissed(ctx.incarnation.value, k.incarnationMarker, found, true);
    return head(ctx, k, attempt + 1);
  }
  return asString(last);
}

const HEAD_ATTEMPTS = 5;

/** Store.headCursor: the namespace's head (every shard's, in a vector, when sharded). */
export async function headCursor(ctx: RedisContext, namespace: string): Promise<string> {
  const shards = ctx.keys.shardsOf(namespace);
  const positions = await Promise.all(
    shards.map(async (k) => {
      const at = await head(ctx, k);
      // A token at an event a failover could take back would be ahead of the new primary's head.
      await confirmRead(ctx, k);
      return streamPosition(at);
    }),
  );
  const tokens = ctx.incarnation.tokens;
  return positions.length === 1
    ? tokens.issue(namespace, positions[0] ?? 0)
    : tokens.issueVector(namespace, positions);
}
