import { randomUUID } from "node:crypto";
import fc from "fast-check";
import { createClient } from "redis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { MemoryError } from "../../src/core/errors.js";
import type { ChatMessage, MemoryEvent, Strategy } from "../../src/core/types.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { createRedisStore } from "../../src/store/redis/index.js";
import { APPEND } from "../../src/store/redis/lua/append.js";
import { ResumeTokens, tokenParts } from "../../src/store/resume-token.js";
import type { Store, StoreLimits } from "../../src/store/store.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";
import { appendCommands, summary, user, window20 } from "./fixtures.js";

/**
 * What only the Redis store has to show, against a real redis-server (each
 * store gets its own random key prefix, so the cases share one server; the
 * Store contract is test/store/contract.test.ts): one round trip per Add,
 * events from another connection, trimmed history, Redis going away and
 * coming back.
 */
let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedisServer();
});
afterAll(async () => {
  await redis?.stop();
});

const open = (limits: Partial<StoreLimits> = {}, prefix = `test-${randomUUID()}`) =>
  createRedisStore(redis.url, limits, { keyPrefix: prefix });

const cmd = appendCommands(window20);

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    return err instanceof MemoryError ? err.code : `not a MemoryError: ${String(err)}`;
  }
  return "resolved";
}

async function waitFor(cond: () => boolean | Promise<boolean>, ms = 5000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > until) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A plain client for looking at what the store did. */
/**
 * Writes a thread as a version before quotas did: no counted/bytes fields,
 * entries "<seq> <json>".
 */
async function writeLegacyThread(
  c: Awaited<ReturnType<typeof inspector>>,
  base: string,
  threadId: string,
  entries: string[],
): Promise<void> {
  await c.sendCommand([
    "HSET",
    `${base}t:${threadId}`,
    "thread_id",
    threadId,
    "incarnation",
    `i-${threadId}`,
    "last_seq",
    String(entries.length),
    "summarized_through_seq",
    "0",
    "summary",
    "",
    "summary_time",
    "0",
    "create_time",
    "1",
    "update_time",
    "1",
    "strategy",
    JSON.stringify(window20),
    "strategy_key",
    "window=20",
    "kind",
    "window",
    "max_stored",
    "1000",
    "exclude_system",
    "0",
  ]);
  await c.sendCommand(["ZADD", `${base}threads`, "0", threadId]);
  if (entries.length > 0) {
    await c.sendCommand([
      "RPUSH",
      `${base}m:${threadId}`,
      ...entries.map((json, i) => `${i + 1} ${json}`),
    ]);
  }
}

async function inspector() {
  const c = createClient({ url: redis.url, RESP: 2 });
  c.on("error", () => {});
  await c.connect();
  return c;
}

describe("redis store", () => {
  const stores: Store[] = [];
  const track = async (s: Promise<Store>) => {
    const store = await s;
    stores.push(store);
    return store;
  };
  afterEach(async () => {
    await Promise.all(stores.splice(0).map((s) => s.close()));
  });

  it("answers an Add's replay while Redis is out of memory, and refuses a new Add as unavailable", async () => {
    const store = await track(open());
    const first = await store.append(cmd({ messages: [user("before")], requestId: "r-oom" }));
    const admin = await inspector();
    try {
      // Redis refuses a write function before it runs when full; the script
      // it goes by instead runs until its first write, which a replay never makes.
      await admin.sendCommand(["CONFIG", "SET", "maxmemory", "1"]);
      const replay = await store.append(cmd({ messages: [user("before")], requestId: "r-oom" }));
      expect([replay.replayed, replay.firstSeq, replay.lastSeq]).toEqual([
        true,
        first.firstSeq,
        first.lastSeq,
      ]);
      expect(await codeOf(store.append(cmd({ messages: [user("new")], requestId: "r-new" })))).toBe(
        "unavailable",
      );
    } finally {
      await admin.sendCommand(["CONFIG", "SET", "maxmemory", "0"]);
      await admin.close();
    }
    expect((await store.read("ns", "t"))?.messages.map((m) => m.content)).toEqual(["before"]);
  });

  it("does an Add and a read in one round trip each (one FCALL, one EVALSHA)", async () => {
    const store = await track(open());
    await store.append(cmd({ messages: [user("warm-up")] }));
    await store.read("ns", "t");
    const monitor = await inspector();
    const lines: string[] = [];
    await monitor.monitor((line) => lines.push(String(line)));
    const marker = await inspector();
    try {
      for (let i = 0; i < 20; i++) {
        await store.append(cmd({ messages: [user(`m${i}`), user(`n${i}`)], requestId: `r${i}` }));
      }
      await store.read("ns", "t");
      const end = `end-${randomUUID()}`;
      await marker.sendCommand(["ECHO", end]);
      await waitFor(() => lines.some((l) => l.includes(end)));
      const fromClients = lines.filter((l) => !l.includes(" lua]") && !l.includes(end));
      // The Add runs as a Redis Function (lua/fragment.ts LuaFunction), the read as a script.
      expect(fromClients.map((l) => /\] "(\w+)"/.exec(l)?.[1])).toEqual([
        ...Array.from({ length: 20 }, () => "FCALL"),
        "EVALSHA",
      ]);
      // The work happened inside the scripts.
      expect(lines.filter((l) => l.includes(' lua] "RPUSH"')).length).toBe(20);
      expect(lines.filter((l) => l.includes(' lua] "XADD"')).length).toBe(20);
    } finally {
      await monitor.close();
      await marker.close();
    }
  });

  it("runs a script by its text, with the same keys and arguments, once Redis has lost its scripts and functions", async () => {
    const store = await track(open());
    await store.append(cmd({ messages: [user("before")], requestId: "r-before" }));
    const admin = await inspector();
    const monitor = await inspector();
    const lines: string[] = [];
    await monitor.monitor((line) => lines.push(String(line)));
    try {
      // What a Redis restarted empty has lost.
      await admin.sendCommand(["SCRIPT", "FLUSH"]);
      await admin.sendCommand(["FUNCTION", "FLUSH"]);
      const added = await store.append(cmd({ messages: [user("after")], requestId: "r-after" }));
      expect([added.firstSeq, added.lastSeq, added.replayed]).toEqual([2, 2, false]);
      const read = await store.read("ns", "t");
      expect(read?.messages.map((m) => m.content)).toEqual(["before", "after"]);
      const end = `end-${randomUUID()}`;
      await admin.sendCommand(["ECHO", end]);
      await waitFor(() => lines.some((l) => l.includes(end)));
      // What follows the script (its SHA or its text): numkeys, keys, arguments.
      const calls = lines
        .filter((l) => !l.includes(" lua]") && /\] "(EVAL(SHA)?|FCALL)"/.test(l))
        .map((l) => {
          const args = [...l.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]);
          return { name: args[0], tail: args.slice(2).join(" ") };
        });
      // The Add: refused as a function and by SHA, then sent with its text;
      // the read (a script only): refused by SHA, then sent with its text.
      expect(calls.map((c) => c.name)).toEqual(["FCALL", "EVALSHA", "EVAL", "EVALSHA", "EVAL"]);
      expect(calls[1]?.tail).toBe(calls[0]?.tail);
      expect(calls[2]?.tail).toBe(calls[0]?.tail);
      expect(calls[4]?.tail).toBe(calls[3]?.tail);
      // The miss loaded the function again: the next Add calls it.
      const fn = APPEND.fn?.name ?? "";
      expect(fn).toMatch(/^windlass_append_[0-9a-f]{16}$/);
      await waitFor(async () => String(await admin.sendCommand(["FUNCTION", "LIST"])).includes(fn));
      // The store learns of the load when its own connection reads the reply,
      // which may come after FUNCTION LIST shows it: Adds until one is an FCALL.
      const callsOf = () =>
        lines
          .filter((l) => !l.includes(" lua]") && /\] "(EVAL(SHA)?|FCALL)"/.test(l))
          .map((l) => /\] "(\w+)"/.exec(l)?.[1]);
      for (let i = 0; i < 50 && !callsOf().includes("FCALL"); i++) {
        await store.append(cmd({ messages: [user(`later ${i}`)], requestId: `r-later-${i}` }));
        const mark = `end-${randomUUID()}`;
        await admin.sendCommand(["ECHO", mark]);
        await waitFor(() => lines.some((l) => l.includes(mark)));
      }
      expect(callsOf()).toContain("FCALL");
    } finally {
      await monitor.close();
      await admin.close();
    }
  });

  it("delivers events logged through another connection (another replica) to subscribers", async () => {
    const prefix = `test-${randomUUID()}`;
    const a = await track(open({}, prefix));
    const b = await track(open({}, prefix));
    const seen: MemoryEvent[] = [];
    const stop = a.subscribe("ns", (events) => seen.push(...events));
    // Let the subscription take its starting point before B writes.
    const start = await a.headCursor("ns");
    const r = await b.append(cmd({ strategy: summary, messages: [user("1"), user("2")] }));
    const token = (await b.acquireFoldLease("ns", "t", 10_000)) ?? 0;
    // A lease taken through B holds for A too.
    expect(await a.acquireFoldLease("ns", "t", 10_000)).toBeUndefined();
    await b.commitSummary({
      namespace: "ns",
      threadId: "t",
      incarnation: r.thread.incarnation,
      leaseToken: token,
      fromSeq: 0,
      throughSeq: 1,
      summary: "s1",
      foldedCount: 1,
      now: 2000,
    });
    await a.append(cmd({ messages: [user("3")] }));
    await b.clear("ns", "t", 3000);
    // A marker written last: once it is delivered, everything before it has
    // been, and anything extra (a duplicate) would show before it.
    await b.append(cmd({ threadId: "marker" }));
    await waitFor(() => seen.some((e) => e.threadId === "marker"));
    stop();
    expect(seen.map((e) => e.type)).toEqual([
      "messages_added",
      "summary_updated",
      "messages_added",
      "thread_cleared",
      "messages_added",
    ]);
    expect(seen[1]).toMatchObject({ summary: "s1", summarizedThroughSeq: 1, threadId: "t" });
    // The same events, read by cursor through B: cursors mean the same on every replica.
    const all = await b.readEvents("ns", start, 100);
    expect(all).toEqual(seen);
  });

  it("starts a subscription at the head: earlier events are not delivered, later ones once", async () => {
    const prefix = `test-${randomUUID()}`;
    const a = await track(open({}, prefix));
    const b = await track(open({}, prefix));
    for (let i = 0; i < 5; i++) await b.append(cmd({ messages: [user(`old${i}`)] }));
    const first: MemoryEvent[] = [];
    const second: MemoryEvent[] = [];
    const stop1 = a.subscribe("ns", (events) => first.push(...events));
    await a.append(cmd({ messages: [user("x")] }));
    const stop2 = a.subscribe("ns", (events) => second.push(...events));
    await a.append(cmd({ messages: [user("y")] }));
    await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        b.append(cmd({ threadId: `p${i}`, messages: [user("z")] })),
      ),
    );
    // A marker written last: once both have it, anything extra would show before it.
    await b.append(cmd({ threadId: "marker", messages: [user("m")] }));
    const hasMarker = (list: MemoryEvent[]) => list.some((e) => e.threadId === "marker");
    await waitFor(() => hasMarker(first) && hasMarker(second));
    stop1();
    stop2();
    expect(first).toHaveLength(13);
    expect(second).toHaveLength(12);
    expect(first.slice(1)).toEqual(second);
    expect(new Set(first.map((e) => e.cursor)).size).toBe(13);
  });

  it("keeps at least eventRetention events and answers out_of_range for a trimmed cursor", async () => {
    const prefix = `test-${randomUUID()}`;
    const store = await track(open({ eventRetention: 10 }, prefix));
    const before = await store.headCursor("ns");
    const first = await store.append(cmd());
    const [firstEvent] = await store.readEvents("ns", before, 1);
    expect(firstEvent?.type).toBe("messages_added");
    for (let i = 0; i < 500; i++) await store.append(cmd({ messages: [user(String(i))] }));
    expect(first.firstSeq).toBe(1);
    expect(await codeOf(store.readEvents("ns", before, 10))).toBe("out_of_range");
    expect(await codeOf(store.readEvents("ns", firstEvent?.cursor ?? "", 10))).toBe("out_of_range");
    const head = await store.headCursor("ns");
    const c = await inspector();
    try {
      const length = Number(await c.sendCommand(["XLEN", `${prefix}:{ns-bnM}:log`]));
      expect(length).toBeGreaterThanOrEqual(10);
      expect(length).toBeLessThanOrEqual(10 + 64);
      // The oldest retained event is still a valid place to resume from.
      const oldest = (await c.sendCommand([
        "XRANGE",
        `${prefix}:{ns-bnM}:log`,
        "-",
        "+",
        "COUNT",
        "1",
      ])) as [string, string[]][];
      const oldestId = oldest[0]?.[0] ?? "";
      expect(oldestId).toMatch(/^0-\d+$/);
      const tokens = await tokensOf(c, prefix);
      const after = await store.readEvents(
        "ns",
        tokens.issue("ns", Number(oldestId.slice(2))),
        1000,
      );
      expect(after).toHaveLength(length - 1);
      expect(after[after.length - 1]?.cursor).toBe(head);
    } finally {
      await c.close();
    }
    // Not a token: invalid_argument.
    const c2 = await inspector();
    const tokens = await tokensOf(c2, prefix).finally(() => c2.close());
    const position = tokenParts(head)?.position ?? 0;
    expect(position).toBe(501);
    for (const bad of ["garbage", "1-", "01-1", "1-2-3", "99999999999999999999999-0", ""]) {
      expect(await codeOf(store.readEvents("ns", bad, 10))).toBe("invalid_argument");
    }
    // A stream id, the cursor of earlier versions: issued before the upgrade.
    expect(await codeOf(store.readEvents("ns", "1732960000000-0", 10))).toBe("out_of_range");
    expect(store.compareCursors(tokens.issue("ns", 10), tokens.issue("ns", 9))).toBeGreaterThan(0);
    expect(store.compareCursors(tokens.issue("ns", 2), tokens.issue("ns", 10))).toBeLessThan(0);
    // After the head, signed with the deployment's key: only a history that
    // once reached it issued it, so events were lost since (a rewind). It is
    // out_of_range, and so is every cursor of that history from then on: the
    // incarnation rotated, so a history that grows past it again is never
    // resumed into.
    expect(await codeOf(store.readEvents("ns", tokens.issue("ns", position + 1), 10))).toBe(
      "out_of_range",
    );
    expect(await codeOf(store.readEvents("ns", head, 10))).toBe("out_of_range");
    const fresh = await store.headCursor("ns");
    expect(tokenParts(fresh)?.storeId).not.toBe(tokenParts(head)?.storeId);
    expect(await store.readEvents("ns", fresh, 10)).toEqual([]);
  });

  it("deletes an earlier version's clock-numbered stream when the namespace logs into its new one", async () => {
    const prefix = `test-${randomUUID()}`;
    const c = await inspector();
    try {
      const legacy = `${prefix}:{ns-bnM}:events`;
      await c.sendCommand([
        "XADD",
        legacy,
        "*",
        "type",
        "thread_cleared",
        "thread_id",
        "t",
        "time",
        "1",
      ]);
      const store = await track(open({}, prefix));
      // Nothing of it is read: the new log starts at 0 for the namespace.
      expect(tokenParts(await store.headCursor("ns"))?.position).toBe(0);
      await store.append(cmd());
      expect(await c.sendCommand(["EXISTS", legacy])).toBe(0);
      expect(tokenParts(await store.headCursor("ns"))?.position).toBe(1);
    } finally {
      await c.close();
    }
  });

  it("puts every key of a namespace under one hash tag, even when the namespace has braces", async () => {
    const prefix = `test-${randomUUID()}`;
    const store = await track(open({}, prefix));
    const ns = "{tenant}:a}";
    await store.append(cmd({ namespace: ns, threadId: "x{y}", requestId: "r", requestHash: "h" }));
    await store.append(cmd({ namespace: ns, threadId: "tool", strategy: summary }));
    await store.acquireFoldLease(ns, "tool", 10_000);
    const c = await inspector();
    try {
      // Less the deployment's own keys: the incarnation and the recorded shard count.
      const keys = ((await c.sendCommand(["KEYS", `${prefix}:*`])) as string[]).filter(
        (k) => k !== `${prefix}:resume-token-key` && k !== `${prefix}:namespace-shards`,
      );
      expect(keys.length).toBeGreaterThanOrEqual(9);
      const tags = new Set(keys.map(hashTag));
      expect(tags.size).toBe(1);
      expect([...tags][0]).toBe(`ns-${Buffer.from(ns).toString("base64url")}`);
    } finally {
      await c.close();
    }
    expect(await store.listThreads(ns, "", 10)).toEqual(["tool", "x{y}"]);
  });

  it("hands out lease tokens that grow across store instances and survive Clear", async () => {
    const prefix = `test-${randomUUID()}`;
    const a = await track(open({}, prefix));
    const b = await track(open({}, prefix));
    await a.append(cmd());
    const t1 = (await a.acquireFoldLease("ns", "t", 10_000)) ?? 0;
    expect(await b.acquireFoldLease("ns", "t", 10_000)).toBeUndefined();
    await b.releaseFoldLease("ns", "t", t1 + 1); // not the holder: nothing happens
    expect(await b.acquireFoldLease("ns", "t", 10_000)).toBeUndefined();
    await a.releaseFoldLease("ns", "t", t1);
    await b.clear("ns", "t", 5);
    const t2 = (await b.acquireFoldLease("ns", "t", 10_000)) ?? 0;
    expect(t2).toBeGreaterThan(t1);
  });

  it("clears a namespace with more threads than one chunk", async () => {
    const prefix = `test-${randomUUID()}`;
    const store = await track(open({}, prefix));
    const ids = Array.from({ length: 1203 }, (_, i) => `t${String(i).padStart(4, "0")}`);
    await Promise.all(ids.map((threadId) => store.append(cmd({ threadId }))));
    const head = await store.headCursor("ns");
    expect(await store.clearAll("ns", 9)).toBe(1203);
    expect(await store.listThreads("ns", "", 10)).toEqual([]);
    const events: MemoryEvent[] = [];
    for (let cursor = head; ; ) {
      const page = await store.readEvents("ns", cursor, 500);
      events.push(...page);
      const last = page[page.length - 1];
      if (last === undefined) break;
      cursor = last.cursor;
    }
    expect(events.map((e) => e.threadId)).toEqual(ids);
    expect(new Set(events.map((e) => e.type))).toEqual(new Set(["thread_cleared"]));
  });

  it("holds a namespace quota across replicas racing to fill it", async () => {
    const prefix = `test-${randomUUID()}`;
    const quotas = { maxThreadsPerNamespace: 7, maxBytesPerNamespace: 100 };
    const a = await track(open(quotas, prefix));
    const b = await track(open(quotas, prefix));
    const replica = (i: number) => (i % 2 === 0 ? a : b);
    const outcomes = await Promise.all(
      Array.from({ length: 60 }, (_, i) =>
        codeOf(replica(i).append(cmd({ threadId: `r${i}`, messages: [] }))),
      ),
    );
    expect(outcomes.filter((o) => o === "resolved")).toHaveLength(7);
    expect(outcomes.filter((o) => o === "resource_exhausted")).toHaveLength(53);
    // 10 bytes each: ten fit across both replicas, no more.
    const [threadId = ""] = await a.listThreads("ns", "", 1);
    const adds = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        codeOf(replica(i).append(cmd({ threadId, messages: [user("0123456789")] }))),
      ),
    );
    expect(adds.filter((o) => o === "resolved")).toHaveLength(10);
    expect((await b.read("ns", threadId))?.messages).toHaveLength(10);
  });

  it("reuses decoded messages only while their entries read the same, and shares one strategy object per strategy", async () => {
    const prefix = `test-${randomUUID()}`;
    const store = await track(open({}, prefix));
    const c = await inspector();
    try {
      await store.append(cmd({ threadId: "t", messages: [user("first"), user("second")] }));
      const before = await store.read("ns", "t");
      const again = await store.read("ns", "t");
      // The same objects while the entries are the same (their wire form is kept with them).
      expect(again?.messages[0]).toBe(before?.messages[0]);
      expect(again?.thread.strategy).toBe(before?.thread.strategy);
      expect(Object.isFrozen(again?.thread.strategy)).toBe(true);
      // The database goes back to an older state and is written again: the same
      // incarnation and seq now hold other text, which must be what a read returns.
      const key = `${prefix}:{ns-bnM}:m:t`;
      const entry = String(await c.sendCommand(["LINDEX", key, "0"]));
      await c.sendCommand(["LSET", key, "0", entry.replace('"first"', '"rewritten"')]);
      const after = await store.read("ns", "t");
      expect(after?.messages.map((m) => m.content)).toEqual(["rewritten", "second"]);
      expect(after?.messages[1]).toBe(before?.messages[1]);
    } finally {
      await c.close();
    }
  });

  it("reads a thread written before quotas and counts it from its next Add on", async () => {
    const prefix = `test-${randomUUID()}`;
    const store = await track(open({ maxMessagesPerNamespace: 6 }, prefix));
    const c = await inspector();
    try {
      const base = `${prefix}:{ns-bnM}:`;
      const legacy = [1, 2, 3].map((i) => `{"role":"user","content":"m${i}","createTime":1}`);
      await writeLegacyThread(c, base, "old", legacy);
      expect((await store.read("ns", "old"))?.messages.map((m) => m.content)).toEqual([
        "m1",
        "m2",
        "m3",
      ]);
      // Not counted yet: five new messages fit beside its three.
      await store.append(cmd({ threadId: "new", messages: ["a", "b", "c", "d", "e"].map(user) }));
      // Its next Add would count it (3 + 1 more): refused, nothing written.
      expect(await codeOf(store.append(cmd({ threadId: "old", messages: [user("m4")] })))).toBe(
        "resource_exhausted",
      );
      expect((await store.read("ns", "old"))?.messages).toHaveLength(3);
      await store.clear("ns", "new", 2);
      await store.append(cmd({ threadId: "old", messages: [user("m4")] }));
      expect((await store.read("ns", "old"))?.messages.map((m) => m.seq)).toEqual([1, 2, 3, 4]);
      // Entries from before quotas weigh their JSON's length.
      const legacyBytes = legacy.reduce((n, json) => n + Buffer.byteLength(json), 0);
      expect(
        await c.sendCommand(["HMGET", `${base}usage`, "threads", "messages", "bytes"]),
      ).toEqual(["1", "4", String(legacyBytes + 2)]);
      await store.clear("ns", "old", 3);
      expect(
        await c.sendCommand(["HMGET", `${base}usage`, "threads", "messages", "bytes"]),
      ).toEqual(["0", "0", "0"]);
    } finally {
      await c.close();
    }
  });

  it("clears a thread from before quotas whose first counted Add weighed nothing", async () => {
    // Earlier versions created a thread on an empty Add; its next Add here
    // (an empty message: 0 bytes) counts it. Clear and Clear(all) must still
    // find its byte count: a Lua error halfway would leave keys deleted and
    // the usage and the thread list wrong for good.
    const prefix = `test-${randomUUID()}`;
    const store = await track(open({}, prefix));
    const c = await inspector();
    try {
      const base = `${prefix}:{ns-bnM}:`;
      await writeLegacyThread(c, base, "one", []);
      await writeLegacyThread(c, base, "two", []);
      for (const threadId of ["one", "two"]) {
        await store.append(cmd({ threadId, messages: [user("")] }));
      }
      expect(await store.clear("ns", "one", 2)).toBe(true);
      expect(await store.listThreads("ns", "", 10)).toEqual(["two"]);
      expect(await store.clearAll("ns", 3)).toBe(1);
      expect(await store.listThreads("ns", "", 10)).toEqual([]);
      // A field never incremented is absent: nothing used.
      const usage = (await c.sendCommand([
        "HMGET",
        `${base}usage`,
        "threads",
        "messages",
        "bytes",
      ])) as (string | null)[];
      expect(usage.map((v) => v ?? "0")).toEqual(["0", "0", "0"]);
    } finally {
      await c.close();
    }
  });

  it("never sends an Add whose deadline has passed", async () => {
    const store = await track(open());
    expect(await codeOf(store.append(cmd({ threadId: "late", deadline: Date.now() - 1 })))).toBe(
      "deadline_exceeded",
    );
    expect(await store.getThread("ns", "late")).toBeUndefined();
    await store.append(cmd({ threadId: "late", deadline: Date.now() + 60_000 }));
    expect((await store.getThread("ns", "late"))?.lastSeq).toBe(1);
  });

  it("fails fast with unavailable while Redis is down and recovers by itself", async () => {
    const own = await startRedisServer();
    try {
      const store = await track(createRedisStore(own.url, {}, { keyPrefix: "t" }));
      const seen: MemoryEvent[] = [];
      store.subscribe("ns", (events) => seen.push(...events));
      const start = await store.headCursor("ns");
      await store.append(cmd());
      await waitFor(() => seen.length === 1);

      await own.kill();
      for (const call of [
        () => store.append(cmd()),
        () => store.read("ns", "t"),
        () => store.getThread("ns", "t"),
        () => store.readEvents("ns", start, 10),
        () => store.listThreads("ns", "", 10),
        () => store.acquireFoldLease("ns", "t", 1000),
      ]) {
        const started = Date.now();
        expect(await codeOf(call())).toBe("unavailable");
        expect(Date.now() - started).toBeLessThan(1000);
      }

      await own.restart();
      // The client reconnects on its own (backoff at most ~2 s); the scripts are reloaded on demand.
      await waitFor(async () => (await codeOf(store.append(cmd()))) === "resolved", 10_000);
      expect((await store.read("ns", "t"))?.messages).toHaveLength(1);
      // The subscription follows the new server's stream too.
      await store.append(cmd({ threadId: "after" }));
      await waitFor(() => seen.some((e) => e.threadId === "after"), 10_000);
    } finally {
      await own.stop();
    }
  });

  it("refuses to start when Redis is not there, quickly and without the URL's password", async () => {
    const own = await startRedisServer();
    await own.stop();
    const url = `redis://user:s3cret@127.0.0.1:${own.port}/0`;
    const started = Date.now();
    const err = await createRedisStore(url, {}, { connectWaitMs: 500 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(MemoryError);
    expect((err as MemoryError).code).toBe("unavailable");
    expect((err as MemoryError).message).toContain(`127.0.0.1:${own.port}`);
    expect((err as MemoryError).message).not.toContain("s3cret");
    expect(Date.now() - started).toBeLessThan(2000);
  });
});

/**
 * The Lua port of the append rules (decideAppend, trimCount with tool results
 * and summary coverage, keepsSummary, idempotency) against the reference
 * implementation: the same generated operations on the memory store and the
 * Redis store must give the same results, errors and stored threads.
 */
describe("redis store, differential against the memory store", () => {
  const strategies: Strategy[] = [
    { kind: "window", window: 2, excludeSystem: false, maxStored: 3 },
    { kind: "buffer", maxMessages: 0, excludeSystem: false, maxStored: 4 },
    { ...summary, window: 1, maxStored: 2 },
    { ...summary, window: 1, maxStored: 2, excludeSystem: true },
  ];
  type Op =
    | {
        op: "append";
        roles: ("user" | "assistant" | "tool" | "system")[];
        strategy: number;
        replace: boolean;
        expected: number;
        requestId: number;
      }
    | { op: "fold"; by: number }
    | { op: "rewind"; back: number; expected: number; requestId: number }
    | { op: "clear" };
  const opArb: fc.Arbitrary<Op> = fc.oneof(
    {
      weight: 6,
      arbitrary: fc.record({
        op: fc.constant("append" as const),
        roles: fc.array(fc.constantFrom("user", "assistant", "tool", "system"), { maxLength: 4 }),
        strategy: fc.integer({ min: -1, max: 3 }),
        replace: fc.boolean(),
        expected: fc.integer({ min: -1, max: 1 }),
        requestId: fc.integer({ min: 0, max: 3 }),
      }),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        op: fc.constant("fold" as const),
        by: fc.integer({ min: 1, max: 3 }),
      }),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        op: fc.constant("rewind" as const),
        back: fc.integer({ min: 0, max: 3 }),
        expected: fc.integer({ min: -1, max: 1 }),
        requestId: fc.integer({ min: 0, max: 3 }),
      }),
    },
    { weight: 1, arbitrary: fc.record({ op: fc.constant("clear" as const) }) },
  );

  /** What a call did, without what legitimately differs (incarnations, lease tokens). */
  async function outcome(p: Promise<unknown>): Promise<unknown> {
    try {
      return strip(await p);
    } catch (err) {
      return err instanceof MemoryError ? { error: err.code, message: err.message } : String(err);
    }
  }
  function strip(value: unknown): unknown {
    if (Array.isArray(value)) return value.map(strip);
    if (typeof value !== "object" || value === null) return value;
    return Object.fromEntries(
      Object.entries(value)
        .filter(([k]) => k !== "incarnation")
        .map(([k, v]) => [k, strip(v)]),
    );
  }

  it("gives the memory store's results for any sequence of operations", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 25 }), async (ops) => {
        // Small idempotency limits, so forgetting by count and by age is
        // exercised too, and small quotas, so the Lua's plan of the trim an Add
        // will do (counted before anything is written) is checked as well.
        const limits = {
          idempotencyMaxPerThread: 2,
          idempotencyRetentionMs: 6,
          maxMessagesPerNamespace: 5,
          maxBytesPerNamespace: 24,
        };
        const stores = [createMemoryStore(limits), await open(limits)];
        const heads = await Promise.all(stores.map((s) => s.headCursor("ns")));
        try {
          for (const [i, op] of ops.entries()) {
            const now = 1000 + i;
            const results: unknown[] = [];
            for (const store of stores) {
              const thread = await store.getThread("ns", "t");
              if (op.op === "append") {
                const last = thread?.lastSeq ?? 0;
                const messages: ChatMessage[] = op.roles.map((role, j) =>
                  role === "tool"
                    ? { role, content: `m${i}.${j}`, toolCallId: `c${i}` }
                    : role === "assistant"
                      ? {
                          role,
                          content: `m${i}.${j}`,
                          toolCalls: [{ id: `c${i}`, name: "f", arguments: "{}" }],
                        }
                      : { role, content: `m${i}.${j}` },
                );
                results.push(
                  await outcome(
                    store.append(
                      cmd({
                        messages,
                        strategy: op.strategy < 0 ? undefined : strategies[op.strategy],
                        replaceStrategy: op.replace,
                        expectedLastSeq: op.expected < 0 ? undefined : last + op.expected,
                        requestId: op.requestId === 0 ? "" : `r${op.requestId}`,
                        requestHash: JSON.stringify(op),
                        now,
                      }),
                    ),
                  ),
                );
              } else if (op.op === "fold") {
                const token = await store.acquireFoldLease("ns", "t", 10_000);
                const from = thread?.summarizedThroughSeq ?? 0;
                results.push(
                  await outcome(
                    store.commitSummary({
                      namespace: "ns",
                      threadId: "t",
                      incarnation: thread?.incarnation ?? "",
                      leaseToken: token ?? 0,
                      fromSeq: from,
                      throughSeq: Math.min(from + op.by, thread?.lastSeq ?? 0),
                      summary: `s${i}`,
                      foldedCount: op.by,
                      now,
                    }),
                  ),
                );
                if (token !== undefined) await store.releaseFoldLease("ns", "t", token);
              } else if (op.op === "rewind") {
                const last = thread?.lastSeq ?? 0;
                results.push(
                  await outcome(
                    store.rewind({
                      namespace: "ns",
                      threadId: "t",
                      toSeq: Math.max(0, last - op.back),
                      expectedLastSeq: op.expected < 0 ? undefined : last + op.expected,
                      // Shared with the Adds' ids: one id names one request of either kind.
                      requestId: op.requestId === 0 ? "" : `r${op.requestId}`,
                      requestHash: JSON.stringify(op),
                      now,
                    }),
                  ),
                );
              } else {
                results.push(await store.clear("ns", "t", now));
              }
              results.push(strip(await store.read("ns", "t")));
            }
            const half = results.length / 2;
            expect(results.slice(half), `op ${i}: ${JSON.stringify(op)}`).toEqual(
              results.slice(0, half),
            );
          }
          // The event logs agree too.
          const logs = await Promise.all(
            stores.map(async (s, i) => {
              const events = await s.readEvents("ns", heads[i] ?? "", 1000);
              return events.map(({ cursor: _, ...e }) => e);
            }),
          );
          expect(logs[1]).toEqual(logs[0]);
        } finally {
          await Promise.all(stores.map((s) => s.close()));
        }
      }),
      { numRuns: 150 },
    );
  });
});

/** The deployment's resume-token codec, from the key the store keeps in Redis. */
async function tokensOf(
  c: { sendCommand(args: string[]): Promise<unknown> },
  prefix: string,
): Promise<ResumeTokens> {
  const value = String(await c.sendCommand(["GET", `${prefix}:resume-token-key`]));
  const [id = "", secret = ""] = value.split(".");
  return new ResumeTokens(id, secret, "another database");
}

/** The part of a key Redis Cluster hashes: between the first "{" and the next "}". */
function hashTag(key: string): string {
  const open = key.indexOf("{");
  const close = key.indexOf("}", open + 1);
  return open >= 0 && close > open + 1 ? key.slice(open + 1, close) : key;
}
