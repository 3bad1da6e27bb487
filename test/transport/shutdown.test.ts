import { once } from "node:events";
import { setTimeout as sleep } from "node:timers/promises";
import { create } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { type ServiceError, status } from "@grpc/grpc-js";
import { describe, expect, it, onTestFinished } from "vitest";
import {
  GetResponseSchema,
  type WatchResponse,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import type { CallContext, MemoryServiceCore } from "../../src/service/context.js";
import {
  type ConnectClientOptions,
  createConnectClient,
  createGrpcClient,
  grpcHealthCheck,
} from "./clients.js";
import { startTestServers, type TestServers } from "./harness.js";
import { aborted, progressEvent, scriptedCore } from "./scripted-core.js";

/** A promise and the function that resolves it. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open: () => void = () => {};
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { opened, open };
}

async function serve(script: Partial<MemoryServiceCore>, drainDelayMs = 0) {
  const core = scriptedCore(script);
  const servers = await startTestServers(core, { drainDelayMs });
  onTestFinished(() => servers.shutdown(0));
  return { core, servers };
}

function grpcClient(servers: TestServers) {
  const client = createGrpcClient(servers.grpcAddress);
  onTestFinished(() => client.close());
  return client;
}

function connectClient(servers: TestServers, options: ConnectClientOptions) {
  const handle = createConnectClient(servers.httpUrl, options);
  onTestFinished(() => handle.close());
  return handle.client;
}

/** The code and message a call or stream ended with, on either kind of client. */
function endOf(call: Promise<unknown>): Promise<{ code: string; message: string }> {
  return call.then(
    () => ({ code: "OK", message: "" }),
    (err: unknown) => {
      // Connect codes have the same numbers as gRPC status codes.
      if (err instanceof ConnectError) {
        return { code: status[err.code] ?? String(err.code), message: err.rawMessage };
      }
      const grpcError = err as ServiceError;
      return { code: status[grpcError.code], message: grpcError.details };
    },
  );
}

/** Reads a connect-node Watch until it ends; rejects with its error. */
async function drainConnectWatch(stream: AsyncIterable<WatchResponse>, seen: () => void) {
  for await (const _ of stream) seen();
}

const watchBehaviours: Record<string, (ctx: CallContext) => AsyncIterable<WatchResponse>> = {
  "returns when its signal aborts": async function* (ctx) {
    yield progressEvent("1");
    await aborted(ctx.signal);
  },
  "throws the signal's reason": async function* (ctx) {
    yield progressEvent("1");
    await aborted(ctx.signal);
    throw ctx.signal.reason;
  },
  "ignores its signal": async function* () {
    yield progressEvent("1");
    await new Promise(() => {});
  },
};

describe("shutdown", () => {
  it("reports NOT_SERVING as it starts, keeps serving during the drain delay, then stops", async () => {
    // The delay is the behaviour: long enough for the three calls below on a
    // loaded machine (they take well under a second), short enough for a test.
    const drainDelayMs = 3_000;
    const { servers } = await serve({}, drainDelayMs);
    const client = grpcClient(servers);
    expect(await grpcHealthCheck(servers.grpcAddress, "")).toBe("SERVING");

    const started = Date.now();
    const shutdown = servers.shutdown(2_000);
    expect(await grpcHealthCheck(servers.grpcAddress, "")).toBe("NOT_SERVING");
    expect(await grpcHealthCheck(servers.grpcAddress, "windlass.memory.v1.MemoryService")).toBe(
      "NOT_SERVING",
    );
    // Load balancers may still send calls until they notice.
    expect((await client.listThreads({})).threadIds).toEqual(["a", "b"]);
    await shutdown;
    // Timers may fire a millisecond early.
    expect(Date.now() - started).toBeGreaterThanOrEqual(drainDelayMs - 5);

    await expect(grpcHealthCheck(servers.grpcAddress, "")).rejects.toMatchObject({
      code: status.UNAVAILABLE,
    });
    await expect(fetch(`${servers.httpUrl}/`)).rejects.toThrow();
  });

  it.each(Object.keys(watchBehaviours))(
    "ends Watch streams with UNAVAILABLE and lets unary calls finish, when the core's watch %s",
    async (behaviour) => {
      const release = gate();
      const { core, servers } = await serve({
        watch: (_req, ctx) => watchBehaviours[behaviour]?.(ctx) ?? progressEventsForever(),
        get: async () => {
          await release.opened;
          return create(GetResponseSchema, { summary: "finished" });
        },
      });
      const grpc = grpcClient(servers);
      const clients = {
        grpcJs: grpc,
        connectH2: connectClient(servers, { protocol: "connect", httpVersion: "2" }),
        connectH1: connectClient(servers, { protocol: "connect", httpVersion: "1.1" }),
        grpcWebH1: connectClient(servers, { protocol: "grpc-web", httpVersion: "1.1" }),
      };

      // Open streams, each with its first event received.
      const grpcWatch = grpc.watch({});
      const watchEnds: Promise<{ code: string; message: string }>[] = [];
      watchEnds.push(
        endOf(
          new Promise((resolve, reject) => {
            grpcWatch.on("error", reject);
            grpcWatch.on("end", resolve);
            grpcWatch.on("data", () => {});
          }),
        ),
      );
      await once(grpcWatch, "data");
      for (const client of [clients.connectH2, clients.connectH1, clients.grpcWebH1]) {
        const first = gate();
        watchEnds.push(endOf(drainConnectWatch(client.watch({}), first.open)));
        await first.opened;
      }
      // Unary calls in flight on every client.
      const unaryEnds = Object.values(clients).map((client) => endOf(client.get({})));
      await Promise.all(unaryEnds.map((_, i) => core.callOf("get", i)));

      // A grace period far longer than the test may take: ending in time means
      // the streams were ended, not left to run out the grace.
      const started = Date.now();
      const shutdown = servers.shutdown(60_000);
      expect(await Promise.all(watchEnds)).toEqual(
        Array(4).fill({ code: "UNAVAILABLE", message: "server shutting down" }),
      );
      // Unary calls were left alone so far.
      const getCalls = core.calls.filter((c) => c.method === "get");
      expect(getCalls.every((c) => !c.ctx.signal.aborted)).toBe(true);
      release.open();
      expect(await Promise.all(unaryEnds)).toEqual(Array(4).fill({ code: "OK", message: "" }));
      await shutdown;
      expect(Date.now() - started).toBeLessThan(10_000);
      expect(servers.logs.map((l) => l.message)).toContain("servers closed");
      expect(servers.logs.filter((l) => l.level !== "info")).toEqual([]);
    },
  );

  it("aborts calls still running after the grace period and closes their connections", async () => {
    const { core, servers } = await serve({
      get: async (_req, ctx) => {
        await aborted(ctx.signal);
        throw ctx.signal.reason;
      },
    });
    const grpc = grpcClient(servers);
    const connect = connectClient(servers, { protocol: "connect", httpVersion: "2" });
    const ends = [endOf(grpc.get({})), endOf(connect.get({}))];
    await core.callOf("get", 1);

    const graceMs = 500;
    const started = Date.now();
    await servers.shutdown(graceMs);
    const elapsed = Date.now() - started;
    // Timers may fire a millisecond early; afterwards, the abort takes 100 ms
    // by design and closing the connections moments: 4.5 s is generous.
    expect(elapsed).toBeGreaterThanOrEqual(graceMs - 5);
    expect(elapsed).toBeLessThan(graceMs + 4_500);
    expect(await Promise.all(ends)).toEqual(
      Array(2).fill({ code: "UNAVAILABLE", message: "server shutting down" }),
    );
    for (const call of core.calls) {
      expect(call.ctx.signal.reason).toMatchObject({ code: "unavailable" });
    }
    expect(servers.logs.map((l) => l.message)).toContain("grace period over, closing connections");
  });

  it("starts when the shutdown signal aborts, and `closed` resolves when it is done", async () => {
    const stop = new AbortController();
    const core = scriptedCore();
    const servers = await startTestServers(core, {
      shutdownSignal: stop.signal,
      shutdownGraceMs: 1_000,
    });
    onTestFinished(() => servers.shutdown(0));
    let closed = false;
    void servers.closed.then(() => {
      closed = true;
    });
    // Still serving after a round trip: nothing has started the shutdown.
    expect(await grpcHealthCheck(servers.grpcAddress, "")).toBe("SERVING");
    expect(closed).toBe(false);
    stop.abort();
    await servers.closed;
    await expect(grpcHealthCheck(servers.grpcAddress, "")).rejects.toMatchObject({
      code: status.UNAVAILABLE,
    });
  });
});

async function* progressEventsForever(): AsyncGenerator<WatchResponse> {
  for (let i = 1; ; i++) {
    yield progressEvent(String(i));
    await sleep(10);
  }
}
