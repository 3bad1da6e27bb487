import { randomUUID } from "node:crypto";
import { afterAll, beforeAll } from "vitest";
import { createRedisStore } from "../../src/store/redis-store.js";
import { runStoreContract } from "../store/store-contract.js";
import { type SentinelDeployment, startSentinelDeployment } from "../support/redis-sentinel.js";

/**
 * The whole Store contract through redis+sentinel:// with a password and
 * minReplicas 1: every call, Watch's readers included, works through the
 * sentinel client, and every acknowledged write is confirmed by the replica.
 */
let redis: SentinelDeployment;
beforeAll(async () => {
  redis = await startSentinelDeployment({ password: "contract-secret" });
}, 60_000);
afterAll(async () => {
  await redis?.stop();
});

runStoreContract("redis+sentinel, minReplicas 1", (limits) =>
  createRedisStore(redis.url, limits, {
    keyPrefix: `contract-${randomUUID()}`,
    minReplicas: 1,
    replicaWaitMs: 5000,
  }),
);
