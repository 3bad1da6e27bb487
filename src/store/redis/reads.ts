import { MemoryError } from "../../core/errors.js";
import { recallSize } from "../../core/recall.js";
import { isExpired } from "../../core/ttl.js";
import type { Labels, StoredMessage, ThreadState } from "../../core/types.js";
import { livePage } from "../live-page.js";
import { READ_SLACK, type ReadView, type ThreadSnapshot } from "../store.js";
import {
  asArray,
  asString,
  decodeThread,
  decodeThreadValues,
  LINEAGE_INDEX,
  THREAD_FIELDS,
} from "./codec.js";
import type { RedisContext } from "./context.js";
import { type NamespaceKeys, shardIndex } from "./keys.js";
import { LIST_LABELED } from "./lua/list-labeled.js";
import { READ } from "./lua/read.js";

/**
 * The Redis store's reads: Store.read (one script: the thread and the
 * messages a view needs), getThread, listThreads. An expired thread is
 * gone for them whether or not the sweep has removed it yet.
 */

export async function readThread(
  ctx: RedisContext,
  namespace: string,
  threadId: string,
  view?: ReadView,
): Promise<ThreadSnapshot | undefined> {
  const k = ctx.keys.forThread(namespace, threadId);
  const threadKey = k.thread(threadId);
  const messagesKey = k.messages(threadId);
  if (view !== undefined && ctx.readTails.enabled) {
    const tail = ctx.readTails.get(threadKey);
    if (tail !== undefined) {
      let read: ThreadSnapshot | undefined | "script";
      try {
        read = await readTail(ctx, threadKey, messagesKey, tail, view);
      } catch (err) {
        if (err instanceof MemoryError) throw err;
        // MULTI refused for good (a proxy in front of a cluster without it,
        // a Redis with it renamed or denied by ACL): reads go by script from
        // now on. Any other failure (an EXECABORT because Redis was loading)
        // sends this read to the script only.
        if (refusesMulti(err)) ctx.readTails.disable();
        read = "script";
      }
      if (read !== "script") return read;
    }
  }
  const args =
    view === undefined
      ? [""]
      : ["view", view.limit === undefined ? "" : String(view.limit), String(READ_SLACK)];
  const reply = await ctx.io.run(READ, [threadKey, messagesKey], args);
  if (reply === null) return undefined;
  const [thread, entries, complete] = asArray(reply);
  const state = decodeThread(thread);
  const list = asArray(entries);
  if (view !== undefined && ctx.readTails.enabled && !hasLineage(thread)) {
    ctx.readTails.set(threadKey, tailSize(state, view.limit, list.length));
  }
  if (isExpired(state, Date.now())) return undefined;
  return {
    thread: state,
    messages: list.map((e) => ctx.decoded.get(state.incarnation, asString(e))),
    complete: complete === 1,
  };
}

/**
 * A Get's read without Lua: the thread's fields (an HMGET of THREAD_FIELDS),
 * the list's length and its last `tail` entries in one MULTI (what this
 * thread's last Get needed; see tailSize), cut to the window the READ
 * script would have returned (windowStart mirrors it). Redis copies a script's replies
 * through Lua, which costs it several times the commands themselves
 * (bench/redis-read-cost.ts). "script" when the tail fell short of the window (a summary
 * thread's unfolded turns grew past it) or the thread has frozen segments
 * (forks.ts): the READ script answers those.
 */
async function readTail(
  ctx: RedisContext,
  threadKey: string,
  messagesKey: string,
  tail: number,
  view: ReadView,
): Promise<ThreadSnapshot | undefined | "script"> {
  const [thread, length, entries] = await ctx.io.atomic([
    ["HMGET", threadKey, ...THREAD_FIELDS],
    ["LLEN", messagesKey],
    ["LRANGE", messagesKey, String(-tail), "-1"],
  ]);
  const values = asArray(thread);
  // To the script: a thread with frozen segments (it reads across them), and a
  // hash with none of the fields, which is no thread (or a damaged one: the
  // script refuses it as before); the script gives a missing thread no tail size.
  if (values.every((v) => v === null) || values[LINEAGE_INDEX] !== null) {
    ctx.readTails.delete(threadKey);
    return "script";
  }
  const state = decodeThreadValues(values);
  const len = Number(length);
  const start = windowStart(state, len, view.limit);
  const fetchedFrom = Math.max(0, len - tail);
  if (fetchedFrom > start) return "script";
  ctx.readTails.set(threadKey, tailSize(state, view.limit, len - start));
  if (isExpired(state, Date.now())) return undefined;
  const list = asArray(entries);
  const messages = new Array<StoredMessage>(list.length - (start - fetchedFrom));
  for (let i = start - fetchedFrom, j = 0; i < list.length; i++, j++) {
    messages[j] = ctx.decoded.get(state.incarnation, asString(list[i]));
  }
  return { thread: state, messages, complete: start === 0 };
}

/**
 * Entries a tail read asks for beyond what the thread's last Get needed,
 * where that grows with every Add: a summary thread's reach goes back to
 * its first unfolded message (until a fold), and a read of every message
 * (recall size 0) reaches the whole thread.
 */
const TAIL_MARGIN = 8;

/**
 * The size of a thread's next tail read, after a read that needed `needed`
 * entries: a window's or buffer's reach (recall size plus READ_SLACK, the
 * same however long the thread grows), else what was needed plus
 * TAIL_MARGIN.
 */
function tailSize(state: ThreadState, limit: number | undefined, needed: number): number {
  const size = recallSize(state.strategy, limit);
  if (state.strategy.kind === "summary" || size === 0) return needed + TAIL_MARGIN;
  return size + READ_SLACK;
}

/**
 * The list index a windowed read starts at, as the READ script (lua/read.ts)
 * works it out for a thread without frozen segments: the recall size plus
 * READ_SLACK from the end, and for a summary thread no later than its first
 * unfolded message.
 */
export function windowStart(state: ThreadState, len: number, limit: number | undefined): number {
  const size = recallSize(state.strategy, limit);
  let start = size > 0 ? Math.max(0, len - size - READ_SLACK) : 0;
  if (state.strategy.kind === "summary") {
    const firstSeq = state.lastSeq - len + 1;
    start = Math.min(start, Math.max(0, state.summarizedThroughSeq + 1 - firstSeq));
  }
  return start;
}

/** Whether Redis (or a proxy) refuses transactions outright, rather than this one. */
export function refusesMulti(err: unknown): boolean {
  const cause = err instanceof Error && err.cause instanceof Error ? err.cause : err;
  return (
    cause instanceof Error &&
    /^(ERR unknown command|ERR EXEC without MULTI|NOPERM|ERR .*not (supported|allowed))/i.test(
      cause.message,
    )
  );
}

/** Whether a thread hash (HGETALL's flat array) has frozen segments (a `lineage` field). */
function hasLineage(flat: unknown): boolean {
  const fields = asArray(flat);
  for (let i = 0; i < fields.length; i += 2) if (fields[i] === "lineage") return true;
  return false;
}

/**
 * How many entries from the end each thread's last windowed read needed,
 * by thread key: the size of its next tail read. Bounded; the oldest entry
 * goes first. A hint only: every tail read checks it against the thread.
 */
export class ReadTails {
  readonly #sizes = new Map<string, number>();
  #enabled: boolean;

  /** `enabled`: whether the connection can send a MULTI (Commands.atomicSupported). */
  constructor(
    readonly max: number,
    enabled: boolean,
  ) {
    this.#enabled = enabled;
  }

  /** False where MULTI cannot go (Sentinel, Cluster) or was refused: every read is the script's then. */
  get enabled(): boolean {
    return this.#enabled;
  }

  disable(): void {
    this.#enabled = false;
    this.#sizes.clear();
  }

  get(threadKey: string): number | undefined {
    return this.#sizes.get(threadKey);
  }

  set(threadKey: string, size: number): void {
    if (this.#sizes.get(threadKey) === size) return;
    this.#sizes.delete(threadKey);
    this.#sizes.set(threadKey, size);
    if (this.#sizes.size > this.max) {
      const oldest = this.#sizes.keys().next();
      if (oldest.done !== true) this.#sizes.delete(oldest.value);
    }
  }

  delete(threadKey: string): void {
    this.#sizes.delete(threadKey);
  }
}

/** Threads whose read size is remembered (a Map entry each: ~100 bytes). */
export const READ_TAILS_KEPT = 10_000;

export async function getThread(
  ctx: RedisContext,
  namespace: string,
  threadId: string,
): Promise<ThreadState | undefined> {
  const fields = asArray(
    await ctx.io.command(["HGETALL", ctx.keys.forThread(namespace, threadId).thread(threadId)]),
  );
  const thread = fields.length === 0 ? undefined : decodeThread(fields);
  return thread === undefined || isExpired(thread, Date.now()) ? undefined : thread;
}

/**
 * Store.listThreads. A namespace of one shard: one ZRANGE BYLEX (or one
 * LIST_LABELED with labels or forksOf) and one ZMSCORE per page. A sharded
 * namespace (keys.ts): the same in every shard, at once, each asked for a
 * whole page; the pages are merged in byte order and cut to the page, so a
 * page costs N shards' reads of at most `limit` ids each (O(N (log n +
 * limit))). The forks index of a sharded namespace is per shard too (a fork
 * is indexed in its own shard), merged the same way.
 */
export async function listThreads(
  ctx: RedisContext,
  namespace: string,
  after: string,
  limit: number,
  labels?: Labels,
  forksOf?: string,
): Promise<string[]> {
  if (limit <= 0) return [];
  const shards = ctx.keys.shardsOf(namespace);
  const fetchers = shards.map((k) => shardPage(ctx, k, labels, forksOf));
  const fetch =
    fetchers.length === 1
      ? (fetchers[0] as PageFetch)
      : async (from: string, n: number) =>
          mergedPage(await Promise.all(fetchers.map((f) => f(from, n))), n);
  const now = Date.now();
  return livePage(after, limit, fetch, async (ids) => {
    // Expire times of the page's threads (nil: no ttl), from the sorted
    // set the sweep reads: one more command per page (per shard it spans).
    const byShard = new Map<number, number[]>();
    ids.forEach((id, i) => {
      const shard = shardIndex(id, shards.length);
      const at = byShard.get(shard);
      if (at === undefined) byShard.set(shard, [i]);
      else at.push(i);
    });
    const gone = new Array<boolean>(ids.length).fill(false);
    await Promise.all(
      [...byShard].map(async ([shard, at]) => {
        const k = shards[shard] as NamespaceKeys;
        const scores = asArray(
          await ctx.io.command(["ZMSCORE", k.expiry, ...at.map((i) => ids[i] ?? "")]),
        );
        scores.forEach((v, j) => {
          gone[at[j] ?? 0] = v !== null && Number(asString(v)) <= now;
        });
      }),
    );
    return gone;
  });
}

type PageFetch = (after: string, limit: number) => Promise<string[]>;

/** Ids of one shard after a cursor, in byte order. */
function shardPage(
  ctx: RedisContext,
  k: NamespaceKeys,
  labels?: Labels,
  forksOf?: string,
): PageFetch {
  // The forks index is a zset like a label's: intersected the same way.
  const sets = Object.entries(labels ?? {}).map(([key, v]) => k.label(key, v));
  if (forksOf !== undefined && forksOf !== "") sets.push(k.forks(forksOf));
  return sets.length > 0
    ? async (from, n) =>
        asArray(await ctx.io.run(LIST_LABELED, sets, [from, String(n)])).map(asString)
    : async (from, n) =>
        asArray(
          await ctx.io.command([
            "ZRANGE",
            k.threads,
            from === "" ? "-" : `(${from}`,
            "+",
            "BYLEX",
            "LIMIT",
            "0",
            String(n),
          ]),
        ).map(asString);
}

/** The first `n` ids of shards' pages (each sorted, the shards disjoint), in byte order as ZRANGE BYLEX orders them. */
function mergedPage(pages: string[][], n: number): string[] {
  return pages
    .flat()
    .map((id) => ({ id, bytes: Buffer.from(id, "utf8") }))
    .sort((a, b) => Buffer.compare(a.bytes, b.bytes))
    .slice(0, n)
    .map((e) => e.id);
}
