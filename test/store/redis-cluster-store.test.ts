import { randomUUID } from "node:crypto";
import { createClient } from "redis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { parseStore } from "../../src/config/parsers.js";
import { ConfigError, parseRedisClusterUrl } from "../../src/config.js";
import { MemoryError } from "../../src/core/errors.js";
import type { MemoryEvent } from "../../src/core/types.js";
import { createStore } from "../../src/store/create-store.js";
import { routingKey } from "../../src/store/redis/cluster.js";
import { createRedisStore, type RedisStoreOptions } from "../../src/store/redis/index.js";
import { keySlot, slotTags } from "../../src/store/redis/key-slot.js";
import { keyLayout } from "../../src/store/redis/keys.js";
import type { Store, StoreLimits } from "../../src/store/store.js";
import { type RedisCluster, startRedisCluster } from "../support/redis-cluster.js";
import { runContractSuites } from "./contract/suites.js";
import type { ContractBackend } from "./contract/support.js";
import { appendCommands, user, window20 } from "./fixtures.js";

/**
 * The Redis store on a real Redis Cluster (test/support/redis-cluster.ts:
 * three primaries, three replicas): the shared contract suites with one
 * slot per namespace, then what only a cluster shows: every key of a
 * namespace in one slot, no CROSSSLOT, per-primary WAIT, per-slot log
 * incarnation copies (a slot that lost its data makes every token of the
 * deployment out of range, keys.ts says why).
 */
let cluster: RedisCluster;
beforeAll(async () => {
  cluster = await startRedisCluster();
}, 60_000);
afterAll(async () => {
  await cluster?.stop();
});

const open = (
  limits: Partial<StoreLimits> = {},
  options: RedisStoreOptions = {},
  prefix = `test-${randomUUID()}`,
) => createRedisStore(cluster.url, limits, { keyPrefix: prefix, ...options });

/** A contract backend on this file's cluster (started above, shared with the cases below). */
function onTheCluster(name: string, options: RedisStoreOptions = {}): ContractBackend {
  const nothing = async (): Promise<void> => {};
  return {
    name,
    start: nothing,
    stop: nothing,
    open: (limits) => open(limits, options),
    ...(options.namespaceShards === undefined ? {} : { namespaceShards: options.namespaceShards }),
  };
}

describe("Store contract: redis-cluster", () => runContractSuites(onTheCluster("redis-cluster")));
describe("Store contract: redis-cluster, min replicas 1", () =>
  runContractSuites(onTheCluster("redis-cluster, min replicas 1", { minReplicas: 1 })));
describe("Store contract: redis-cluster, 3 namespace shards", () =>
  runContractSuites(onTheCluster("redis-cluster, 3 namespace shards", { namespaceShards: 3 })));

describe("namespace shards on the cluster", () => {
  it("spreads one namespace's threads over every primary, each thread's keys in one slot", async () => {
    const prefix = `shards-${randomUUID()}`;
    const store = await open({}, { namespaceShards: 3 }, prefix);
    try {
      const threads = Array.from({ length: 30 }, (_, i) => `t${i}`);
      for (const threadId of threads) {
        await store.append({ ...cmd({ messages: [user(threadId)] }), namespace: "busy", threadId });
      }
      const keys = await cluster.keysMatching(`${prefix}:*`);
      const threadKeys = keys.filter((k) => /:t:t\d+$/.test(k.key));
      expect(threadKeys).toHaveLength(threads.length);
      // One namespace, three primaries: a shard on each (keys.ts spreads shard slots evenly).
      expect(new Set(threadKeys.map((k) => k.node.port)).size).toBe(3);
      for (const threadId of threads) {
        const ofThread = keys.filter((k) => k.key.endsWith(`:${threadId}`));
        expect(new Set(ofThread.map((k) => k.slot)).size, threadId).toBe(1);
      }
      const listed: string[] = [];
      for (let after = ""; ; ) {
        const page = await store.listThreads("busy", after, 7);
        listed.push(...page);
        if (page.length < 7) break;
        after = page[page.length - 1] ?? "";
      }
      expect(listed).toEqual([...threads].sort());
      expect(await store.clearAll("busy", 10)).toBe(threads.length);
      expect(await store.listThreads("busy", "", 100)).toEqual([]);
    } finally {
      await store.close();
    }
  });
});

const cmd = appendCommands(window20);

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    return err instanceof MemoryError ? err.code : `not a MemoryError: ${String(err)}`;
  }
  return "resolved";
}

/**
 * Adds of one message each ("<thread>-<i>", request id the same), retried
 * on UNAVAILABLE with the same request id as the clients in clients/ do
 * (up to 30 s); any other failure fails the test.
 */
function retryingAdds(store: Store, namespace: string) {
  const acknowledged = new Set<string>();
  const outcomes = { unavailable: 0 };
  const addOne = async (thread: string, i: number) => {
    for (let attempt = 0; attempt < 600; attempt++) {
      try {
        await store.append({
          ...cmd({ messages: [user(`${thread}-${i}`)], requestId: `${thread}-${i}` }),
          namespace,
          threadId: thread,
        });
        acknowledged.add(`${thread}-${i}`);
        return;
      } catch (err) {
        if (!(err instanceof MemoryError && err.code === "unavailable")) throw err;
        outcomes.unavailable++;
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  };
  return { addOne, acknowledged, outcomes };
}

/** A plain client on the primary that serves `key`, to look at or damage what the store did. */
async function primaryClientOf(key: string) {
  const node = await cluster.primaryOfSlot(keySlot(key));
  const c = createClient({ socket: { host: "127.0.0.1", port: node.port }, RESP: 2 });
  c.on("error", () => {});
  await c.connect();
  return c;
}

describe("redis-cluster:// configuration", () => {
  it("accepts seed nodes, with user:pass@, and names --store for a malformed list", () => {
    const url = "redis-cluster://app:p%40ss@127.0.0.1:7000,node-b:7001,[::1]:7002";
    expect(parseRedisClusterUrl(url)).toEqual({
      nodes: [
        { host: "127.0.0.1", port: 7000 },
        { host: "node-b", port: 7001 },
        { host: "::1", port: 7002 },
      ],
      username: "app",
      password: "p@ss",
    });
    const redis = { minReplicas: 1, replicaWaitMs: 500, namespaceShards: 1 };
    expect(parseStore("redis-cluster://h:1/", 0, redis, 1)).toEqual({
      kind: "redis",
      url: "redis-cluster://h:1/",
      ...redis,
    });
    for (const bad of [
      "redis-cluster://:s3cret@",
      "redis-cluster://:s3cret@a:1,,b:2",
      "redis-cluster://:s3cret@a:99999",
      "redis-cluster://:s3cret@a",
      "redis-cluster://:s3cret@a:1/0",
    ]) {
      expect(() => parseStore(bad, 0, redis, 1), bad).toThrow(ConfigError);
      expect(() => parseStore(bad, 0, redis, 1), bad).toThrow(/^--store \/ WINDLASS_STORE/);
      expect(() => parseStore(bad, 0, redis, 1), bad).not.toThrow(/s3cret/);
    }
  });

  it("routes each command by its first key, and computes slots as the cluster does", async () => {
    expect(routingKey(["EVALSHA", "sha", "2", "k1", "k2", "a"])).toBe("k1");
    expect(routingKey(["EVALSHA", "sha", "0", "a"])).toBeUndefined();
    expect(routingKey(["FCALL", "windlass_append_0", "2", "k1", "k2", "a"])).toBe("k1");
    expect(routingKey(["FUNCTION", "LOAD", "REPLACE", "#!lua name=x"])).toBeUndefined();
    expect(routingKey(["XREAD", "COUNT", "5", "BLOCK", "1", "STREAMS", "s", "0-0"])).toBe("s");
    expect(routingKey(["HGETALL", "h"])).toBe("h");
    expect(routingKey(["INFO", "server"])).toBeUndefined();
    const keys = keyLayout("wm", true);
    for (const key of [
      "plain",
      keys.incarnation,
      keys.ttlNamespaces,
      keys.ttlFence,
      keys.namespace("n{a}m").thread("t"),
      keys.namespace("").events,
      "{}x",
      "a{}{b}",
      "ünï{cödé}",
    ]) {
      expect(keySlot(key), key).toBe(await cluster.keySlot(key));
    }
    expect(keySlot(keys.ttlFence)).toBe(keySlot(keys.ttlNamespaces));
    // Every slot has a tag of its own, so each namespace's copy of the incarnation is in its slot.
    const tags = slotTags();
    expect(tags.map(keySlot)).toEqual(Array.from({ length: 16384 }, (_, slot) => slot));
    for (const ns of ["", "a", "n{a}m", "ünï"]) {
      const k = keys.namespace(ns);
      expect(await cluster.keySlot(k.incarnationMarker), ns).toBe(await cluster.keySlot(k.base));
      expect(await cluster.keySlot(k.replicationFence), ns).toBe(await cluster.keySlot(k.base));
    }
  });

  it("opens through createStore from --store, with the redis options", async () => {
    const store = await createStore(
      parseStore(cluster.url, 0, { minReplicas: 1, replicaWaitMs: 1000, namespaceShards: 1 }, 1),
      {},
    );
    try {
      const r = await store.append({ ...cmd({ messages: [user("hi")] }), namespace: randomUUID() });
      expect(r.thread.lastSeq).toBe(1);
    } finally {
      await store.close();
    }
  });
});

describe("redis store on a cluster", () => {
  const stores: Store[] = [];
  const track = async (s: Promise<Store>) => {
    const store = await s;
    stores.push(store);
    return store;
  };
  afterEach(async () => {
    await Promise.all(stores.splice(0).map((s) => s.close()));
  });

  it("keeps every key of a namespace in one slot, and namespaces on every primary", async () => {
    const prefix = `test-${randomUUID()}`;
    const store = await track(open({}, {}, prefix));
    const keys = keyLayout(prefix, true);
    const namespaces = Array.from({ length: 12 }, (_, i) => `tenant-${i}`);
    for (const ns of namespaces) {
      await store.append({
        ...cmd({ messages: [user("a")], labels: { team: "x" }, ttlMs: 60_000, now: Date.now() }),
        namespace: ns,
      });
      await store.headCursor(ns);
      await store.acquireFoldLease(ns, "t", 1000);
      const k = keys.namespace(ns);
      const c = await primaryClientOf(k.events);
      try {
        const found = (await c.sendCommand(["KEYS", `${k.base}*`])) as string[];
        expect(found.length).toBeGreaterThanOrEqual(8);
        expect(new Set(found.map(keySlot))).toEqual(new Set([keySlot(k.base)]));
      } finally {
        await c.close();
      }
    }
    const primaries = new Set<number>();
    for (const ns of namespaces) {
      primaries.add((await cluster.primaryOfSlot(keySlot(keys.namespace(ns).base))).port);
    }
    expect(primaries.size).toBeGreaterThan(1);
    expect(await store.listThreads("tenant-3", "", 10, { team: "x" })).toEqual(["t"]);
    expect(await store.clearAll("tenant-4", 5000)).toBe(1);
    expect(await store.sweepExpired(Date.now() + 120_000, 100)).toBe(11);
  });

  it("forks in the namespace's slot: a frozen segment and the forks index beside the thread (min replicas 1)", async () => {
    const prefix = `test-${randomUUID()}`;
    const store = await track(open({}, { minReplicas: 1 }, prefix));
    const k = keyLayout(prefix, true).namespace("tenant-f");
    const big = appendCommands({ ...window20, maxStored: 10_000 });
    const messages = Array.from({ length: 300 }, (_, i) => user(`m${i}`));
    await store.append({ ...big({ messages }), namespace: "tenant-f" });
    const monitor = await primaryClientOf(k.base);
    const marker = await primaryClientOf(k.base);
    const lines: string[] = [];
    await monitor.monitor((line) => lines.push(String(line)));
    const forked = await store.fork({
      namespace: "tenant-f",
      threadId: "t",
      newThreadId: "f",
      atSeq: 200,
      expectedLastSeq: undefined,
      strategy: undefined,
      labels: undefined,
      ttlMs: undefined,
      requestId: "r",
      requestHash: "h",
      now: Date.now(),
    });
    expect(forked.sharedCount).toBe(200);
    // Acknowledged after a WAIT, like an Add; the one script after the parent's hash and head length.
    const end = `end-${randomUUID()}`;
    await marker.sendCommand(["ECHO", end]);
    const until = Date.now() + 5000;
    while (!lines.some((l) => l.includes(end)) && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 10));
    }
    await monitor.close();
    await marker.close();
    const sent = lines
      .filter((l) => !l.includes(" lua]") && !l.includes(end))
      .map((l) => /\] "(\w+)"/.exec(l)?.[1]);
    expect(sent.filter((c) => c !== "INCR")).toEqual(["HGETALL", "LLEN", "EVALSHA", "WAIT"]);
    expect((await store.read("tenant-f", "f"))?.messages).toHaveLength(200);
    expect(await store.listThreads("tenant-f", "", 10, undefined, "t")).toEqual(["f"]);
    const c = await primaryClientOf(k.events);
    try {
      const found = (await c.sendCommand(["KEYS", `${k.base}*`])) as string[];
      expect(found).toContain(k.segment("1"));
      expect(found).toContain(k.forks("t"));
      expect(new Set(found.map(keySlot))).toEqual(new Set([keySlot(k.base)]));
    } finally {
      await c.close();
    }
    expect(await store.clearAll("tenant-f", Date.now())).toBe(2);
  });

  it("refuses every token of the history once a slot lost its data, and serves new ones", async () => {
    const prefix = `test-${randomUUID()}`;
    const store = await track(open({}, {}, prefix));
    const other = await track(open({}, {}, prefix));
    const keys = keyLayout(prefix, true);
    const lost = "lost-ns";
    const kept = "kept-ns";
    await store.append({ ...cmd({ messages: [user("1")] }), namespace: lost });
    await store.append({ ...cmd({ messages: [user("1")] }), namespace: kept });
    const lostToken = await store.headCursor(lost);
    const keptToken = await store.headCursor(kept);
    expect(keySlot(keys.namespace(lost).base)).not.toBe(keySlot(keys.namespace(kept).base));
    // What a primary restarted empty leaves of the slot: nothing (its copy
    // of the incarnation included), then new writes.
    const k = keys.namespace(lost);
    const c = await primaryClientOf(k.base);
    try {
      const all = (await c.sendCommand(["KEYS", `${k.base}*`])) as string[];
      await c.sendCommand(["DEL", ...all, k.incarnationMarker]);
    } finally {
      await c.close();
    }
    await store.append({ ...cmd({ messages: [user("a"), user("b")] }), namespace: lost });
    // Another replica meets the loss first: a head read, which could have made a new slot's copy.
    const fresh = await other.headCursor(lost);
    expect(await codeOf(store.readEvents(lost, lostToken, 10))).toBe("out_of_range");
    expect(await codeOf(store.readEvents(kept, keptToken, 10))).toBe("out_of_range");
    expect(await other.readEvents(lost, fresh, 10)).toEqual([]);
    // The new incarnation's tokens work on every replica.
    const now = await other.headCursor(lost);
    await store.append({ ...cmd({ messages: [user("c")] }), namespace: lost });
    expect((await store.readEvents(lost, now, 10)).map((e) => e.type)).toEqual(["messages_added"]);
  });

  it("does an Add and a read in one round trip each (one FCALL, one EVALSHA), with WAIT on the namespace's primary", async () => {
    for (const minReplicas of [0, 1]) {
      const prefix = `test-${randomUUID()}`;
      const store = await track(open({}, { minReplicas }, prefix));
      const k = keyLayout(prefix, true).namespace("ns");
      await store.append(cmd({ messages: [user("warm-up")] }));
      await store.read("ns", "t");
      const monitor = await primaryClientOf(k.base);
      const marker = await primaryClientOf(k.base);
      const lines: string[] = [];
      await monitor.monitor((line) => lines.push(String(line)));
      try {
        for (let i = 0; i < 10; i++) {
          await store.append(cmd({ messages: [user(`m${i}`)], requestId: `r${i}` }));
        }
        await store.read("ns", "t");
        const end = `end-${randomUUID()}`;
        await marker.sendCommand(["ECHO", end]);
        const until = Date.now() + 5000;
        while (!lines.some((l) => l.includes(end)) && Date.now() < until) {
          await new Promise((r) => setTimeout(r, 10));
        }
        const fromClients = lines
          .filter((l) => !l.includes(" lua]") && !l.includes(end))
          .map((l) => /\] "(\w+)"/.exec(l)?.[1]);
        // The Adds run as a Redis Function (loaded on every primary), the read as a script.
        const scripts = fromClients.filter((c) => c === "EVALSHA" || c === "FCALL");
        expect(scripts, `minReplicas ${minReplicas}`).toEqual([
          ...Array.from({ length: 10 }, () => "FCALL"),
          "EVALSHA",
        ]);
        if (minReplicas === 0) {
          expect(
            fromClients.filter((c) => c !== "EVALSHA" && c !== "FCALL"),
            "nothing else",
          ).toEqual([]);
        } else {
          // Each Add waits alone here (one writer): INCR of the namespace's fence, then WAIT.
          expect(fromClients.filter((c) => c === "WAIT")).toHaveLength(10);
          expect(lines.filter((l) => l.includes(`"INCR" "${k.replicationFence}"`))).toHaveLength(
            10,
          );
        }
      } finally {
        await monitor.close();
        await marker.close();
      }
    }
  });

  it("tells subscribers to look again when a slot lost its data, then delivers the new history", async () => {
    const prefix = `test-${randomUUID()}`;
    const store = await track(open({}, {}, prefix));
    const k = keyLayout(prefix, true).namespace("ns");
    const batches: MemoryEvent[][] = [];
    const stop = store.subscribe("ns", (events) => batches.push(events));
    const before = await store.headCursor("ns");
    await store.append(cmd({ messages: [user("1")] }));
    const waitFor = async (cond: () => boolean) => {
      const until = Date.now() + 10_000;
      while (!cond()) {
        if (Date.now() > until) throw new Error("condition not met in time");
        await new Promise((r) => setTimeout(r, 10));
      }
    };
    await waitFor(() => batches.flat().length === 1);
    const c = await primaryClientOf(k.base);
    try {
      const all = (await c.sendCommand(["KEYS", `${k.base}*`])) as string[];
      await c.sendCommand(["DEL", ...all, k.incarnationMarker]);
    } finally {
      await c.close();
    }
    // The next head read meets the loss and rotates; the subscriber hears an empty batch.
    expect(await codeOf(store.readEvents("ns", before, 10))).toBe("out_of_range");
    await waitFor(() => batches.some((b) => b.length === 0));
    const after = await store.headCursor("ns");
    await store.append(cmd({ messages: [user("new")], requestId: "n" }));
    await waitFor(() => batches.flat().length === 2);
    stop();
    const last = batches.flat()[1];
    expect(last?.type).toBe("messages_added");
    expect((await store.readEvents("ns", after, 10)).map((e) => e.cursor)).toEqual([last?.cursor]);
  });

  it("keeps every acknowledged Add while the namespace's slot migrates to another primary", async () => {
    const prefix = `test-${randomUUID()}`;
    const store = await track(open({}, { minReplicas: 1 }, prefix));
    const k = keyLayout(prefix, true).namespace("moving");
    const slot = keySlot(k.base);
    const from = await cluster.primaryOfSlot(slot);
    const to = (await cluster.primaries()).find((p) => p.port !== from.port);
    if (to === undefined) throw new Error("no other primary");
    const { addOne, acknowledged, outcomes } = retryingAdds(store, "moving");
    const threads = Array.from({ length: 20 }, (_, i) => `t${i}`);
    const rounds = 8;
    for (const t of threads) await addOne(t, 0);
    // Writers run through the migration (a half-moved slot answers TRYAGAIN/ASK: unavailable, retried).
    let migrating = true;
    const writers = threads.map(async (t) => {
      for (let j = 1; j < rounds; j++) {
        await addOne(t, j);
        if (migrating) await new Promise((r) => setTimeout(r, 30));
      }
    });
    await cluster.migrateSlot(slot, from, to, {
      batch: 5,
      afterBatch: () => new Promise((r) => setTimeout(r, 50)),
    });
    migrating = false;
    await Promise.all(writers);
    const next = rounds;
    expect((await cluster.primaryOfSlot(slot)).port).toBe(to.port);
    for (const t of threads) {
      const snap = await store.read("moving", t);
      const texts = new Set((snap?.messages ?? []).map((m) => String(m.content)));
      for (let j = 0; j < next; j++) {
        if (acknowledged.has(`${t}-${j}`)) expect(texts.has(`${t}-${j}`), `${t}-${j}`).toBe(true);
      }
      expect(snap?.thread.lastSeq).toBe(texts.size);
    }
    expect(acknowledged.size).toBe(threads.length * next);
    // The Adds did meet the half-moved slot (answered unavailable, then retried).
    expect(outcomes.unavailable).toBeGreaterThan(0);
  }, 60_000);

  it("sends an Add to the slot's new primary when its first command meets MOVED, without an error (min replicas 1)", async () => {
    const prefix = `test-${randomUUID()}`;
    const store = await track(open({}, { minReplicas: 1 }, prefix));
    const k = keyLayout(prefix, true).namespace("moved");
    const slot = keySlot(k.base);
    const add = (content: string) =>
      store.append({ ...cmd({ messages: [user(content)] }), namespace: "moved", threadId: "t" });
    // The first Add opens the write session to the slot's primary; the move
    // then happens behind the store's back, so its slot map is stale.
    await add("before");
    const from = await cluster.primaryOfSlot(slot);
    const to = (await cluster.primaries()).find((p) => p.port !== from.port);
    if (to === undefined) throw new Error("no other primary");
    await cluster.migrateSlot(slot, from, to);
    for (const content of ["after 1", "after 2"]) {
      const result = await add(content);
      expect(result.replayed).toBe(false);
    }
    const snap = await store.read("moved", "t");
    expect((snap?.messages ?? []).map((m) => String(m.content))).toEqual([
      "before",
      "after 1",
      "after 2",
    ]);
  });

  it("keeps every acknowledged Add over a failover of the namespace's primary (min replicas 1)", async () => {
    const prefix = `test-${randomUUID()}`;
    const store = await track(open({}, { minReplicas: 1, replicaWaitMs: 500 }, prefix));
    const k = keyLayout(prefix, true).namespace("failing");
    const slot = keySlot(k.base);
    const { addOne, acknowledged, outcomes } = retryingAdds(store, "failing");
    const threads = Array.from({ length: 16 }, (_, i) => `t${i}`);
    const rounds = 12;
    let killed = false;
    const writers = threads.map(async (t) => {
      for (let j = 0; j < rounds; j++) {
        await addOne(t, j);
        if (!killed) await new Promise((r) => setTimeout(r, 40));
      }
    });
    await new Promise((r) => setTimeout(r, 200));
    const primary = await cluster.primaryOfSlot(slot);
    await cluster.kill(primary);
    killed = true;
    // Back as a replica of the promoted node: until then no replica can confirm an Add.
    await cluster.restart(primary);
    await Promise.all(writers);
    expect((await cluster.primaryOfSlot(slot)).port).not.toBe(primary.port);
    expect(acknowledged.size).toBe(threads.length * rounds);
    expect(outcomes.unavailable).toBeGreaterThan(0);
    for (const t of threads) {
      const snap = await store.read("failing", t);
      const texts = (snap?.messages ?? []).map((m) => String(m.content));
      // Every acknowledged Add once, in order: none lost, none stored twice.
      expect(texts).toEqual(Array.from({ length: rounds }, (_, j) => `${t}-${j}`));
    }
  }, 90_000);

  it("delivers events to subscribers from the node serving the namespace", async () => {
    const prefix = `test-${randomUUID()}`;
    const a = await track(open({}, {}, prefix));
    const b = await track(open({}, {}, prefix));
    const seen: MemoryEvent[] = [];
    const stop = a.subscribe("ns", (events) => seen.push(...events));
    const start = await a.headCursor("ns");
    await b.append(cmd({ messages: [user("1"), user("2")] }));
    await b.clear("ns", "t", 3000);
    const until = Date.now() + 5000;
    while (seen.length < 2 && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    stop();
    expect(seen.map((e) => e.type)).toEqual(["messages_added", "thread_cleared"]);
    const read = await a.readEvents("ns", start, 10);
    expect(read.map((e) => e.cursor)).toEqual(seen.map((e) => e.cursor));
  });
});
