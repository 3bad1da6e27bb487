import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { createRedisStore } from "../../src/store/redis/index.js";
import type { Store } from "../../src/store/store.js";
import { audit, startWriters } from "../support/acknowledged-writers.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";

/**
 * kill -9 of redis-server under concurrent Adds, then a restart on the same
 * directory: which acknowledged Adds does each persistence setting keep?
 * The figures are printed for the README's durability table.
 */
const WRITERS = 8;
/** Adds acknowledged before the kill: enough that a loss would show. */
const BEFORE_KILL = 1000;

let redis: RedisServer | undefined;
const stores: Store[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
  await redis?.stop();
  redis = undefined;
});

async function killUnderLoad(args: string[]) {
  const server = await startRedisServer({ args });
  redis = server;
  const prefix = `aof-${randomUUID()}`;
  const open = async () => {
    const store = await createRedisStore(
      server.url,
      {},
      { keyPrefix: prefix, commandTimeoutMs: 2000 },
    );
    stores.push(store);
    return store;
  };
  const store = await open();
  const run = startWriters(() => store, { writers: WRITERS, retry: false, runId: "aof" });
  await run.waitForAcknowledged(BEFORE_KILL);
  await server.kill();
  // Without retries each writer stops at its first UNAVAILABLE.
  await run.done;
  expect(run.failed()).toBe(WRITERS);
  await server.restart();
  return audit(await open(), run.acknowledged);
}

describe("Redis persistence under kill -9 of redis-server", () => {
  it("loses no acknowledged Add with appendonly yes, appendfsync always", async () => {
    const result = await killUnderLoad(["--appendonly", "yes", "--appendfsync", "always"]);
    console.log(
      `appendfsync always: ${result.present} of ${result.acknowledged} acknowledged Adds present after kill -9 and restart`,
    );
    expect(result.acknowledged).toBeGreaterThanOrEqual(BEFORE_KILL);
    expect(result.lost).toEqual([]);
    expect(result.duplicates).toBe(0);
  });

  it("measures appendfsync everysec (a process crash; a power loss could lose about a second)", async () => {
    const result = await killUnderLoad(["--appendonly", "yes", "--appendfsync", "everysec"]);
    console.log(
      `appendfsync everysec: ${result.present} of ${result.acknowledged} acknowledged Adds present after kill -9 and restart`,
    );
    expect(result.acknowledged).toBeGreaterThanOrEqual(BEFORE_KILL);
    expect(result.duplicates).toBe(0);
  });

  it("loses them all without persistence (the audit sees a loss)", async () => {
    const result = await killUnderLoad([]);
    console.log(
      `no persistence: ${result.present} of ${result.acknowledged} acknowledged Adds present after kill -9 and restart`,
    );
    expect(result.acknowledged).toBeGreaterThanOrEqual(BEFORE_KILL);
    expect(result.present).toBe(0);
  });
});
