import { createClient } from "redis";
import { afterAll, describe, expect, it } from "vitest";
import { Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { CallFailed, connectDriver, type Driver, grpcDriver } from "../integration/drivers.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";
import { type Replica, startReplica } from "../support/replica-process.js";
import { RetryingWriter } from "../support/retrying-writer.js";
import { Follower } from "../support/watch-follower.js";

/**
 * Watch when the Redis store fails, through the real `windlass-memory serve`
 * and real clients on every transport (grpc-js, Connect, gRPC-Web):
 * - an outage (redis-server SIGKILLed under load and restarted, its data kept
 *   by an fsynced append-only file), 20 times: every stream keeps delivering
 *   or ends with UNAVAILABLE, and resuming from its last token continues with
 *   no gap and no event twice; none ever stays open and silent;
 * - a lost history (restarted empty, or FLUSHALL): open streams end with
 *   OUT_OF_RANGE, tokens of the old history are refused with OUT_OF_RANGE on
 *   every replica, and a new Watch sees the new history from its first event;
 *   with each namespace in one slot and split into 4 shards
 *   (--redis-namespace-shards 4: a resume token per shard's log).
 */

const PROGRESS_MS = 200;

const started: { stop(): Promise<unknown> }[] = [];
afterAll(async () => {
  for (const s of started.reverse()) await s.stop().catch(() => {});
});

async function serve(redis: RedisServer, shards = 1): Promise<Replica> {
  const replica = await startReplica([
    "--store",
    redis.url,
    "--progress-interval-ms",
    String(PROGRESS_MS),
    "--redis-namespace-shards",
    String(shards),
  ]);
  started.push({ stop: () => replica.kill() });
  return replica;
}

function transports(replica: Replica): Driver[] {
  const drivers = [
    grpcDriver(replica.grpcPort),
    connectDriver(replica.httpPort, "connect", "1.1"),
    connectDriver(replica.httpPort, "grpc-web", "1.1"),
  ];
  started.push({
    stop: async () => {
      for (const d of drivers) d.close();
    },
  });
  return drivers;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, cond: () => boolean | Promise<boolean>, ms: number) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(20);
  }
}

const user = (content: string) => ({ role: Role.USER, content });
const code = (err: unknown) => (err instanceof CallFailed ? err.code : `CLIENT ${String(err)}`);

describe("Watch across Redis outages (data kept)", () => {
  it("keeps every stream delivering or resumable over 20 SIGKILL-and-restart cycles, with no gap and no event twice", async () => {
    const redis = await startRedisServer({
      args: ["--appendonly", "yes", "--appendfsync", "always"],
    });
    started.push(redis);
    const replica = await serve(redis);
    const drivers = transports(replica);
    const followers = drivers.map((d) => new Follower(d));
    await Promise.all(followers.map((f) => f.start()));
    const writers = ["w1", "w2", "w3"].map(
      (t) => new RetryingWriter(drivers[0] as Driver, t, 2000),
    );
    for (const w of writers) w.start();
    const total = () => writers.reduce((n, w) => n + w.acknowledged, 0);

    const cycles = 20;
    for (let cycle = 0; cycle < cycles; cycle++) {
      const before = total();
      await until(`writes before outage ${cycle + 1}`, () => total() >= before + 15, 30_000);
      await redis.kill();
      await sleep(100 + Math.floor(Math.random() * 400));
      await redis.restart();
    }
    await until("writes after the last outage", () => total() > 0, 30_000);
    await Promise.all(writers.map((w) => w.stop()));

    // Every follower catches up with every acknowledged Add: none stalled for good.
    await until(
      "every follower at every writer's last seq",
      () =>
        followers.every((f) =>
          writers.every((w) => (f.seen.get(w.threadId)?.at(-1) ?? 0) >= w.acknowledged),
        ),
      30_000,
    );
    await Promise.all(followers.map((f) => f.stop()));

    for (const f of followers) {
      expect(f.ended, f.driver.name).toBeUndefined();
      expect(f.stalls, `${f.driver.name} stalled`).toBe(0);
      for (const w of writers) {
        const seen = f.seen.get(w.threadId) ?? [];
        // Each seq once, in order, from 1: no gap, no repeat across resumes.
        expect(seen, `${f.driver.name} on ${w.threadId}`).toEqual(
          Array.from({ length: seen.length }, (_, i) => i + 1),
        );
        expect(seen.length).toBeGreaterThanOrEqual(w.acknowledged);
      }
    }
    // Nothing acknowledged was lost (appendfsync always).
    for (const w of writers) {
      const got = await (drivers[0] as Driver).get({ threadId: w.threadId, limit: 0 });
      expect(Number(got.thread?.lastSeq)).toBeGreaterThanOrEqual(w.acknowledged);
    }
    const resumes = followers.map((f) => `${f.driver.name}: ${f.resumes}`).join(", ");
    console.info(
      `redis-watch-outages: ${cycles} cycles, ${total()} acknowledged Adds, resumes ${resumes}`,
    );
    // The outages were real: every stream had to resume at least once.
    for (const f of followers) expect(f.resumes).toBeGreaterThan(0);
  }, 240_000);
});

describe.each([1, 4])("Watch when Redis loses its history, %i namespace shard(s)", (shards) => {
  for (const loss of ["restart empty", "FLUSHALL"] as const) {
    it(`ends open streams with OUT_OF_RANGE and refuses old tokens on every replica (${loss})`, async () => {
      const redis = await startRedisServer();
      started.push(redis);
      const [a, b] = await Promise.all([serve(redis, shards), serve(redis, shards)]);
      const onA = transports(a);
      const onB = transports(b);
      const writer = onA[0] as Driver;
      const followers = onB.map((d) => new Follower(d));
      await Promise.all(followers.map((f) => f.start()));
      await writer.add({ threadId: "t", messages: [user("1"), user("2"), user("3")] });
      // Another thread, in another shard when sharded: every shard's log has events.
      await writer.add({ threadId: "u", messages: [user("u1")] });
      await until(
        "followers see the first history",
        () => followers.every((f) => f.seen.get("t")?.length === 3),
        10_000,
      );
      const oldTokens = followers.map((f) => f.token);

      const lostAt = Date.now();
      if (loss === "restart empty") {
        await redis.restart();
      } else {
        const c = createClient({ url: redis.url });
        await c.connect();
        await c.flushAll();
        await c.close();
      }
      // Open streams end with OUT_OF_RANGE (never stay open, never resume into the new history).
      await until(
        "every open stream ended",
        () => followers.every((f) => f.ended !== undefined),
        15_000,
      );
      const endedIn = Date.now() - lostAt;
      for (const f of followers) expect(f.ended, f.driver.name).toBe("OUT_OF_RANGE");
      for (const f of followers) expect(f.seen.get("t"), f.driver.name).toEqual([1, 2, 3]);

      // Tokens of the old history: OUT_OF_RANGE on both replicas, every
      // transport (retried while UNAVAILABLE, as a client does: a replica
      // that was idle may still be reconnecting to the restarted Redis).
      const resume = async (d: Driver, token: string): Promise<string> => {
        for (const until = Date.now() + 10_000; ; ) {
          const w = d.watch({ resumeToken: token });
          const outcome = await w.next(10_000).then(
            () => "an event",
            (e: unknown) => code(e),
          );
          w.cancel();
          if (outcome !== "UNAVAILABLE" || Date.now() > until) return outcome;
          await sleep(100);
        }
      };
      for (const d of [...onA, ...onB]) {
        for (const token of oldTokens) expect(await resume(d, token), d.name).toBe("OUT_OF_RANGE");
      }
      // The new history, from its first event, on a replica that did not write it.
      const fresh = onB.map((d) => new Follower(d));
      await Promise.all(fresh.map((f) => f.start()));
      for (let i = 1; i <= 5; i++) {
        // With a request_id, so an Add retried while A reconnects is stored once.
        const add = { threadId: "t", messages: [user(`n${i}`)], requestId: `n${i}` };
        for (const until = Date.now() + 10_000; ; await sleep(100)) {
          const failed = await writer.add(add).then(
            () => undefined,
            (e: unknown) => code(e),
          );
          if (failed === undefined) break;
          if (failed !== "UNAVAILABLE" || Date.now() > until)
            throw new Error(`Add n${i}: ${failed}`);
        }
      }
      await until(
        "new followers see the new history",
        () => fresh.every((f) => f.seen.get("t")?.length === 5),
        10_000,
      );
      for (const f of fresh) expect(f.seen.get("t"), f.driver.name).toEqual([1, 2, 3, 4, 5]);
      // Reads on the other replica see the new history, not a cached old one.
      const got = await (onB[0] as Driver).get({ threadId: "t", limit: 0 });
      expect(got.messages.map((m) => m.content)).toEqual(["n1", "n2", "n3", "n4", "n5"]);
      await Promise.all(fresh.map((f) => f.stop()));
      console.info(
        `redis-watch-outages: ${loss}, ${shards} shard(s): open streams ended OUT_OF_RANGE within ${endedIn} ms`,
      );
    }, 60_000);
  }
});
