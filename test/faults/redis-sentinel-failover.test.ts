import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { createRedisStore, type RedisStoreOptions } from "../../src/store/redis/index.js";
import type { Store } from "../../src/store/store.js";
import { type Audit, audit, startWriters } from "../support/acknowledged-writers.js";
import { type SentinelDeployment, startSentinelDeployment } from "../support/redis-sentinel.js";
import { type Replica, startReplica } from "../support/replica-process.js";

/**
 * A primary, one replica and three sentinels; concurrent writers Add with
 * request ids through a store opened on redis+sentinel://, retrying
 * UNAVAILABLE with the same request id; the primary is killed with SIGKILL,
 * the sentinels promote the replica, the old primary comes back as a
 * replica of the new one, the writers go on. Then every acknowledged Add
 * is looked for at its seq, and no message may be stored twice.
 */
const WRITERS = 6;
const BEFORE_KILL = 300;
const AFTER_FAILOVER = 200;

let deployment: SentinelDeployment | undefined;
const stores: Store[] = [];
let server: Replica | undefined;
afterEach(async () => {
  await server?.kill();
  server = undefined;
  for (const s of stores.splice(0)) await s.close();
  await deployment?.stop();
  deployment = undefined;
}, 60_000);

/** Kills the primary, waits for the sentinels to promote the replica, brings the old one back as its replica. */
async function failOver(redis: SentinelDeployment): Promise<void> {
  await redis.primary.kill();
  await redis.waitForPrimary(redis.replica.port);
  // Back without its data, as a replica of the promoted one (what the
  // sentinels would make it after a while, and an operator's config does).
  await redis.primary.restart(["--replicaof", "127.0.0.1", String(redis.replica.port)]);
  await redis.waitForReplicaLink(redis.primary);
}

async function failOverUnderLoad(options: RedisStoreOptions): Promise<Audit> {
  const redis = await startSentinelDeployment();
  deployment = redis;
  const keyPrefix = `sentinel-${randomUUID()}`;
  const store = await createRedisStore(
    redis.url,
    {},
    { ...options, keyPrefix, commandTimeoutMs: 2000 },
  );
  stores.push(store);
  const run = startWriters(() => store, { writers: WRITERS, retry: true, runId: "failover" });
  await run.waitForAcknowledged(BEFORE_KILL);
  await failOver(redis);
  await run.waitForAcknowledged(run.acknowledged.length + AFTER_FAILOVER);
  await run.stop();
  expect(run.failed()).toBeLessThanOrEqual(WRITERS);
  const reader = await createRedisStore(redis.url, {}, { keyPrefix });
  stores.push(reader);
  const result = await audit(reader, run.acknowledged);
  const retried = run.acknowledged.filter((a) => a.attempts > 1);
  console.log(
    `sentinel failover, minReplicas ${options.minReplicas ?? 0}: ${result.present} of ${result.acknowledged} acknowledged Adds present (${result.lost.length} lost); ${retried.length} answered after retries, ${retried.filter((a) => a.replayed).length} of them replayed`,
  );
  expect(result.duplicates).toBe(0);
  return result;
}

describe("Redis Sentinel failover under concurrent Adds", () => {
  it("loses no acknowledged Add with minReplicas 1", async () => {
    const result = await failOverUnderLoad({ minReplicas: 1, replicaWaitMs: 1000 });
    expect(result.acknowledged).toBeGreaterThanOrEqual(BEFORE_KILL + AFTER_FAILOVER);
    expect(result.lost).toEqual([]);
  }, 120_000);

  it("measures what minReplicas 0 loses", async () => {
    const result = await failOverUnderLoad({});
    expect(result.acknowledged).toBeGreaterThanOrEqual(BEFORE_KILL + AFTER_FAILOVER);
  }, 120_000);

  it("serve --store redis+sentinel://:PASSWORD@… --redis-min-replicas 1 follows the failover and never logs the password", async () => {
    const password = "sentinel-url-secret";
    const redis = await startSentinelDeployment({ password });
    deployment = redis;
    const replica = await startReplica(["--store", redis.url, "--redis-min-replicas", "1"]);
    server = replica;
    const call = (method: string, body: unknown) =>
      fetch(`http://127.0.0.1:${replica.httpPort}/windlass.memory.v1.MemoryService/${method}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    const add = (requestId: string, content: string) =>
      call("Add", { threadId: "served", requestId, messages: [{ role: "ROLE_USER", content }] });
    expect((await add("a1", "before the failover")).status).toBe(200);
    await failOver(redis);
    // A client's retries with the same request id, bounded.
    const deadline = Date.now() + 30_000;
    let answer = await add("a2", "after the failover");
    while (answer.status !== 200 && Date.now() < deadline) {
      expect(answer.status).toBe(503);
      await new Promise((r) => setTimeout(r, 100));
      answer = await add("a2", "after the failover");
    }
    expect(answer.status, await answer.text()).toBe(200);
    const got = (await (await call("Get", { threadId: "served" })).json()) as {
      messages: { content: string }[];
    };
    expect(got.messages.map((m) => m.content)).toEqual([
      "before the failover",
      "after the failover",
    ]);
    expect(await replica.stop()).toBe(0);
    expect(replica.stderr()).not.toContain(password);
  }, 120_000);
});
