import { randomUUID } from "node:crypto";
import { createClient } from "redis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { messageBytes } from "../../src/core/quota.js";
import { createRedisStore } from "../../src/store/redis/index.js";
import type { Store } from "../../src/store/store.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";
import { rewindCmd } from "./contract/support.js";
import { appendCommands, user, window20 } from "./fixtures.js";

/**
 * What only the Redis store's Rewind has to show (its contract cases are
 * test/store/contract/rewind.ts, run by test/store/contract.test.ts on every
 * backend): one script per Rewind, ordered among
 * concurrent Adds from several replicas, with the usage hash and the
 * thread's byte count kept as the quotas read them.
 */
let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedisServer();
});
afterAll(async () => {
  await redis?.stop();
});

const add = appendCommands(window20);

describe("redis store: rewind", () => {
  const stores: Store[] = [];
  const open = async (prefix: string) => {
    const store = await createRedisStore(redis.url, {}, { keyPrefix: prefix });
    stores.push(store);
    return store;
  };
  afterEach(async () => {
    await Promise.all(stores.splice(0).map((s) => s.close()));
  });

  it("orders Rewinds among concurrent Adds from two replicas: answers, log, list and usage agree", async () => {
    const prefix = `test-${randomUUID()}`;
    const [a, b] = [await open(prefix), await open(prefix)];
    await a.append(add({ messages: [user("seed")] }));
    const head = await a.headCursor("ns");
    const adds = Array.from({ length: 40 }, (_, i) =>
      (i % 2 === 0 ? a : b).append(add({ messages: [user(`m${i}`)], now: 2000 + i })),
    );
    const rewinds = Array.from({ length: 6 }, (_, i) =>
      (i % 2 === 0 ? b : a).rewind(rewindCmd(1, { now: 3000 + i })),
    );
    const [added, rewound] = await Promise.all([Promise.all(adds), Promise.all(rewinds)]);
    // The log, replayed: each Add right after the thread's last seq, each Rewind back to 1.
    const events = await a.readEvents("ns", head, 1000);
    let lastSeq = 1;
    for (const e of events) {
      if (e.type === "messages_added") {
        expect(e.firstSeq).toBe(lastSeq + 1);
        lastSeq = e.lastSeq;
      } else if (e.type === "thread_rewound") {
        expect(e.removedCount).toBe(lastSeq - 1);
        lastSeq = 1;
      }
    }
    expect(events.filter((e) => e.type === "messages_added")).toHaveLength(40);
    const logged = events.flatMap((e) => (e.type === "thread_rewound" ? [e.removedCount] : []));
    const answered = rewound.map((r) => r.removedCount).filter((n) => n > 0);
    expect([...logged].sort()).toEqual([...answered].sort());
    // The list is the log's end state, and each message the one its Add was told.
    const final = await b.read("ns", "t");
    expect(final?.thread.lastSeq).toBe(lastSeq);
    expect(final?.messages.map((m) => m.seq)).toEqual(
      Array.from({ length: lastSeq }, (_, i) => i + 1),
    );
    for (const m of final?.messages.slice(1) ?? []) {
      expect(added[Number(m.content.slice(1))]?.firstSeq).toBe(m.seq);
    }
    // What the quotas read: the namespace's usage and the thread's own byte count.
    const bytes = (final?.messages ?? []).reduce((n, m) => n + messageBytes(m), 0);
    const c = createClient({ url: redis.url, RESP: 2 });
    await c.connect();
    try {
      const base = `${prefix}:{ns-bnM}:`;
      expect(
        await c.sendCommand(["HMGET", `${base}usage`, "threads", "messages", "bytes"]),
      ).toEqual(["1", String(lastSeq), String(bytes)]);
      expect(await c.sendCommand(["HGET", `${base}t:t`, "bytes"])).toBe(String(bytes));
    } finally {
      c.destroy();
    }
  });

  it("answers a retried Rewind from any replica with its first result, even after later Adds", async () => {
    const prefix = `test-${randomUUID()}`;
    const [a, b] = [await open(prefix), await open(prefix)];
    await a.append(add({ messages: ["1", "2", "3"].map(user) }));
    const once = { requestId: "rw", requestHash: "to-1" };
    const first = await a.rewind(rewindCmd(1, once));
    await b.append(add({ messages: [user("x")], now: 3000 }));
    expect(await b.rewind(rewindCmd(1, { ...once, now: 4000 }))).toEqual({
      ...first,
      replayed: true,
    });
    expect((await a.getThread("ns", "t"))?.lastSeq).toBe(2);
  });
});
