import { isExpired } from "../../core/ttl.js";
import type { Labels, ThreadState } from "../../core/types.js";
import { livePage } from "../live-page.js";
import { READ_SLACK, type ReadView, type ThreadSnapshot } from "../store.js";
import { asArray, asString, decodeThread } from "./codec.js";
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
  const args =
    view === undefined
      ? [""]
      : ["view", view.limit === undefined ? "" : String(view.limit), String(READ_SLACK)];
  const reply = await ctx.io.run(READ, [k.thread(threadId), k.messages(threadId)], args);
  if (reply === null) return undefined;
  const [thread, entries, complete] = asArray(reply);
  const state = decodeThread(thread);
  if (isExpired(state, Date.now())) return undefined;
  return {
    thread: state,
    messages: asArray(entries).map((e) => ctx.decoded.get(state.incarnation, asString(e))),
    complete: complete === 1,
  };
}

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
