import { isExpired } from "../../core/ttl.js";
import type { Labels, ThreadState } from "../../core/types.js";
import { livePage } from "../live-page.js";
import { READ_SLACK, type ReadView, type ThreadSnapshot } from "../store.js";
import { asArray, asString, decodeThread } from "./codec.js";
import type { RedisContext } from "./context.js";
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
  const k = ctx.keys.namespace(namespace);
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
    await ctx.io.command(["HGETALL", ctx.keys.namespace(namespace).thread(threadId)]),
  );
  const thread = fields.length === 0 ? undefined : decodeThread(fields);
  return thread === undefined || isExpired(thread, Date.now()) ? undefined : thread;
}

export async function listThreads(
  ctx: RedisContext,
  namespace: string,
  after: string,
  limit: number,
  labels?: Labels,
  forksOf?: string,
): Promise<string[]> {
  if (limit <= 0) return [];
  const k = ctx.keys.namespace(namespace);
  // The forks index is a zset like a label's: intersected the same way.
  const sets = Object.entries(labels ?? {}).map(([key, v]) => k.label(key, v));
  if (forksOf !== undefined && forksOf !== "") sets.push(k.forks(forksOf));
  const fetch =
    sets.length > 0
      ? async (from: string, n: number) =>
          asArray(await ctx.io.run(LIST_LABELED, sets, [from, String(n)])).map(asString)
      : async (from: string, n: number) =>
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
  const now = Date.now();
  return livePage(after, limit, fetch, async (ids) => {
    // Expire times of the page's threads (nil: no ttl), from the sorted
    // set the sweep reads: one more command per page.
    const scores = asArray(await ctx.io.command(["ZMSCORE", k.expiry, ...ids]));
    return scores.map((v) => v !== null && Number(asString(v)) <= now);
  });
}
