import { afterAll, describe, expect, it } from "vitest";
import { CallFailed, type Driver, grpcDriver } from "../integration/drivers.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";
import { type Replica, startReplica } from "../support/replica-process.js";
import { RetryingWriter } from "../support/retrying-writer.js";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.js";
import { grpcHealthCheck } from "../transport/clients.js";

/**
 * A Redis that hangs instead of failing: SIGSTOPped (the process alive, its
 * socket open, nothing answered), or behind a network path that black-holes
 * without resetting. Through the real server and a gRPC client: every call
 * fails within its deadline, health says NOT_SERVING while it lasts, the
 * server serves again once Redis answers, and every acknowledged Add is
 * there afterwards (writers retry with the same request_id).
 */

const DEADLINE_MS = 1000;
let redis: RedisServer;
let proxy: TcpProxy;
let replica: Replica;
let client: Driver;

afterAll(async () => {
  client?.close();
  await replica?.kill();
  await proxy?.close();
  await redis?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const code = (err: unknown) => (err instanceof CallFailed ? err.code : `CLIENT ${String(err)}`);

async function until(what: string, cond: () => boolean | Promise<boolean>, ms: number) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(20);
  }
}

describe("Redis that hangs", () => {
  it("fails calls within their deadline, reports NOT_SERVING, recovers, and loses nothing acknowledged", async () => {
    redis = await startRedisServer();
    proxy = await startTcpProxy(redis.port);
    replica = await startReplica([
      "--store",
      `redis://127.0.0.1:${proxy.port}/0`,
      "--health-check-interval-ms",
      "200",
    ]);
    client = grpcDriver(replica.grpcPort);
    const health = () =>
      grpcHealthCheck(`127.0.0.1:${replica.grpcPort}`, "windlass.memory.v1.MemoryService");
    expect(await health()).toBe("SERVING");

    const writers = ["a", "b", "c"].map((t) => new RetryingWriter(client, t, DEADLINE_MS));
    for (const w of writers) w.start();
    const total = () => writers.reduce((n, w) => n + w.acknowledged, 0);
    const hangs: { name: string; start(): void; end(): void }[] = [
      {
        name: "SIGSTOP",
        start: () => process.kill(redis.pid as number, "SIGSTOP"),
        end: () => process.kill(redis.pid as number, "SIGCONT"),
      },
      { name: "black-holed network", start: () => proxy.blackhole(), end: () => proxy.restore() },
    ];
    const report: string[] = [];
    for (const hang of hangs) {
      for (let round = 0; round < 2; round++) {
        const before = total();
        await until(`writes before ${hang.name}`, () => total() >= before + 20, 20_000);
        hang.start();
        const hungAt = Date.now();
        await until(
          `NOT_SERVING under ${hang.name}`,
          async () => (await health()) === "NOT_SERVING",
          10_000,
        );
        const notServingIn = Date.now() - hungAt;
        // A read with a deadline fails within it while Redis hangs.
        const began = Date.now();
        const got = await client.get({ threadId: "a" }, { timeoutMs: DEADLINE_MS }).then(
          () => "answered",
          (e: unknown) => code(e),
        );
        const readFailedIn = Date.now() - began;
        expect(["DEADLINE_EXCEEDED", "UNAVAILABLE"]).toContain(got);
        expect(readFailedIn).toBeLessThan(DEADLINE_MS * 5);
        await sleep(1500);
        const stuck = total();
        hang.end();
        const endedAt = Date.now();
        await until(`an Add after ${hang.name}`, () => total() > stuck, 20_000);
        const recoveredIn = Date.now() - endedAt;
        await until(
          `SERVING after ${hang.name}`,
          async () => (await health()) === "SERVING",
          10_000,
        );
        report.push(
          `${hang.name}: NOT_SERVING after ${notServingIn} ms, Get failed in ${readFailedIn} ms, first Add ${recoveredIn} ms after`,
        );
      }
    }
    await Promise.all(writers.map((w) => w.stop()));

    // Each call failed within its deadline (plus scheduling on a loaded machine).
    for (const w of writers) expect(w.slowestFailureMs).toBeLessThan(DEADLINE_MS * 5);
    // Nothing acknowledged was lost, and retries stored nothing twice.
    for (const w of writers) {
      const got = await client.get({ threadId: w.threadId, limit: 0 });
      expect(Number(got.thread?.lastSeq)).toBe(w.acknowledged);
      expect(got.messages.map((m) => m.content)).toEqual(
        Array.from({ length: w.acknowledged }, (_, k) => `m${k + 1}`),
      );
    }
    const failed = writers.reduce((n, w) => n + w.failures, 0);
    console.info(
      `redis-hang: ${total()} acknowledged Adds, all present; ${failed} failed attempts retried; ${report.join("; ")}`,
    );
    expect(failed).toBeGreaterThan(0);
  }, 180_000);
});
