import { CLEAR_BATCH } from "../store.js";
import { asArray, asString } from "./codec.js";
import { beginWrite, type RedisContext } from "./context.js";
import type { NamespaceKeys } from "./keys.js";
import { CLEAR, CLEAR_CHUNK, EXPIRE_DUE } from "./lua/clears.js";

/** The Redis store's removals: Store.clear, clearAll in atomic chunks, and the TTL sweep. */

export async function clearThread(
  ctx: RedisContext,
  namespace: string,
  threadId: string,
  now: number,
): Promise<boolean> {
  const k = ctx.keys.forThread(namespace, threadId);
  const write = ctx.replicas === undefined ? ctx.unconfirmed : await beginWrite(ctx, k);
  const reply = await ctx.io.run(
    CLEAR,
    [
      k.thread(threadId),
      k.messages(threadId),
      k.requests(threadId),
      k.requestTimes(threadId),
      k.threads,
      k.events,
      k.usage,
    ],
    [threadId, String(now), String(ctx.lim.eventRetention)],
    write.link,
  );
  await write.confirm();
  return reply === 1;
}

/**
 * Clear all: each shard of the namespace (keys.ts) in turn, in chunks.
 * Chunks keep each script short, so one big namespace never blocks Redis
 * for long; each chunk is atomic on its own.
 */
export async function clearAll(ctx: RedisContext, namespace: string, now: number): Promise<number> {
  let total = 0;
  for (const k of ctx.keys.shardsOf(namespace)) total += await clearShard(ctx, k, now);
  return total;
}

async function clearShard(ctx: RedisContext, k: NamespaceKeys, now: number): Promise<number> {
  let total = 0;
  const write = ctx.replicas === undefined ? ctx.unconfirmed : await beginWrite(ctx, k);
  for (;;) {
    const n = Number(
      await ctx.io.run(
        CLEAR_CHUNK,
        [k.threads, k.events, k.usage],
        [k.base, String(now), String(ctx.lim.eventRetention), String(CLEAR_BATCH)],
        write.link,
      ),
    );
    total += n;
    if (n < CLEAR_BATCH) {
      await write.confirm();
      return total;
    }
  }
}

/** Walks the namespaces that have had a thread with a ttl (keys.ts ttl-namespaces), each of their shards. */
export async function sweepExpired(ctx: RedisContext, now: number, limit: number): Promise<number> {
  let removed = 0;
  let cursor = "0";
  do {
    const [next, names] = asArray(
      await ctx.io.command(["SSCAN", ctx.keys.ttlNamespaces, cursor, "COUNT", "100"]),
    );
    cursor = asString(next);
    for (const namespace of asArray(names).map(asString)) {
      for (const k of ctx.keys.shardsOf(namespace)) {
        if (removed >= limit) return removed;
        removed += Number(
          await ctx.io.run(
            EXPIRE_DUE,
            [k.expiry, k.threads, k.events, k.usage],
            [k.base, String(now), String(ctx.lim.eventRetention), String(limit - removed)],
          ),
        );
      }
    }
  } while (cursor !== "0");
  return removed;
}
