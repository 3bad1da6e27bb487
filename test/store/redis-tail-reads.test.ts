import { randomUUID } from "node:crypto";
import fc from "fast-check";
import { createClient } from "redis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Strategy } from "../../src/core/types.js";
import { createRedisStore } from "../../src/store/redis/index.js";
import { refusesMulti } from "../../src/store/redis/reads.js";
import type { ReadView, Store, ThreadSnapshot } from "../../src/store/store.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";
import { appendCommands, buffer, summary, user, window20 } from "./fixtures.js";

/**
 * A single-node store answers a Get's read without Lua once it has read the
 * thread before (reads.ts readTail: an HMGET of the thread's fields, LLEN and
 * the list's tail in one MULTI, cut to the window the READ script would return). Against a real
 * redis-server: after any sequence of Adds, summary commits, Rewinds and
 * Clears, a store that reads by tail answers exactly what a fresh store
 * (whose first read is the script's) answers, and the tail path is the one
 * taken.
 */

let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedisServer();
});
afterAll(async () => {
  await redis?.stop();
});

type Op =
  | { kind: "add"; count: number; strategy: Strategy | undefined; replace: boolean }
  | { kind: "fold"; through: number }
  | { kind: "rewind"; back: number }
  | { kind: "clear" }
  | { kind: "read"; limit: number | undefined };

const window3: Strategy = { ...window20, window: 3 };
const buffer5: Strategy = { ...buffer, kind: "buffer", maxMessages: 5 } as Strategy;
const summary4: Strategy = { ...summary, window: 4, summarizeEvery: 100 };

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant("add" as const),
      count: fc.integer({ min: 1, max: 30 }),
      strategy: fc.constantFrom<Strategy | undefined>(
        undefined,
        window20,
        window3,
        buffer,
        buffer5,
        summary,
        summary4,
      ),
      replace: fc.boolean(),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("fold" as const), through: fc.nat(40) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("rewind" as const), back: fc.nat(10) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("clear" as const) }) },
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant("read" as const),
      limit: fc.option(fc.integer({ min: 0, max: 50 }), { nil: undefined }),
    }),
  },
);

const cmd = appendCommands(window20);

function shape(s: ThreadSnapshot | undefined) {
  return s === undefined
    ? undefined
    : {
        thread: s.thread,
        seqs: s.messages.map((m) => m.seq),
        contents: s.messages.map((m) => m.content),
        complete: s.complete,
      };
}

/** Script calls so far: EVALSHA, and FCALL (the Add runs as a Redis Function). */
async function scriptCalls(): Promise<number> {
  const c = createClient({ url: redis.url });
  await c.connect();
  const info = await c.info("commandstats");
  await c.close();
  const calls = (name: string): number =>
    Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
  return calls("evalsha") + calls("fcall");
}

async function apply(store: Store, o: Op, now: number): Promise<void> {
  const thread = await store.getThread("ns", "t");
  switch (o.kind) {
    case "add":
      await store
        .append(
          cmd({
            messages: Array.from({ length: o.count }, (_, i) => user(`m${now}-${i}`)),
            strategy: o.strategy,
            replaceStrategy: o.replace && o.strategy !== undefined,
            now,
          }),
        )
        .catch(() => {}); // a strategy mismatch refuses it; nothing is written
      return;
    case "fold": {
      if (thread === undefined || thread.strategy.kind !== "summary") return;
      const through = Math.min(thread.lastSeq, thread.summarizedThroughSeq + o.through);
      if (through <= thread.summarizedThroughSeq) return;
      const token = await store.acquireFoldLease("ns", "t", 10_000);
      if (token === undefined) return;
      await store.commitSummary({
        namespace: "ns",
        threadId: "t",
        incarnation: thread.incarnation,
        leaseToken: token,
        fromSeq: thread.summarizedThroughSeq,
        throughSeq: through,
        summary: `summary through ${through}`,
        foldedCount: through - thread.summarizedThroughSeq,
        now,
      });
      await store.releaseFoldLease("ns", "t", token);
      return;
    }
    case "rewind":
      if (thread === undefined || thread.lastSeq === 0) return;
      await store
        .rewind({
          namespace: "ns",
          threadId: "t",
          toSeq: Math.max(0, thread.lastSeq - o.back),
          expectedLastSeq: undefined,
          requestId: "",
          requestHash: "",
          now,
        })
        .catch(() => {}); // below the summary: refused
      return;
    case "clear":
      await store.clear("ns", "t", now);
      return;
    case "read":
      return;
  }
}

describe("Redis tail reads", () => {
  it("answer what the READ script answers, after any sequence of changes", async () => {
    let tailReads = 0;
    let reads = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 25 }), async (ops) => {
        const prefix = `tail-${randomUUID()}`;
        const store = await createRedisStore(redis.url, {}, { keyPrefix: prefix });
        try {
          let now = 1000;
          for (const o of ops) {
            now += 1;
            await apply(store, o, now);
            const view: ReadView = { limit: o.kind === "read" ? o.limit : undefined };
            // A fresh store has no tail size for the thread: its read is the script's.
            const fresh = await createRedisStore(redis.url, {}, { keyPrefix: prefix });
            try {
              const before = await scriptCalls();
              const got = await store.read("ns", "t", view);
              const tail = (await scriptCalls()) === before;
              reads += 1;
              if (tail) tailReads += 1;
              expect(shape(got)).toEqual(shape(await fresh.read("ns", "t", view)));
            } finally {
              await fresh.close();
            }
          }
        } finally {
          await store.close();
        }
      }),
      { numRuns: 40 },
    );
    // Both paths were compared: a read with a larger limit than the last,
    // of a thread not read before or not there, or of a summary thread whose
    // unfolded turns outgrew the last size, is the script's.
    expect(tailReads).toBeGreaterThan(reads / 4);
    expect(tailReads).toBeLessThan(reads);
  }, 120_000);

  it("are what a thread read again and again costs: one script read, then none", async () => {
    const store = await createRedisStore(redis.url, {}, { keyPrefix: `tail-${randomUUID()}` });
    try {
      for (let i = 0; i < 5; i++) {
        await store.append(cmd({ messages: [user(`a${i}`), user(`b${i}`)], now: 1000 + i }));
      }
      const before = await scriptCalls();
      for (let i = 0; i < 10; i++) {
        await store.append(cmd({ messages: [user(`c${i}`)], now: 2000 + i }));
        const got = await store.read("ns", "t", { limit: undefined });
        expect(got?.messages.at(-1)?.content).toBe(`c${i}`);
        expect(got?.messages.length).toBe(Math.min(20 + 16, 11 + i));
      }
      // Ten Adds (a script each) and one script read: the other nine by tail.
      expect((await scriptCalls()) - before).toBe(11);
    } finally {
      await store.close();
    }
  });

  it("read a thread's labels and ttl as the script does", async () => {
    const prefix = `tail-${randomUUID()}`;
    const store = await createRedisStore(redis.url, {}, { keyPrefix: prefix });
    const fresh = await createRedisStore(redis.url, {}, { keyPrefix: prefix });
    try {
      // Now, not the other tests' small times: a ttl is checked against the clock on read.
      const now = Date.now();
      await store.append(
        cmd({ messages: [user("a")], labels: { team: "blue" }, ttlMs: 3_600_000, now }),
      );
      await store.read("ns", "t", { limit: undefined });
      const before = await scriptCalls();
      const got = await store.read("ns", "t", { limit: undefined });
      expect(await scriptCalls()).toBe(before);
      expect(got?.thread.labels).toEqual({ team: "blue" });
      expect(got?.thread.ttlMs).toBe(3_600_000);
      expect(got?.thread.expireTime).toBe(now + 3_600_000);
      expect(shape(got)).toEqual(shape(await fresh.read("ns", "t", { limit: undefined })));
    } finally {
      await store.close();
      await fresh.close();
    }
  });

  it("leave a hash with none of a thread's fields to the script, and fail as it does", async () => {
    const prefix = `tail-${randomUUID()}`;
    const store = await createRedisStore(redis.url, {}, { keyPrefix: prefix });
    const fresh = await createRedisStore(redis.url, {}, { keyPrefix: prefix });
    const c = createClient({ url: redis.url });
    await c.connect();
    try {
      await store.append(cmd({ messages: [user("a")] }));
      await store.read("ns", "t", { limit: undefined });
      const [threadKey] = await c.keys(`${prefix}*:t:t`);
      expect(threadKey).toBeDefined();
      // Damaged: the thread's hash holds only a counter, none of the fields a thread has.
      await c.del(threadKey as string);
      await c.hSet(threadKey as string, "bytes", "5");
      const before = await scriptCalls();
      const byTail = await store.read("ns", "t", { limit: undefined }).catch((e: Error) => e);
      expect(await scriptCalls()).toBe(before + 1);
      const byScript = await fresh.read("ns", "t", { limit: undefined }).catch((e: Error) => e);
      // Not answered as a missing thread: the same failure as a store reading by script.
      expect(byTail).toBeInstanceOf(Error);
      expect((byTail as Error).message).toBe((byScript as Error).message);
    } finally {
      await c.close();
      await store.close();
      await fresh.close();
    }
  });

  it("fall back to the script for good where Redis refuses MULTI (a proxy without it)", async () => {
    const noMulti = await startRedisServer({ args: ["--rename-command", "MULTI", ""] });
    try {
      const store = await createRedisStore(noMulti.url, {}, { keyPrefix: `tail-${randomUUID()}` });
      try {
        for (let i = 0; i < 30; i++) {
          await store.append(cmd({ messages: [user(`m${i}`)], now: 1000 + i }));
          const got = await store.read("ns", "t", { limit: 5 });
          expect(got?.messages.map((m) => m.content)).toEqual(
            Array.from({ length: Math.min(i + 1, 21) }, (_, j) => `m${Math.max(0, i - 20) + j}`),
          );
        }
      } finally {
        await store.close();
      }
    } finally {
      await noMulti.stop();
    }
  });

  it("stop only for a refusal of MULTI itself, not for a transaction Redis could not run now", () => {
    const reply = (text: string) => new Error(`redis store: ${text}`, { cause: new Error(text) });
    expect(refusesMulti(reply("ERR unknown command 'MULTI', with args beginning with: "))).toBe(
      true,
    );
    expect(refusesMulti(reply("ERR EXEC without MULTI"))).toBe(true);
    expect(refusesMulti(reply("NOPERM User u has no permissions to run the 'multi' command"))).toBe(
      true,
    );
    expect(refusesMulti(reply("EXECABORT Transaction discarded because of previous errors."))).toBe(
      false,
    );
    expect(
      refusesMulti(reply("WRONGTYPE Operation against a key holding the wrong kind of value")),
    ).toBe(false);
    expect(refusesMulti(new Error("redis store: a record has no field strategy"))).toBe(false);
  });
});
