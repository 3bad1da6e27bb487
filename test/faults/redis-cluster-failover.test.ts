import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { type Driver, grpcDriver } from "../integration/drivers.js";
import {
  type ClusterNode,
  type RedisCluster,
  startRedisCluster,
} from "../support/redis-cluster.js";
import { type Replica, startReplica } from "../support/replica-process.js";
import { RetryingWriter } from "../support/retrying-writer.js";
import { Follower } from "../support/watch-follower.js";

/**
 * The Redis Cluster store under faults, through two real `windlass-memory
 * serve` processes (A and B) sharing a real six-node cluster with
 * `--redis-min-replicas 1`: writers on both Add one message at a time,
 * retrying UNAVAILABLE and DEADLINE_EXCEEDED with the same request id, and
 * a Watch follower on B resumes from its last token on UNAVAILABLE, while
 * (a) the slot holding a writer's thread moves to another primary
 *     (SETSLOT IMPORTING/MIGRATING, MIGRATE in small batches, the slot
 *     left half-moved between them: ASK and TRYAGAIN), (b) a primary is
 *     failed over with CLUSTER FAILOVER, (c) a primary is SIGKILLed and its
 *     replica promoted, the old one back later as a replica.
 * Afterwards every acknowledged Add must be in its thread at its seq (0
 * lost), no call may have failed with anything but a retryable code, and
 * the follower must have seen every seq of every thread once, in order.
 * All of it twice, each time on a fresh cluster: with each namespace in one
 * slot, and with it split into 3 shards (--redis-namespace-shards 3), where
 * the writers' threads spread over the primaries, the fault hits one shard's,
 * and the follower's resume tokens hold a position per shard.
 */

const WRITERS_PER_SERVER = 3;
const BEFORE_FAULT = 60;
const AFTER_FAULT = 60;
const DEADLINE_MS = 3000;

let cluster: RedisCluster;
let a: Replica;
let b: Replica;
let onA: Driver;
let onB: Driver;

/**
 * Starts the cluster and the two service processes for one describe block:
 * each namespace in one slot (`shards` 1), or split over `shards` slots
 * (--redis-namespace-shards), so the writers' threads sit on several
 * primaries and the follower's Watch reads every shard's log.
 */
function startedWith(shards: number): void {
  beforeAll(async () => {
    cluster = await startRedisCluster();
    const flags = [
      "--store",
      cluster.url,
      "--redis-min-replicas",
      "1",
      "--progress-interval-ms",
      "200",
      "--redis-namespace-shards",
      String(shards),
    ];
    a = await startReplica(flags);
    b = await startReplica(flags);
    onA = grpcDriver(a.grpcPort);
    onB = grpcDriver(b.grpcPort);
  }, 60_000);

  afterAll(async () => {
    onA?.close();
    onB?.close();
    await a?.kill();
    await b?.kill();
    await cluster?.stop();
  }, 60_000);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits for `cond`; past `ms` fails with `state()` (what the writers saw) in the message. */
async function until(what: string, cond: () => boolean, state: () => string, ms = 30_000) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms; ${state()}`);
    await sleep(20);
  }
}

/** `promise`, or a failure naming `what` and `state()` after `ms`. */
async function within<T>(what: string, promise: Promise<T>, state: () => string, ms = 30_000) {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms; ${state()}`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The slot holding the most keys, and its primary: the writers' namespace
 * (the store keeps a namespace's keys under one hash tag, so every writer's
 * thread is there), or with namespace shards the busiest shard (some of the
 * writers' threads), whatever the store names its keys.
 */
async function busiestSlot(): Promise<{ slot: number; primary: ClusterNode }> {
  const counts = new Map<number, number>();
  for (const k of await cluster.keysMatching("*"))
    counts.set(k.slot, (counts.get(k.slot) ?? 0) + 1);
  const [slot] = [...counts.entries()].sort((x, y) => y[1] - x[1])[0] ?? [];
  if (slot === undefined) throw new Error("no key in the cluster");
  return { slot, primary: await cluster.primaryOfSlot(slot) };
}

/** Every message of a thread, in seq order (a buffer recall of them all). */
async function stored(threadId: string): Promise<string[]> {
  const got = await onA.get({
    threadId,
    limit: 0,
    recall: { kind: { case: "buffer", value: {} } },
  });
  return got.messages.map((m) => m.content);
}

/**
 * Runs the writers and the follower around `fault`, then audits: returns
 * nothing, asserts 0 lost and prints the counts.
 */
async function underLoad(shards: number, fault: () => Promise<void>, label: string) {
  const name = shards === 1 ? label : `${label}-sharded`;
  const follower = new Follower(onB);
  await follower.start();
  const writers = [onA, onB].flatMap((driver, s) =>
    Array.from(
      { length: WRITERS_PER_SERVER },
      (_, i) => new RetryingWriter(driver, `${name}-${s === 0 ? "a" : "b"}${i}`, DEADLINE_MS),
    ),
  );
  for (const w of writers) w.start();
  const total = () => writers.reduce((n, w) => n + w.acknowledged, 0);
  const state = () =>
    writers
      .map(
        (w) =>
          `${w.threadId}: ${w.acknowledged} acknowledged, ${w.failures} failed (${w.lastFailure})`,
      )
      .join("; ");
  let before = 0;
  let faultMs = 0;
  let atFaultEnd = 0;
  try {
    await until(`${BEFORE_FAULT} Adds before the fault`, () => total() >= BEFORE_FAULT, state);
    before = total();
    const faultStarted = Date.now();
    await within("the fault", fault(), state, 60_000);
    faultMs = Date.now() - faultStarted;
    atFaultEnd = total();
    await until(
      `${AFTER_FAULT} Adds after the fault`,
      () => total() >= atFaultEnd + AFTER_FAULT,
      state,
    );
    // stop() rejects if a writer met anything but UNAVAILABLE or DEADLINE_EXCEEDED.
    await within("the writers' last Adds", Promise.all(writers.map((w) => w.stop())), state);
  } catch (err) {
    // A failed case leaves nothing running into the next one.
    await Promise.all(writers.map((w) => w.abandon()));
    await follower.stop();
    throw err;
  }

  const present = await presentAdds(writers);
  const acknowledged = total();
  const retried = writers.reduce((n, w) => n + w.failures, 0);
  console.log(
    `redis-cluster ${name} (${shards} namespace shard(s)): ${present} of ${acknowledged} acknowledged Adds present ` +
      `(${acknowledged - present} lost; ${before} before the fault, ${atFaultEnd - before} during its ${faultMs} ms); ` +
      `${retried} calls retried (slowest failure ${Math.max(...writers.map((w) => w.slowestFailureMs))} ms)`,
  );
  expect(present).toBe(acknowledged);
  await checkFollower(name, follower, writers);
}

/** Counts the acknowledged Adds at their seq; none may be stored twice. */
async function presentAdds(writers: readonly RetryingWriter[]): Promise<number> {
  let present = 0;
  for (const w of writers) {
    const contents = await stored(w.threadId);
    for (let i = 0; i < w.acknowledged; i++) if (contents[i] === `m${i + 1}`) present++;
    // A retried Add is replayed, never stored twice (stop() lets the Add in flight finish).
    expect(contents.length, w.threadId).toBe(w.acknowledged);
  }
  return present;
}

/** The follower saw every acknowledged seq of every writer once, in order, and never ended by itself. */
async function checkFollower(name: string, follower: Follower, writers: readonly RetryingWriter[]) {
  // It catches up, or has ended (with a code it must not end with: checked below).
  await until(
    "the follower at every writer's last seq",
    () =>
      follower.ended !== undefined ||
      writers.every((w) => (follower.seen.get(w.threadId)?.at(-1) ?? 0) >= w.acknowledged),
    () =>
      `follower ${follower.resumes} resumes; ` +
      writers
        .map((w) => `${w.threadId} seen to ${follower.seen.get(w.threadId)?.at(-1) ?? 0}`)
        .join(", "),
  );
  await follower.stop();
  console.log(
    `redis-cluster ${name}: follower on B resumed ${follower.resumes} times, ${follower.stalls} stalls, ` +
      `ended ${follower.ended ?? "only when stopped"}`,
  );
  expect(follower.ended, "the Watch ended with a code that is not retryable").toBeUndefined();
  expect(follower.stalls).toBe(0);
  for (const w of writers) {
    const seen = follower.seen.get(w.threadId) ?? [];
    // Each seq once, in order, from 1: no gap, no repeat across resumes.
    expect(seen, w.threadId).toEqual(Array.from({ length: seen.length }, (_, i) => i + 1));
  }
}

describe.each([1, 3])(
  "the Redis Cluster store under faults, two service processes, --redis-min-replicas 1, %i namespace shard(s)",
  (shards) => {
    startedWith(shards);

    it("loses nothing when the slot of a thread moves to another primary under writers", async () => {
      await underLoad(
        shards,
        async () => {
          const { slot, primary } = await busiestSlot();
          const to = (await cluster.primaries()).find((p) => p !== primary);
          if (to === undefined) throw new Error("no second primary");
          let pauses = 0;
          const moved = await cluster.migrateSlot(slot, primary, to, {
            batch: 50,
            // The slot stays half-moved for a while (1.5 s): writers meet ASK and TRYAGAIN.
            afterBatch: async () => {
              if (pauses++ < 6) await sleep(250);
            },
          });
          expect(moved).toBeGreaterThan(0);
          expect(await cluster.primaryOfSlot(slot)).toBe(to);
        },
        "migrate",
      );
    }, 120_000);

    it("loses nothing when a primary is failed over with CLUSTER FAILOVER", async () => {
      await underLoad(
        shards,
        async () => {
          const { slot, primary } = await busiestSlot();
          const [replica] = await cluster.replicasOf(primary);
          if (replica === undefined) throw new Error("the primary has no replica");
          await cluster.failover(replica);
          expect(await cluster.primaryOfSlot(slot)).toBe(replica);
        },
        "failover",
      );
    }, 120_000);

    it("loses nothing when a primary is SIGKILLed and its replica promoted", async () => {
      await underLoad(
        shards,
        async () => {
          const { slot, primary } = await busiestSlot();
          const [replica] = await cluster.replicasOf(primary);
          if (replica === undefined) throw new Error("the primary has no replica");
          await cluster.kill(primary);
          expect(await cluster.primaryOfSlot(slot)).toBe(replica);
          // With --redis-min-replicas 1 the promoted primary takes writes once it has a replica again.
          await cluster.restart(primary);
          expect((await cluster.replicasOf(replica)).map((n) => n.port)).toEqual([primary.port]);
        },
        "kill",
      );
    }, 120_000);

    it("shows both service processes one thread: what A wrote, B reads", async () => {
      await onA.add({ threadId: "shared", messages: [{ role: Role.USER, content: "from A" }] });
      await onB.add({ threadId: "shared", messages: [{ role: Role.USER, content: "from B" }] });
      const got = await onB.get({
        threadId: "shared",
        limit: 0,
        recall: { kind: { case: "buffer", value: {} } },
      });
      expect(got.messages.map((m) => m.content)).toEqual(["from A", "from B"]);
    });
  },
);
