import {
  credentials,
  Client as GrpcJsClient,
  Metadata,
  Server,
  ServerCredentials,
  type ServiceError,
} from "@grpc/grpc-js";
import { service as healthService } from "grpc-health-check";
import { afterEach, describe, expect, it } from "vitest";
import { MemoryService } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { silentLogger } from "../../src/logger.js";
import { StoreHealthMonitor } from "../../src/service/store-health.js";
import { createRedisStore } from "../../src/store/redis/index.js";
import { CallRegistry } from "../../src/transport/call-registry.js";
import { createGrpcHealth } from "../../src/transport/grpc-health.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";
import { type Replica, startReplica } from "../support/replica-process.js";
import { type Harness, startHarness } from "../support/service-harness.js";
import { grpcHealthCheck } from "../transport/clients.js";
import { capturingLogger, startTestServers, type TestServers } from "../transport/harness.js";

/**
 * Health that tells the truth, against a real redis-server killed,
 * restarted and frozen: gRPC health (Check and Watch) and GET /readyz follow
 * the store, GET /healthz only the process, and shutdown wins over all.
 */

const MEMORY_SERVICE = MemoryService.typeName;
const CHECK_INTERVAL_MS = 200;
// Expected: one check interval to see a dead Redis (its socket closes at
// once); node-redis's reconnect backoff (at most about 2.1 s) plus an
// interval to see it back. The bounds leave more than 5x room.
const DOWN_BOUND_MS = 5_000;
const UP_BOUND_MS = 15_000;
const SHUTDOWN_GRACE_MS = 10_000;

/** grpc.health.v1.Health/Watch, recording each status as it arrives. */
class HealthWatch {
  readonly statuses: string[] = [];
  /** How the stream ended; undefined while it is open. */
  end: ServiceError | undefined;
  readonly #client: GrpcJsClient;
  readonly #listeners = new Set<() => void>();
  /** The stream itself, to pause reading (then the server's HTTP/2 window fills). */
  readonly call: ReturnType<GrpcJsClient["makeServerStreamRequest"]>;

  constructor(address: string, service: string) {
    this.#client = new GrpcJsClient(address, credentials.createInsecure());
    const watch = healthService.Watch;
    if (watch === undefined) throw new Error("grpc-health-check has no Watch method");
    const call = this.#client.makeServerStreamRequest(
      watch.path,
      watch.requestSerialize,
      watch.responseDeserialize,
      { service },
      new Metadata(),
      {},
    );
    this.call = call;
    call.on("data", (value: { status?: unknown }) => {
      this.statuses.push(String(value.status));
      this.#notify();
    });
    call.on("error", (err: ServiceError) => {
      this.end = err;
      this.#notify();
    });
  }

  /** Resolves with the ms it took until the newest status is `status`; rejects after `boundMs`. */
  until(status: string, boundMs: number): Promise<number> {
    return this.#waitFor(() => this.statuses.at(-1) === status, boundMs, `status ${status}`);
  }

  /** Resolves once the stream has ended; rejects after `boundMs`. */
  ended(boundMs: number): Promise<ServiceError> {
    return this.#waitFor(() => this.end !== undefined, boundMs, "the end of the stream").then(
      () => this.end as ServiceError,
    );
  }

  close(): void {
    this.#client.close();
  }

  #notify(): void {
    for (const listener of [...this.#listeners]) listener();
  }

  #waitFor(cond: () => boolean, boundMs: number, what: string): Promise<number> {
    const begun = performance.now();
    if (cond()) return Promise.resolve(0);
    return new Promise<number>((resolve, reject) => {
      const listener = (): void => {
        if (!cond()) return;
        done();
        resolve(performance.now() - begun);
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`health Watch saw no ${what} within ${boundMs} ms: ${this.statuses}`));
      }, boundMs);
      const done = (): void => {
        clearTimeout(timer);
        this.#listeners.delete(listener);
      };
      this.#listeners.add(listener);
    });
  }
}

async function probe(port: number, path: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, {
    signal: AbortSignal.timeout(5_000),
  });
  return { status: res.status, body: await res.text() };
}

/** A Connect JSON Add: its HTTP status (200, or 503 for UNAVAILABLE). */
async function addOverConnect(port: number, threadId: string): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${port}/windlass.memory.v1.MemoryService/Add`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ threadId, messages: [{ role: "ROLE_USER", content: "hello" }] }),
    signal: AbortSignal.timeout(10_000),
  });
  await res.arrayBuffer();
  return res.status;
}

async function expectGrpcHealth(address: string, status: string): Promise<void> {
  expect(await grpcHealthCheck(address, "")).toBe(status);
  expect(await grpcHealthCheck(address, MEMORY_SERVICE)).toBe(status);
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("grpc.health.v1.Health/Watch", () => {
  it("ends every Watch with UNAVAILABLE at shutdown, after NOT_SERVING, instead of holding the grace period", async () => {
    const harness = await startHarness();
    cleanups.push(() => harness.close());
    const servers = await startTestServers(harness.service);
    cleanups.push(() => servers.shutdown(0));
    const watches = ["", MEMORY_SERVICE, "other.Service"].map(
      (service) => new HealthWatch(servers.grpcAddress, service),
    );
    for (const watch of watches) cleanups.push(() => watch.close());
    const [whole, memory, unknown] = watches as [HealthWatch, HealthWatch, HealthWatch];
    await whole.until("SERVING", DOWN_BOUND_MS);
    await memory.until("SERVING", DOWN_BOUND_MS);
    // The spec: an unknown service is SERVICE_UNKNOWN, and its stream stays open.
    await unknown.until("SERVICE_UNKNOWN", DOWN_BOUND_MS);

    const begun = performance.now();
    await servers.shutdown(SHUTDOWN_GRACE_MS);
    expect(performance.now() - begun).toBeLessThan(SHUTDOWN_GRACE_MS / 2);
    for (const watch of watches) {
      expect((await watch.ended(DOWN_BOUND_MS)).code).toBe(14); // UNAVAILABLE
    }
    expect(whole.statuses).toEqual(["SERVING", "NOT_SERVING"]);
    expect(memory.statuses).toEqual(["SERVING", "NOT_SERVING"]);
    expect(unknown.statuses).toEqual(["SERVICE_UNKNOWN"]);
  });

  it.each([true, false])(
    "holds at most one undelivered status for a client that falls behind, and sends the newest (serving: %s) before the end",
    async (last) => {
      const server = new Server();
      const calls = new CallRegistry();
      const health = createGrpcHealth([""], calls, silentLogger);
      health.addToServer(server);
      const port = await new Promise<number>((resolve, reject) =>
        server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, bound) =>
          err === null ? resolve(bound) : reject(err),
        ),
      );
      cleanups.push(() => server.forceShutdown());
      const watch = new HealthWatch(`127.0.0.1:${port}`, "");
      cleanups.push(() => watch.close());
      await watch.until("SERVING", DOWN_BOUND_MS);
      watch.call.pause();

      // Changes in bursts far faster than they can be sent: without a bound
      // every one of them would wait in the server's memory. The last burst
      // ends the stream before anything drains, so the newest is still
      // undelivered then (and the two cases each end on another status).
      const FLIPS = 100_000;
      for (let i = 1; i <= FLIPS; i++) {
        health.setServing(i % 2 === 0);
        if (i % 1000 === 0 && i < FLIPS) await new Promise((resolve) => setImmediate(resolve));
      }
      health.setServing(last);
      calls.endStreams();
      watch.call.resume();
      expect((await watch.ended(DOWN_BOUND_MS)).code).toBe(14); // UNAVAILABLE
      expect(watch.statuses.length).toBeLessThan(FLIPS / 4);
      expect(watch.statuses.at(-1)).toBe(last ? "SERVING" : "NOT_SERVING");
    },
  );
});

describe("GET /healthz and /readyz", () => {
  it("answer without a token and past the rate limit, GET and HEAD only", async () => {
    const harness = await startHarness();
    cleanups.push(() => harness.close());
    const servers = await startTestServers(harness.service, {
      auth: new Map([["team-token", "team"]]),
      rateLimit: { ratePerSecond: 1, burst: 1 },
    });
    cleanups.push(() => servers.shutdown(0));
    // Auth is on: an RPC without a token is refused.
    expect(await addOverConnect(servers.httpPort, "no-token")).toBe(401);
    for (let i = 0; i < 20; i++) {
      expect(await probe(servers.httpPort, "/healthz")).toEqual({ status: 200, body: "ok\n" });
      expect(await probe(servers.httpPort, "/readyz?verbose")).toEqual({
        status: 200,
        body: "ok\n",
      });
    }
    const head = await fetch(`${servers.httpUrl}/readyz`, { method: "HEAD" });
    expect([head.status, await head.text()]).toEqual([200, ""]);
    const post = await fetch(`${servers.httpUrl}/healthz`, { method: "POST", body: "x" });
    expect([post.status, post.headers.get("allow")]).toEqual([405, "GET, HEAD"]);
    await post.arrayBuffer();
  });

  it("give a reason on one line with no URL in it, whatever the store says", async () => {
    const harness = await startHarness();
    cleanups.push(() => harness.close());
    const servers = await startTestServers(harness.service, {
      // A reason as a careless store might give it: a URL with a password, two lines.
      storeHealth: {
        state: { serving: false, reason: "redis://:hunter2@10.0.0.5:6379/0 refused\nretrying" },
        subscribe: () => () => {},
      },
    });
    cleanups.push(() => servers.shutdown(0));
    expect(await probe(servers.httpPort, "/readyz")).toEqual({
      status: 503,
      body: "store not serving: <url> refused retrying\n",
    });
    expect(await grpcHealthCheck(servers.grpcAddress, "")).toBe("NOT_SERVING");
    expect(await probe(servers.httpPort, "/healthz")).toEqual({ status: 200, body: "ok\n" });
  });
});

describe("health over a real redis-server", () => {
  it("turns NOT_SERVING when Redis dies and SERVING when it is back; /healthz stays 200; shutdown ends it", async () => {
    const redis = await startRedisServer();
    cleanups.push(() => redis.stop());
    const replica: Replica = await startReplica([
      "--store",
      redis.url,
      "--health-check-interval-ms",
      String(CHECK_INTERVAL_MS),
      "--shutdown-grace-ms",
      String(SHUTDOWN_GRACE_MS),
    ]);
    cleanups.push(() => replica.kill());
    const grpc = `127.0.0.1:${replica.grpcPort}`;
    const http = replica.httpPort;
    const watch = new HealthWatch(grpc, MEMORY_SERVICE);
    cleanups.push(() => watch.close());

    await watch.until("SERVING", DOWN_BOUND_MS);
    await expectGrpcHealth(grpc, "SERVING");
    expect(await probe(http, "/healthz")).toEqual({ status: 200, body: "ok\n" });
    expect(await probe(http, "/readyz")).toEqual({ status: 200, body: "ok\n" });
    expect(await addOverConnect(http, "before")).toBe(200);

    await redis.kill();
    const downMs = await watch.until("NOT_SERVING", DOWN_BOUND_MS);
    await expectGrpcHealth(grpc, "NOT_SERVING");
    const notReady = await probe(http, "/readyz");
    expect(notReady.status).toBe(503);
    expect(notReady.body).toMatch(/^store not serving: .+\n$/);
    expect(notReady.body).not.toContain("redis://");
    expect(await probe(http, "/healthz")).toEqual({ status: 200, body: "ok\n" });
    // What health now says: writes fail.
    expect(await addOverConnect(http, "during")).toBe(503);

    await redis.restart();
    const upMs = await watch.until("SERVING", UP_BOUND_MS);
    await expectGrpcHealth(grpc, "SERVING");
    expect(await probe(http, "/readyz")).toEqual({ status: 200, body: "ok\n" });
    expect(await probe(http, "/healthz")).toEqual({ status: 200, body: "ok\n" });
    expect(await addOverConnect(http, "after")).toBe(200);
    expect(watch.statuses).toEqual(["SERVING", "NOT_SERVING", "SERVING"]);
    console.info(
      `health: NOT_SERVING ${Math.round(downMs)} ms after the kill, SERVING ${Math.round(upMs)} ms after the restart (interval ${CHECK_INTERVAL_MS} ms)`,
    );

    // Shutdown: NOT_SERVING, then the Watch is ended, well within the grace
    // period it used to hold up.
    const stopBegun = performance.now();
    const exit = replica.stop();
    await watch.until("NOT_SERVING", DOWN_BOUND_MS);
    expect((await watch.ended(DOWN_BOUND_MS)).code).toBe(14); // UNAVAILABLE
    expect(await exit).toBe(0);
    expect(performance.now() - stopBegun).toBeLessThan(SHUTDOWN_GRACE_MS / 2);

    const log = replica.stderr();
    expect(log.match(/"msg":"store not serving/g)).toHaveLength(1);
    expect(log.match(/"msg":"store serving again"/g)).toHaveLength(1);
    expect(log).not.toContain("redis://");
  });

  it("stays NOT_SERVING once shutdown has started, though a frozen Redis comes back", async () => {
    const redis: RedisServer = await startRedisServer();
    cleanups.push(() => redis.stop());
    const harness: Harness = await startHarness({ store: await createRedisStore(redis.url) });
    cleanups.push(() => harness.close());
    const { logger } = capturingLogger();
    // Short checks: a frozen Redis times out; once thawed it answers the next PING.
    const monitor = new StoreHealthMonitor(harness.store, {
      intervalMs: 50,
      timeoutMs: 200,
      logger,
    });
    await monitor.start();
    cleanups.push(() => monitor.stop());
    const servers: TestServers = await startTestServers(harness.service, {
      storeHealth: monitor,
      // Shutdown keeps the ports open this long after health turns NOT_SERVING.
      drainDelayMs: 3_000,
    });
    cleanups.push(() => servers.shutdown(0));
    const serving = (want: boolean) =>
      new Promise<void>((resolve, reject) => {
        if (monitor.state.serving === want) return resolve();
        const timer = setTimeout(() => reject(new Error(`store never serving=${want}`)), 5_000);
        const unsubscribe = monitor.subscribe((state) => {
          if (state.serving !== want) return;
          clearTimeout(timer);
          unsubscribe();
          resolve();
        });
      });
    await expectGrpcHealth(servers.grpcAddress, "SERVING");

    const pid = redis.pid;
    if (pid === undefined) throw new Error("redis-server is not running");
    process.kill(pid, "SIGSTOP");
    cleanups.push(() => {
      if (redis.pid !== undefined) process.kill(redis.pid, "SIGCONT");
    });
    await serving(false);
    await expectGrpcHealth(servers.grpcAddress, "NOT_SERVING");
    expect((await probe(servers.httpPort, "/readyz")).body).toMatch(
      /^store not serving: .*did not answer.*\n$/,
    );
    expect((await probe(servers.httpPort, "/healthz")).status).toBe(200);

    const shutdown = servers.shutdown(0);
    process.kill(pid, "SIGCONT");
    await serving(true);
    await expectGrpcHealth(servers.grpcAddress, "NOT_SERVING");
    expect(await probe(servers.httpPort, "/readyz")).toEqual({
      status: 503,
      body: "shutting down\n",
    });
    expect(await probe(servers.httpPort, "/healthz")).toEqual({
      status: 503,
      body: "shutting down\n",
    });
    await shutdown;
  });
});
