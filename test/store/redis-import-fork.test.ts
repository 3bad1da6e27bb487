import { randomUUID } from "node:crypto";
import { createClient } from "redis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { StoredMessage } from "../../src/core/types.js";
import { createRedisStore } from "../../src/store/redis/index.js";
import { IMPORT_FORK } from "../../src/store/redis/lua/import.js";
import type { ImportThreadCommand, Store } from "../../src/store/store.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";
import { forkCmd } from "./contract/support.js";
import { appendCommands, user, window20 } from "./fixtures.js";

/**
 * What only the Redis store's import of a fork (importThread with
 * shareFrom) has to show: one script that reads none of a long parent's
 * messages, the parent's head frozen or copied as a Fork's would be, the
 * segments' references and the usage, the retry when the parent changes
 * between the read and the script, and the script's refusal to write on a
 * stale read.
 */
let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedisServer();
});
afterAll(async () => {
  await redis?.stop();
});

const add = appendCommands({ ...window20, maxStored: 200_000 });
const many = (n: number, from = 0) => Array.from({ length: n }, (_, i) => user(`m${from + i}`));
const own = (from: number, count: number): StoredMessage[] =>
  Array.from({ length: count }, (_, i) => ({
    seq: from + i,
    role: "user",
    content: `own${from + i}`,
    createTime: 2000,
  }));

/** Thread `id`, a fork of "t" (last_seq `parentLastSeq`) sharing its seqs through `through`, with `count` of its own. */
function shared(
  id: string,
  parentLastSeq: number,
  through: number,
  count: number,
): ImportThreadCommand {
  return {
    namespace: "ns",
    threadId: id,
    strategy: window20,
    lastSeq: through + count,
    summarizedThroughSeq: 0,
    summary: "",
    summaryTime: 0,
    createTime: 2500,
    updateTime: 2600,
    messages: own(through + 1, count),
    parent: { threadId: "t", atSeq: through, forkTime: 2500, parentCreateTime: 1000 },
    shareFrom: { threadId: "t", throughSeq: through, parentLastSeq },
    now: 3000,
  };
}

describe("redis store: import of a fork sharing its parent's prefix", () => {
  const stores: Store[] = [];
  const clients: { quit(): Promise<unknown> }[] = [];
  const open = async (prefix = `test-${randomUUID()}`) => {
    const store = await createRedisStore(redis.url, {}, { keyPrefix: prefix });
    stores.push(store);
    return { store, prefix, base: `${prefix}:{ns-bnM}:` };
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

  it("imports a fork of a 100,000-message parent in one EVALSHA that reads none of its messages", async () => {
    const { store, base } = await open();
    for (let i = 0; i < 10; i++) await store.append(add({ messages: many(10_000, i * 10_000) }));
    const c = await client();
    await c.sendCommand(["CONFIG", "RESETSTAT"]);
    expect(await store.importThread(shared("f", 100_000, 100_000, 2))).toBe(true);
    const info = String(await c.sendCommand(["INFO", "commandstats"]));
    const calls = (cmd: string) =>
      Number(new RegExp(`cmdstat_${cmd}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
    expect(calls("evalsha")).toBe(1);
    expect(calls("lrange")).toBe(0);
    // The parent's head became one frozen segment, held by both threads.
    const segments = await c.keys(`${base}sg:*`);
    expect(segments).toHaveLength(1);
    expect(await c.hGet(segments[0] ?? "", "refs")).toBe("2");
    expect(await c.lLen(`${base}m:f`)).toBe(2);
    const usage = await c.hGetAll(`${base}usage`);
    expect([usage.threads, usage.messages].map(Number)).toEqual([2, 100_002]);
    const read = await store.read("ns", "f", { limit: 3 });
    expect(read?.messages.slice(-3).map((m) => m.content)).toEqual([
      "m99999",
      "own100001",
      "own100002",
    ]);
  });

  it("copies a short head into the fork's own, before its own messages, leaving the parent's", async () => {
    const { store, base } = await open();
    await store.append(add({ messages: many(10) }));
    const c = await client();
    const before = await c.hGetAll(`${base}usage`);
    expect(await store.importThread(shared("f", 10, 8, 2))).toBe(true);
    expect(await c.keys(`${base}s:*`)).toEqual([]);
    expect(await c.hGet(`${base}t:t`, "lineage")).toBeNull();
    expect(await c.hGet(`${base}t:f`, "lineage")).toBeNull();
    const head = await c.lRange(`${base}m:f`, 0, -1);
    expect(head.map((e) => Number(e.split(" ")[0]))).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    const after = await c.hGetAll(`${base}usage`);
    expect(Number(after.messages) - Number(before.messages)).toBe(10);
    // The thread's bytes are its head's, as an Add would count them.
    expect(Number(after.bytes) - Number(before.bytes)).toBe(
      Number(await c.hGet(`${base}t:f`, "bytes")),
    );
    expect((await store.read("ns", "t"))?.messages).toHaveLength(10);
  });

  it("imports right while Forks from another replica freeze the parent's head (the script checks, the store retries)", async () => {
    const { store, prefix, base } = await open();
    const other = (await open(prefix)).store;
    await store.append(add({ messages: many(300) }));
    const forks = Array.from({ length: 6 }, (_, i) =>
      other.fork(forkCmd(`k${i}`, { atSeq: 200 + i, now: 3000 })),
    );
    const imports = Array.from({ length: 6 }, (_, i) =>
      store.importThread(shared(`f${i}`, 300, 250 + i, 1)),
    );
    const [, written] = await Promise.all([Promise.all(forks), Promise.all(imports)]);
    expect(written).toEqual([true, true, true, true, true, true]);
    const parent = (await store.read("ns", "t"))?.messages.map((m) => m.content) ?? [];
    for (let i = 0; i < 6; i++) {
      const read = await store.read("ns", `f${i}`);
      expect(read?.messages.map((m) => m.content)).toEqual([
        ...parent.slice(0, 250 + i),
        `own${251 + i}`,
      ]);
    }
    // Every reference taken is released: nothing of the messages is left.
    expect(await store.clearAll("ns", 9000)).toBe(13);
    const c = await client();
    expect(await c.keys(`${base}s*:*`)).toEqual([]);
    const usage = await c.hGetAll(`${base}usage`);
    expect([usage.threads, usage.messages, usage.bytes].map(Number)).toEqual([0, 0, 0]);
  });

  it("writes nothing when the parent is not as the store read it", async () => {
    const { store, base } = await open();
    await store.append(add({ messages: many(3) }));
    const c = await client();
    const keys = [`${base}t:t`, `${base}t:f`, `${base}threads`, `${base}log`, `${base}usage`];
    const plan = JSON.stringify({
      head_low: 1,
      copy_from: 1,
      copy_to: 3,
      head_frozen: false,
      entries: [],
      parent_entries: [],
    });
    const head = ["f", "inc", "{}", "k", "window", "20", "0", "3", "0", "", "0", "1", "1", "3000"];
    const rest = ["100", "0", "0", "0", "0", "1", "", "", "", "", "t"];
    // Read as absent (no fields), or with its head one message shorter.
    for (const [headLength, fields] of [
      ["3", []],
      ["2", ((await c.sendCommand(["HGETALL", `${base}t:t`])) as string[]).map(String)],
    ] as const) {
      const reply = await c.sendCommand([
        "EVAL",
        IMPORT_FORK.source,
        String(keys.length),
        ...keys,
        ...head,
        ...rest,
        headLength,
        plan,
        String(fields.length),
        ...fields,
      ]);
      expect(reply).toEqual(["retry"]);
    }
    expect(await c.exists(`${base}t:f`)).toBe(0);
    expect(await store.listThreads("ns", "", 10)).toEqual(["t"]);
  });
});
