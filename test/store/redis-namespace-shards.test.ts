import { randomUUID } from "node:crypto";
import { createClient } from "redis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config.js";
import { MemoryError } from "../../src/core/errors.js";
import { createRedisStore, type RedisStoreOptions } from "../../src/store/redis/index.js";
import { keySlot, SLOTS } from "../../src/store/redis/key-slot.js";
import { keyLayout, shardIndex } from "../../src/store/redis/keys.js";
import type { Store, StoreLimits } from "../../src/store/store.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";
import { appendCommands, user, window20 } from "./fixtures.js";

/**
 * What the contract leaves to a sharded namespace (--redis-namespace-shards,
 * store/redis/keys.ts), on a real redis-server: the layout, the quota shares,
 * the recorded shard count, and forks across shards. The contract suites run
 * on 4 shards in contract/backends.ts and on the cluster with 3.
 */
let server: RedisServer;
beforeAll(async () => {
  server = await startRedisServer();
}, 30_000);
afterAll(async () => {
  await server?.stop();
});

const cmd = appendCommands(window20);
const open = (
  limits: Partial<StoreLimits> = {},
  options: RedisStoreOptions = {},
  prefix = `shards-${randomUUID()}`,
) => createRedisStore(server.url, limits, { keyPrefix: prefix, ...options });

describe("the sharded key layout", () => {
  it("puts each shard in its own slot, spread evenly, and a thread's keys in its shard's", () => {
    const keys = keyLayout("wm", true, 4);
    const shards = keys.shardsOf("tenant");
    expect(shards.map((k) => k.shard)).toEqual([0, 1, 2, 3]);
    const slots = shards.map((k) => keySlot(k.base));
    const spread = slots.map((s) => (s - (slots[0] ?? 0) + SLOTS) % SLOTS);
    expect(spread).toEqual([0, 4096, 8192, 12288]);
    for (const id of ["a", "b", "thread-7", "é"]) {
      const k = keys.forThread("tenant", id);
      expect(k.shard).toBe(shardIndex(id, 4));
      for (const key of [
        k.thread(id),
        k.messages(id),
        k.requests(id),
        k.lease(id),
        k.events,
        k.usage,
      ]) {
        expect(keySlot(key), key).toBe(keySlot(k.base));
      }
    }
    // Namespaces whose shards share a slot keep apart.
    expect(keys.shardsOf("other").map((k) => k.base)).not.toContain(shards[0]?.base);
    // One shard is today's layout: `{ns-<namespace>}`.
    expect(keyLayout("wm", true, 1).forThread("tenant", "a").base).toBe(
      `wm:{ns-${Buffer.from("tenant").toString("base64url")}}:`,
    );
  });

  it("makes a namespace's keys once and keeps those of the last 4,096 namespaces, sharded or not", () => {
    for (const shards of [1, 4]) {
      const keys = keyLayout("wm", false, shards);
      const first = keys.forThread("tenant", "a");
      expect(keys.forThread("tenant", "a")).toBe(first);
      expect(keys.shardsOf("tenant")).toBe(keys.shardsOf("tenant"));
      expect(first.thread("a")).toBe(`${first.base}t:a`);
      // Bounded: past 4,096 namespaces they are made again, alike.
      for (let i = 0; i < 4096; i++) keys.forThread(`other-${i}`, "a");
      const again = keys.forThread("tenant", "a");
      expect(again).not.toBe(first);
      expect(again.base).toBe(first.base);
    }
  });

  it("spreads threads over the shards about evenly", () => {
    const counts = [0, 0, 0, 0];
    for (let i = 0; i < 4000; i++) {
      const shard = shardIndex(`thread-${i}`, 4);
      counts[shard] = (counts[shard] ?? 0) + 1;
    }
    for (const c of counts) expect(c).toBeGreaterThan(800);
  });
});

describe("quotas of a sharded namespace", () => {
  it("enforces each shard's share, so the namespace never holds more than its limit", async () => {
    const store = await open({ maxThreadsPerNamespace: 10 }, { namespaceShards: 4 });
    try {
      // Shares of 10 over 4 shards: 3, 3, 2, 2.
      const held = [0, 0, 0, 0];
      let refused = 0;
      for (let i = 0; i < 80; i++) {
        const threadId = `t${i}`;
        const shard = shardIndex(threadId, 4);
        try {
          await store.append({ ...cmd({ messages: [user("x")] }), threadId });
          held[shard] = (held[shard] ?? 0) + 1;
        } catch (err) {
          expect(err).toBeInstanceOf(MemoryError);
          const e = err as MemoryError;
          expect(e.code).toBe("resource_exhausted");
          expect(e.message).toContain("max_threads_per_namespace (10)");
          expect(e.message).toContain(`share (${shard < 2 ? 3 : 2})`);
          expect(e.message).toContain("--redis-namespace-shards");
          refused++;
        }
      }
      expect(held).toEqual([3, 3, 2, 2]);
      expect(refused).toBe(70);
      expect(await store.listThreads("ns", "", 100)).toHaveLength(10);
      // Clear gives the shard its room back.
      const inShard0 = (await store.listThreads("ns", "", 100)).find(
        (id) => shardIndex(id, 4) === 0,
      );
      expect(inShard0).toBeDefined();
      await store.clear("ns", inShard0 ?? "", 5);
      const next = Array.from({ length: 200 }, (_, i) => `n${i}`).find(
        (id) => shardIndex(id, 4) === 0,
      );
      await store.append({ ...cmd({ messages: [user("x")] }), threadId: next ?? "" });
    } finally {
      await store.close();
    }
  });

  it("is refused at start-up below the shard count, naming the flag", () => {
    const env = { WINDLASS_STORE: `redis://127.0.0.1:${server.port}/0` };
    expect(() =>
      loadConfig(["--redis-namespace-shards", "4", "--max-threads-per-namespace", "3"], env),
    ).toThrow(
      /^--max-threads-per-namespace \/ WINDLASS_MAX_THREADS_PER_NAMESPACE: 3 is below --redis-namespace-shards \(4\)/,
    );
    expect(() => loadConfig(["--redis-namespace-shards", "4"], {})).toThrow(ConfigError);
    expect(() => loadConfig(["--redis-namespace-shards", "65"], env)).toThrow(
      /^--redis-namespace-shards \/ WINDLASS_REDIS_NAMESPACE_SHARDS/,
    );
    const config = loadConfig(["--redis-namespace-shards", "4"], env);
    expect(config.store).toMatchObject({ kind: "redis", namespaceShards: 4 });
  });
});

describe("the recorded shard count", () => {
  it("is fixed by the first start; another count fails, and data from before it counts as 1", async () => {
    const prefix = `shards-${randomUUID()}`;
    const first = await open({}, { namespaceShards: 4 }, prefix);
    await first.append({ ...cmd({ messages: [user("kept")] }), threadId: "a" });
    await first.close();
    await expect(open({}, { namespaceShards: 2 }, prefix)).rejects.toThrow(
      /^--redis-namespace-shards \/ WINDLASS_REDIS_NAMESPACE_SHARDS: .* in 4 shard\(s\), not 2/,
    );
    const again = await open({}, { namespaceShards: 4 }, prefix);
    expect((await again.read("ns", "a"))?.messages.map((m) => m.content)).toEqual(["kept"]);
    await again.close();

    // A prefix written before the count was recorded was unsharded.
    const older = `shards-${randomUUID()}`;
    const unsharded = await open({}, {}, older);
    await unsharded.append({ ...cmd({ messages: [user("old")] }), threadId: "a" });
    await unsharded.close();
    const c = createClient({ url: server.url });
    await c.connect();
    await c.del(`${older}:namespace-shards`);
    await c.quit();
    await expect(open({}, { namespaceShards: 4 }, older)).rejects.toThrow(/in 1 shard\(s\), not 4/);
  });
});

/** A store of 4 namespace shards, open for the cases of the calling describe block. */
function shardedStore(): () => Store {
  let store: Store | undefined;
  beforeAll(async () => {
    store = await open({}, { namespaceShards: 4 });
  });
  afterAll(async () => {
    await store?.close();
  });
  return () => {
    if (store === undefined) throw new Error("the sharded store is not open");
    return store;
  };
}

/** Fork `parent` at `atSeq` into `newThreadId`, with request "fork-1"; everything else the parent's. */
function forkCommand(parent: string, newThreadId: string, atSeq: number, now: number) {
  return {
    namespace: "ns",
    threadId: parent,
    newThreadId,
    atSeq,
    requestId: "fork-1",
    requestHash: "h",
    now,
    expectedLastSeq: undefined,
    strategy: undefined,
    labels: undefined,
    ttlMs: undefined,
  };
}

describe("forks across shards", () => {
  const sharded = shardedStore();

  it("copies the parent's messages into the fork's shard, then both change on their own", async () => {
    const store = sharded();
    const start = await store.headCursor("ns");
    const parent = "p";
    const fork = Array.from({ length: 50 }, (_, i) => `f${i}`).find(
      (id) => shardIndex(id, 4) !== shardIndex(parent, 4),
    ) as string;
    await store.append({
      ...cmd({ messages: Array.from({ length: 30 }, (_, i) => user(`m${i + 1}`)) }),
      threadId: parent,
    });
    const forked = await store.fork(forkCommand(parent, fork, 20, 100));
    expect(forked.thread.lastSeq).toBe(20);
    expect(forked.sharedCount).toBe(20);
    expect(forked.thread.parent?.threadId).toBe(parent);
    // The same request again: the first result, even after the parent changed.
    await store.rewind({
      namespace: "ns",
      threadId: parent,
      toSeq: 5,
      expectedLastSeq: undefined,
      requestId: "",
      requestHash: "",
      now: 101,
    });
    const replayed = await store.fork(forkCommand(parent, fork, 20, 102));
    expect(replayed.replayed).toBe(true);
    expect(replayed.sharedCount).toBe(20);
    await store.append({ ...cmd({ messages: [user("fork's own")] }), threadId: fork });
    const read = await store.read("ns", fork);
    expect(read?.messages.map((m) => m.content)).toEqual([
      ...Array.from({ length: 20 }, (_, i) => `m${i + 1}`),
      "fork's own",
    ]);
    expect((await store.read("ns", parent))?.messages).toHaveLength(5);
    // Listed under its parent though it lives in another shard.
    expect(await store.listThreads("ns", "", 10, undefined, parent)).toEqual([fork]);
    const logged = await store.readEvents("ns", start, 100);
    expect(logged.filter((e) => e.type === "thread_forked").map((e) => e.threadId)).toEqual([fork]);
  });
});

describe("Watch cursors of a sharded namespace", () => {
  const sharded = shardedStore();

  it("resumes after any event's cursor, in pages or whole, each thread's events in order", async () => {
    const store = sharded();
    const start = await store.headCursor("ns");
    const threads = Array.from({ length: 12 }, (_, i) => `w${i}`);
    expect(new Set(threads.map((t) => shardIndex(t, 4))).size).toBe(4);
    for (let round = 0; round < 5; round++) {
      await Promise.all(
        threads.map((threadId) =>
          store.append({ ...cmd({ messages: [user(`${threadId}-${round}`)] }), threadId }),
        ),
      );
    }
    const all = await store.readEvents("ns", start, 1000);
    expect(all).toHaveLength(60);
    for (const threadId of threads) {
      const seqs = all
        .filter((e) => e.threadId === threadId)
        .map((e) => (e.type === "messages_added" ? e.firstSeq : 0));
      expect(seqs, threadId).toEqual([1, 2, 3, 4, 5]);
    }
    // In pages of 7, following each page's last cursor: the same events.
    const paged: string[] = [];
    for (let cursor = start; ; ) {
      const page = await store.readEvents("ns", cursor, 7);
      paged.push(...page.map((e) => e.cursor));
      const last = page.at(-1);
      if (last === undefined) break;
      cursor = last.cursor;
    }
    expect(paged).toEqual(all.map((e) => e.cursor));
    // From any event's cursor: exactly the events after it.
    for (const i of [0, 13, 29, 58, 59]) {
      const after = await store.readEvents("ns", all[i]?.cursor ?? "", 1000);
      expect(
        after.map((e) => e.cursor),
        String(i),
      ).toEqual(all.slice(i + 1).map((e) => e.cursor));
    }
    expect(await store.readEvents("ns", await store.headCursor("ns"), 10)).toEqual([]);
  });

  it("refuses an unsharded-looking, a short and a long cursor, and a huge one at once", async () => {
    const store = sharded();
    await store.append({ ...cmd({ messages: [user("x")] }), threadId: "a" });
    const head = await store.headCursor("ns");
    const [storeId, positions, mac] = head.split(".");
    const parts = (positions ?? "").split("_");
    expect(parts).toHaveLength(4);
    const refused = [
      `${storeId}.${parts[0]}.${mac}`,
      `${storeId}.${parts.slice(0, 3).join("_")}.${mac}`,
      `${storeId}.${[...parts, "0"].join("_")}.${mac}`,
    ];
    for (const token of refused) {
      const err = await store.readEvents("ns", token, 10).catch((e: unknown) => e);
      expect(err, token).toBeInstanceOf(MemoryError);
      expect((err as MemoryError).code, token).toBe("invalid_argument");
      expect((err as MemoryError).field, token).toBe("resume_token");
    }
    // A cursor of a million positions is refused by the pattern's bound, in linear time.
    const huge = `${storeId}.${Array.from({ length: 1_000_000 }, () => "1").join("_")}.${mac}`;
    const t0 = performance.now();
    const err = await store.readEvents("ns", huge, 10).catch((e: unknown) => e);
    expect((err as MemoryError).code).toBe("invalid_argument");
    expect(performance.now() - t0).toBeLessThan(1000);
  });
});
