import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { MemoryError } from "../../src/core/errors.js";
import { createRedisStore } from "../../src/store/redis/index.js";
import { runContractSuites } from "../store/contract/suites.js";
import { serverBackend } from "../store/contract/support.js";
import { startSentinelDeployment } from "../support/redis-sentinel.js";
import { freePort } from "../support/redis-server.js";

/**
 * The whole Store contract (every suite of test/store/contract/) through
 * redis+sentinel:// with a password and minReplicas 1: every call, Watch's
 * readers included, works through the sentinel client, and every
 * acknowledged write is confirmed by the replica.
 */
const sentinel = serverBackend(
  "redis+sentinel, minReplicas 1",
  () => startSentinelDeployment({ password: "contract-secret" }),
  (redis, limits) =>
    createRedisStore(redis.url, limits, {
      keyPrefix: `contract-${randomUUID()}`,
      minReplicas: 1,
      replicaWaitMs: 5000,
    }),
);

describe("Store contract: redis+sentinel, minReplicas 1", () => runContractSuites(sentinel));

describe("redis+sentinel:// start-up", () => {
  it("fails with unavailable naming the sentinels and the master, never the password, when no sentinel answers", async () => {
    const port = await freePort();
    const err = await createRedisStore(
      `redis+sentinel://:start-secret@127.0.0.1:${port}/windlass`,
      {},
      {
        connectWaitMs: 500,
      },
    ).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(MemoryError);
    expect((err as MemoryError).code).toBe("unavailable");
    expect((err as MemoryError).message).toContain(
      `the redis store at sentinel master windlass via 127.0.0.1:${port} is unreachable`,
    );
    expect((err as MemoryError).message).not.toContain("start-secret");
  });
});
