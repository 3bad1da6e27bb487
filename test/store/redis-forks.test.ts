import { randomUUID } from "node:crypto";
import { createClient } from "redis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createRedisStore } from "../../src/store/redis/index.js";
import type { ForkCommand, Store } from "../../src/store/store.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";
import { forkCmd as contractForkCmd } from "./contract/support.js";
import { appendCommands, summary, user, window20 } from "./fixtures.js";

/**
 * What only the Redis store's Fork has to show: one script per Fork, a
 * Fork of a long parent that reads none of its messages, the segments'
 * reference counts and the usage, and Adds/Rewinds/Clears on threads
 * holding frozen segments.
 */
let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedisServer();
});
afterAll(async () => {
  await redis?.stop();
});

const add = appendCommands({ ...window20, maxStored: 200_000 });
const forkCmd = (over: Partial<ForkCommand> = {}) => contractForkCmd("f", { now: 5000, ...over });
const seqs = (from: number, to: number) =>
  Array.from({ length: to - from + 1 }, (_, i) => from + i);
const many = (n: number, from = 0) => Array.from({ length: n }, (_, i) => user(`m${from + i}`));

describe("redis store: fork", () => {
  const stores: Store[] = [];
  const clients: { quit(): Promise<unknown> }[] = [];
  const open = async () => {
    const prefix = `test-${randomUUID()}`;
    const store = await createRedisStore(redis.url, {}, { keyPrefix: prefix });
    stores.push(store);
    return { store, prefix };
  };
  const client = async () => {
    const c = createClient({ url: redis.url, RESP: 2 });
    await c.connect();
    clients.push(c);
    return c;
  };
  afterEach(async () => {
    await Promise.all(stores.splice(0).map((s) => s.close()));
    await Promise.all(clients.splice(0).map((c) => c.quit()));
  });

  it("copies a short head and shares a long one, reading both back whole", async () => {
    const { store } = await open();
    await store.append(add({ messages: many(10) }));
    const small = await store.fork(forkCmd({ newThreadId: "small", atSeq: 5 }));
    expect(small.sharedCount).toBe(5);
    expect(small.thread.parent?.threadId).toBe("t");
    const s = await store.read("ns", "small");
    expect(s?.messages.map((m) => m.seq)).toEqual([1, 2, 3, 4, 5]);

    await store.append(add({ messages: many(200, 10) }));
    const big = await store.fork(forkCmd({ newThreadId: "big", atSeq: 150 }));
    expect(big.sharedCount).toBe(150);
    const b = await store.read("ns", "big");
    expect(b?.messages.map((m) => m.seq)).toEqual(Array.from({ length: 150 }, (_, i) => i + 1));
    // The parent reads the same after its head froze, and its next Add opens a fresh head.
    await store.append(add({ messages: [user("next")] }));
    const p = await store.read("ns", "t");
    expect(p?.messages.map((m) => m.seq)).toEqual(Array.from({ length: 211 }, (_, i) => i + 1));
    await store.append(add({ threadId: "big", messages: [user("own")] }));
    const b2 = await store.read("ns", "big");
    expect(b2?.messages.at(-1)).toMatchObject({ seq: 151, content: "own" });
    expect(b2?.messages.at(-2)).toMatchObject({ seq: 150, content: "m149" });
    const win = await store.read("ns", "big", { limit: 5 });
    expect(win?.complete).toBe(false);
    expect(win?.messages.at(-1)?.seq).toBe(151);
    expect(await store.listThreads("ns", "", 10, undefined, "t")).toEqual(["big", "small"]);
  });

  it("forks a 100,000-message parent in one EVALSHA that reads none of its messages", async () => {
    const { store } = await open();
    for (let i = 0; i < 10; i++) await store.append(add({ messages: many(10_000, i * 10_000) }));
    const c = await client();
    await c.sendCommand(["CONFIG", "RESETSTAT"]);
    const r = await store.fork(forkCmd({ newThreadId: "f" }));
    expect(r.sharedCount).toBe(100_000);
    const info = await c.sendCommand(["INFO", "commandstats"]);
    const calls = (cmd: string) =>
      Number(new RegExp(`cmdstat_${cmd}:calls=(\\d+)`).exec(String(info))?.[1] ?? 0);
    expect(calls("evalsha")).toBe(1);
    expect(calls("lrange")).toBe(0);
    const read = await store.read("ns", "f", { limit: 3 });
    expect(read?.messages.at(-1)?.seq).toBe(100_000);
  });

  it("keeps a frozen segment while any holder references it, then deletes it and its usage", async () => {
    const { store, prefix } = await open();
    await store.append(add({ messages: many(300) }));
    await store.fork(forkCmd({ newThreadId: "f", atSeq: 200 }));
    const c = await client();
    const segs = async () => (await c.keys(`${prefix}:*:s:*`)).length;
    expect(await segs()).toBe(1);
    expect(await store.clear("ns", "t", 6000)).toBe(true);
    expect(await segs()).toBe(1);
    const f = await store.read("ns", "f");
    expect(f?.messages).toHaveLength(200);
    // A parent of the same id again: its head is new, the fork's segment untouched.
    await store.append(add({ messages: many(2, 900) }));
    expect((await store.read("ns", "t"))?.messages.map((m) => m.content)).toEqual(["m900", "m901"]);
    expect((await store.read("ns", "f"))?.messages.map((m) => m.content)).toEqual(
      f?.messages.map((m) => m.content),
    );
    await store.clear("ns", "t", 6000);
    expect(await store.clear("ns", "f", 6000)).toBe(true);
    expect(await segs()).toBe(0);
    const usage = await c.hGetAll(`${prefix}:{ns-bnM}:usage`);
    expect(Number(usage.messages)).toBe(0);
    expect(Number(usage.bytes)).toBe(0);
    expect(Number(usage.threads)).toBe(0);
  });

  it("replays a Fork by request_id with the fork's current state", async () => {
    const { store } = await open();
    await store.append(add({ messages: many(3) }));
    const cmd = forkCmd({ requestId: "r1", requestHash: "h1" });
    const first = await store.fork(cmd);
    expect(first.replayed).toBe(false);
    await store.append(add({ threadId: "f", messages: [user("x")] }));
    const again = await store.fork(cmd);
    expect(again).toMatchObject({ replayed: true, sharedCount: 3 });
    expect(again.thread.lastSeq).toBe(4);
    await expect(store.fork({ ...cmd, requestHash: "h2" })).rejects.toMatchObject({
      code: "invalid_argument",
    });
    await expect(store.fork(forkCmd({ newThreadId: "f" }))).rejects.toMatchObject({
      code: "already_exists",
    });
  });

  it("trims an Add across a frozen segment, releasing it when the floor passes it", async () => {
    const { store, prefix } = await open();
    const c = await client();
    const segs = async () => (await c.keys(`${prefix}:*:s:*`)).length;
    const usage = async () => c.hGetAll(`${prefix}:{ns-bnM}:usage`);
    await store.append(add({ messages: many(300) }));
    await store.fork(forkCmd({ newThreadId: "f" }));
    const small = { ...window20, maxStored: 100 };
    await store.append(
      add({ threadId: "f", messages: [user("x")], strategy: small, replaceStrategy: true }),
    );
    const f = await store.read("ns", "f");
    expect(f?.messages.map((m) => m.seq)).toEqual(seqs(202, 301));
    expect(f?.messages[0]?.content).toBe("m201");
    // The parent keeps all its messages; the segment stays (two holders).
    expect((await store.read("ns", "t"))?.messages).toHaveLength(300);
    await store.clear("ns", "t", 6000);
    expect(await segs()).toBe(1);
    expect(Number((await usage()).messages)).toBe(301);
    await store.append(add({ threadId: "f", messages: many(150, 1000), strategy: small }));
    expect(await segs()).toBe(0);
    expect((await store.read("ns", "f"))?.messages.map((m) => m.seq)).toEqual(seqs(352, 451));
    expect(Number((await usage()).messages)).toBe(100);
  });

  it("trims a fork to its own max_stored at the Fork, leaving the parent whole", async () => {
    const { store } = await open();
    await store.append(add({ messages: many(300) }));
    const r = await store.fork(
      forkCmd({ newThreadId: "f", atSeq: 250, strategy: { ...window20, maxStored: 40 } }),
    );
    expect(r.sharedCount).toBe(250);
    expect((await store.read("ns", "f"))?.messages.map((m) => m.seq)).toEqual(seqs(211, 250));
    expect((await store.read("ns", "t"))?.messages).toHaveLength(300);
  });

  it("reads the roles at a fork's cut in pages of 256 seqs, only while its run of tool results lasts", async () => {
    const { store } = await open();
    // Seqs 1..10,000 users, 10,001 a call of 1,000 tools, 10,002..11,001 their results, then 10 users.
    const ids = Array.from({ length: 1000 }, (_, i) => `c${i}`);
    await store.append(add({ messages: many(10_000) }));
    await store.append(
      add({
        messages: [
          {
            role: "assistant",
            content: "",
            toolCalls: ids.map((id) => ({ id, name: "f", arguments: "{}" })),
          },
          ...ids.map((id) => ({ role: "tool" as const, content: "r", toolCallId: id })),
          ...many(10, 20_000),
        ],
      }),
    );
    const c = await client();
    const calls = async (cmd: string) => {
      const info = String(await c.sendCommand(["INFO", "commandstats"]));
      return Number(new RegExp(`cmdstat_${cmd}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
    };
    // The cut at the first result (11,011 - 1,010 = 10,001 dropped) extends over all 1,000:
    // pages from 10,002, the fourth (10,770..11,025) ending the run at 11,002.
    await c.sendCommand(["CONFIG", "RESETSTAT"]);
    await store.fork(forkCmd({ newThreadId: "f", strategy: { ...window20, maxStored: 1010 } }));
    expect(await calls("lrange")).toBe(4);
    expect(await calls("evalsha")).toBe(1);
    expect((await store.read("ns", "f"))?.messages.map((m) => m.seq)).toEqual(seqs(11_002, 11_011));
    // A cut on a user message: one page, whatever the parent's length.
    await c.sendCommand(["CONFIG", "RESETSTAT"]);
    await store.fork(forkCmd({ newThreadId: "g", strategy: { ...window20, maxStored: 5 } }));
    expect(await calls("lrange")).toBe(1);
    expect((await store.read("ns", "g"))?.messages.map((m) => m.seq)).toEqual(seqs(11_007, 11_011));
  });

  it("rewinds a fork into its frozen entry and the parent past its frozen head", async () => {
    const { store } = await open();
    await store.append(add({ messages: many(300) }));
    await store.fork(forkCmd({ newThreadId: "f", atSeq: 200 }));
    await store.append(add({ threadId: "f", messages: many(5, 500) }));
    const rf = await store.rewind({
      namespace: "ns",
      threadId: "f",
      toSeq: 150,
      expectedLastSeq: undefined,
      requestId: "",
      requestHash: "",
      now: 7000,
    });
    expect(rf.removedCount).toBe(55);
    expect((await store.read("ns", "f"))?.messages.map((m) => m.seq)).toEqual(seqs(1, 150));
    await store.append(add({ threadId: "f", messages: [user("after")] }));
    expect((await store.read("ns", "f"))?.messages.at(-1)).toMatchObject({
      seq: 151,
      content: "after",
    });
    await store.rewind({
      namespace: "ns",
      threadId: "t",
      toSeq: 250,
      expectedLastSeq: undefined,
      requestId: "",
      requestHash: "",
      now: 7000,
    });
    await store.append(add({ messages: [user("p")] }));
    const p = await store.read("ns", "t");
    expect(p?.messages.map((m) => m.seq)).toEqual(seqs(1, 251));
    expect(p?.messages.at(-1)?.content).toBe("p");
    expect((await store.read("ns", "f"))?.messages[149]?.content).toBe("m149");
  });

  it("forks a fork: entries over two frozen segments, read in order", async () => {
    const { store } = await open();
    await store.append(add({ messages: many(300) }));
    await store.fork(forkCmd({ newThreadId: "f1", atSeq: 200 }));
    await store.append(add({ threadId: "f1", messages: many(200, 1000) }));
    await store.fork(forkCmd({ threadId: "f1", newThreadId: "f2", atSeq: 350 }));
    const f2 = await store.read("ns", "f2");
    expect(f2?.messages.map((m) => m.seq)).toEqual(seqs(1, 350));
    expect(f2?.messages[199]?.content).toBe("m199");
    expect(f2?.messages[200]?.content).toBe("m1000");
    const win = await store.read("ns", "f2", { limit: 10 });
    expect(win?.messages.at(0)?.seq).toBe(350 - 10 - 16 + 1);
  });

  it("trims a summary fork when a fold commits, across its frozen entry", async () => {
    const { store } = await open();
    const s = { ...summary, maxStored: 150 };
    await store.append(add({ messages: many(140), strategy: s, defaultStrategy: s }));
    await store.fork(forkCmd({ newThreadId: "f" }));
    await store.append(add({ threadId: "f", messages: many(60, 500) }));
    const f = await store.getThread("ns", "f");
    const token = await store.acquireFoldLease("ns", "f", 10_000);
    const done = await store.commitSummary({
      namespace: "ns",
      threadId: "f",
      incarnation: f?.incarnation ?? "",
      leaseToken: token ?? 0,
      fromSeq: 0,
      throughSeq: 180,
      summary: "s",
      foldedCount: 180,
      now: 8000,
    });
    expect(done?.summarizedThroughSeq).toBe(180);
    expect((await store.read("ns", "f"))?.messages.map((m) => m.seq)).toEqual(seqs(51, 200));
  });

  it("logs thread_forked on the new thread", async () => {
    const { store } = await open();
    await store.append(add({ messages: many(3) }));
    const head = await store.headCursor("ns");
    await store.fork(forkCmd({ atSeq: 2 }));
    const events = await store.readEvents("ns", head, 10);
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      type: "thread_forked",
      threadId: "f",
      parentThreadId: "t",
      atSeq: 2,
      sharedCount: 2,
      summaryInherited: false,
    });
  });

  it("removes an expired target first, refuses an expired parent, and counts the quotas", async () => {
    const { store } = await open();
    await store.append(add({ messages: many(3) }));
    await store.append(add({ threadId: "old", messages: [user("x")], ttlMs: 10, now: 1000 }));
    const r = await store.fork(forkCmd({ newThreadId: "old", now: 5000 }));
    expect(r.thread.lastSeq).toBe(3);
    await store.append(add({ threadId: "gone", messages: [user("x")], ttlMs: 10, now: 1000 }));
    await expect(
      store.fork(forkCmd({ threadId: "gone", newThreadId: "g", now: 5000 })),
    ).rejects.toMatchObject({ code: "not_found" });
    const limited = await createRedisStore(
      redis.url,
      { maxMessagesPerNamespace: 8 },
      { keyPrefix: `test-${randomUUID()}` },
    );
    stores.push(limited);
    await limited.append(add({ messages: many(5) }));
    await expect(limited.fork(forkCmd({ newThreadId: "q" }))).rejects.toMatchObject({
      code: "resource_exhausted",
    });
    expect(await limited.getThread("ns", "q")).toBeUndefined();
  });

  it("releases segments when forks expire or a namespace is cleared", async () => {
    const { store, prefix } = await open();
    const c = await client();
    const segs = async () => (await c.keys(`${prefix}:*:s:*`)).length;
    await store.append(add({ messages: many(300), now: 1000 }));
    await store.fork(forkCmd({ newThreadId: "f", ttlMs: 100, now: 1000 }));
    await store.clear("ns", "t", 1000);
    expect(await segs()).toBe(1);
    expect(await store.sweepExpired(Date.now() + 1_000_000, 100)).toBeGreaterThanOrEqual(1);
    expect(await segs()).toBe(0);
    await store.append(add({ threadId: "u", messages: many(300) }));
    await store.fork(forkCmd({ threadId: "u", newThreadId: "v" }));
    expect(await segs()).toBe(1);
    expect(await store.clearAll("ns", 9000)).toBe(2);
    expect(await segs()).toBe(0);
    const usage = await c.hGetAll(`${prefix}:{ns-bnM}:usage`);
    expect([usage.threads, usage.messages, usage.bytes].map(Number)).toEqual([0, 0, 0]);
  });

  it("lists a thread's forks until each is cleared, whatever became of the parent", async () => {
    const { store } = await open();
    await store.append(add({ messages: many(3) }));
    await store.fork(forkCmd({ newThreadId: "f1" }));
    await store.fork(forkCmd({ newThreadId: "f2", labels: { team: "a" } }));
    await store.importThread({
      namespace: "ns",
      threadId: "f3",
      strategy: window20,
      lastSeq: 1,
      summarizedThroughSeq: 0,
      summary: "",
      summaryTime: 0,
      createTime: 1,
      updateTime: 1,
      messages: [{ ...user("i"), seq: 1, createTime: 1 }],
      parent: { threadId: "t", atSeq: 1, forkTime: 1, parentCreateTime: 1 },
      now: 1,
    });
    expect((await store.getThread("ns", "f3"))?.parent?.threadId).toBe("t");
    expect(await store.listThreads("ns", "", 10, undefined, "t")).toEqual(["f1", "f2", "f3"]);
    expect(await store.listThreads("ns", "", 10, { team: "a" }, "t")).toEqual(["f2"]);
    await store.clear("ns", "t", 6000);
    await store.clear("ns", "f1", 6000);
    expect(await store.listThreads("ns", "", 10, undefined, "t")).toEqual(["f2", "f3"]);
  });

  it("keeps a Fork's request record through a Rewind of the fork to 0", async () => {
    const { store } = await open();
    await store.append(add({ messages: many(3) }));
    const cmd = forkCmd({ requestId: "r", requestHash: "h" });
    await store.fork(cmd);
    await store.rewind({
      namespace: "ns",
      threadId: "f",
      toSeq: 0,
      expectedLastSeq: undefined,
      requestId: "",
      requestHash: "",
      now: 6000,
    });
    const again = await store.fork(cmd);
    expect(again).toMatchObject({ replayed: true, sharedCount: 3 });
    expect(again.thread.lastSeq).toBe(0);
  });

  it("forks a parent under concurrent Adds from another replica: each fork is a prefix of the parent", async () => {
    const { store, prefix } = await open();
    const other = await createRedisStore(redis.url, {}, { keyPrefix: prefix });
    stores.push(other);
    await store.append(add({ messages: many(120) }));
    const adds = Array.from({ length: 30 }, (_, i) =>
      other.append(add({ messages: many(3, 1000 + 3 * i) })),
    );
    const forks = Array.from({ length: 8 }, (_, i) =>
      store.fork(forkCmd({ newThreadId: `f${i}` })),
    );
    const [, forked] = await Promise.all([Promise.all(adds), Promise.all(forks)]);
    const parent = await store.read("ns", "t");
    for (const f of forked) {
      const read = await store.read("ns", f.thread.threadId);
      expect(read?.messages.map((m) => m.content)).toEqual(
        parent?.messages.slice(0, f.thread.lastSeq).map((m) => m.content),
      );
      expect(f.sharedCount).toBe(f.thread.lastSeq);
    }
  });

  it("refuses a fork that would reference more than 63 segments, writing nothing", async () => {
    const { store } = await open();
    let parent = "t";
    for (let level = 1; level <= 64; level++) {
      await store.append(add({ threadId: parent, messages: many(129, level * 1000) }));
      const next = `f${level}`;
      if (level === 64) {
        await expect(
          store.fork(forkCmd({ threadId: parent, newThreadId: next })),
        ).rejects.toMatchObject({ code: "failed_precondition" });
        expect(await store.getThread("ns", next)).toBeUndefined();
        break;
      }
      await store.fork(forkCmd({ threadId: parent, newThreadId: next }));
      parent = next;
    }
    const deepest = await store.read("ns", "f63", { limit: 1 });
    expect(deepest?.messages.at(-1)?.content).toBe("m64128");
    expect((await store.read("ns", "f63"))?.messages).toHaveLength(64 * 129);
  });

  it("answers the core's refusals: at_seq past last_seq, trimmed, a stale expected_last_seq", async () => {
    const { store } = await open();
    const small = { ...window20, maxStored: 5 };
    await store.append(add({ messages: many(10), strategy: small, defaultStrategy: small }));
    await expect(store.fork(forkCmd({ atSeq: 11 }))).rejects.toMatchObject({
      code: "out_of_range",
    });
    await expect(store.fork(forkCmd({ atSeq: 3 }))).rejects.toMatchObject({
      code: "failed_precondition",
    });
    await expect(store.fork(forkCmd({ expectedLastSeq: 9 }))).rejects.toMatchObject({
      code: "aborted",
    });
    const r = await store.fork(forkCmd({ atSeq: 5 }));
    expect(r.sharedCount).toBe(0);
    expect(r.thread.lastSeq).toBe(5);
    expect((await store.read("ns", "f"))?.messages).toEqual([]);
  });

  it("inherits the parent's summary when it covers at most at_seq, and writes nothing to the parent", async () => {
    const { store, prefix } = await open();
    const s = { ...summary, maxStored: 1000 };
    await store.append(add({ messages: many(200), strategy: s, defaultStrategy: s }));
    const p = await store.getThread("ns", "t");
    const token = await store.acquireFoldLease("ns", "t", 10_000);
    await store.commitSummary({
      namespace: "ns",
      threadId: "t",
      incarnation: p?.incarnation ?? "",
      leaseToken: token ?? 0,
      fromSeq: 0,
      throughSeq: 100,
      summary: "first hundred",
      foldedCount: 100,
      now: 4000,
    });
    await store.releaseFoldLease("ns", "t", token ?? 0);
    const before = await store.getThread("ns", "t");
    const r = await store.fork(forkCmd({ atSeq: 150 }));
    expect(r.summaryInherited).toBe(true);
    expect(r.thread).toMatchObject({
      summary: "first hundred",
      summarizedThroughSeq: 100,
      lastSeq: 150,
    });
    expect(await store.getThread("ns", "t")).toEqual(before);
    const c = await client();
    expect(await c.hGet(`${prefix}:{ns-bnM}:t:t`, "lineage")).toBeTruthy();
  });
});
