import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Metadata } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { type FakeLlm, startFakeLlm } from "../support/fake-llm.js";
import {
  type ConnectClientHandle,
  createConnectClient,
  createGrpcClient,
  type MemoryGrpcClient,
} from "../transport/clients.js";

/**
 * Tracing end to end: the real server (dist/, as `windlass-memory serve`
 * runs) with the standard OTEL_* environment pointing at an OTLP/HTTP
 * receiver written here (OTLP JSON, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json),
 * and the fake model server recording the headers it gets.
 */
const BIN = new URL("../../bin/windlass-memory.js", import.meta.url).pathname;

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: { key: string; value: Record<string, unknown> }[];
}

// OTLP's SpanKind numbers.
const SERVER = 2;
const CLIENT = 3;

/** Accepts POST /v1/traces (OTLP/HTTP, JSON) and keeps every span. */
async function startOtlpReceiver(): Promise<{
  server: Server;
  endpoint: string;
  spans: OtlpSpan[];
  posts: () => number;
  contentTypes: string[];
}> {
  const spans: OtlpSpan[] = [];
  const contentTypes: string[] = [];
  let posts = 0;
  const server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (d: string) => {
      body += d;
    });
    req.on("end", () => {
      if (req.method !== "POST" || req.url !== "/v1/traces") {
        res.statusCode = 404;
        res.end();
        return;
      }
      posts++;
      const contentType = req.headers["content-type"] ?? "";
      contentTypes.push(contentType);
      // OTLP/JSON is read; protobuf (the SDK's default) is only counted.
      if (contentType !== "application/json") {
        res.end();
        return;
      }
      const parsed = JSON.parse(body) as {
        resourceSpans?: { scopeSpans?: { spans?: OtlpSpan[] }[] }[];
      };
      for (const rs of parsed.resourceSpans ?? []) {
        for (const ss of rs.scopeSpans ?? []) spans.push(...(ss.spans ?? []));
      }
      res.setHeader("content-type", "application/json");
      res.end("{}");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    server,
    endpoint: `http://127.0.0.1:${port}`,
    spans,
    posts: () => posts,
    contentTypes,
  };
}

async function serve(
  env: Record<string, string>,
  args: string[],
): Promise<{ child: ChildProcess; grpcPort: number; httpPort: number; stderr: () => string }> {
  const child = spawn(
    process.execPath,
    [BIN, "serve", "--port", "0", "--http-port", "0", ...args],
    { env: { PATH: process.env.PATH ?? "", ...env }, stdio: ["ignore", "pipe", "pipe"] },
  );
  let err = "";
  child.stderr?.on("data", (d: Buffer) => {
    err += d.toString();
  });
  let out = "";
  const ports = await new Promise<[number, number]>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line; stderr: ${err}`)), 20_000);
    child.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /gRPC [\d.]+:(\d+), Connect\/gRPC-Web\/JSON http:\/\/[\d.]+:(\d+)/.exec(out);
      if (m !== null) {
        clearTimeout(timer);
        resolve([Number(m[1]), Number(m[2])]);
      }
    });
    child.once("exit", (code) => reject(new Error(`exited ${code}: ${err}`)));
  });
  return { child, grpcPort: ports[0], httpPort: ports[1], stderr: () => err };
}

/** Waits until `check` holds, polling; fails with `what` after `ms`. */
async function waitFor<T>(what: string, ms: number, check: () => T | undefined): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = check();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const hex = (n: number, len: number): string =>
  Array.from({ length: len }, (_, i) => ((n * 7 + i * 13) % 16).toString(16)).join("");

describe("OpenTelemetry traces", () => {
  let receiver: Awaited<ReturnType<typeof startOtlpReceiver>>;
  let llm: FakeLlm;
  let server: Awaited<ReturnType<typeof serve>>;
  let grpc: MemoryGrpcClient;
  let connect: ConnectClientHandle;

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    llm = await startFakeLlm();
    server = await serve(
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json",
        // Export within 50 ms rather than 5 s; the test waits for arrival.
        OTEL_BSP_SCHEDULE_DELAY: "50",
        OTEL_SERVICE_NAME: "windlass-memory-test",
      },
      [
        "--openai-base-url",
        llm.baseUrl,
        "--openai-max-retries",
        "0",
        // Watch sends a Progress event at once and then every 100 ms.
        "--progress-interval-ms",
        "100",
      ],
    );
    grpc = createGrpcClient(`127.0.0.1:${server.grpcPort}`);
    connect = createConnectClient(`http://127.0.0.1:${server.httpPort}`, { httpVersion: "1.1" });
  });
  afterAll(async () => {
    grpc?.close();
    connect?.close();
    if (server !== undefined && server.child.exitCode === null) {
      server.child.kill("SIGTERM");
      await once(server.child, "exit");
    }
    await llm?.close();
    receiver?.server.close();
  });

  it("says so in the log", () => {
    expect(server.stderr()).toContain('"msg":"tracing on"');
  });

  it("continues the caller's trace over gRPC, with store, fold and model spans as children", async () => {
    const traceId = hex(1, 32);
    const callerSpan = hex(2, 16);
    const metadata = new Metadata();
    metadata.set("traceparent", `00-${traceId}-${callerSpan}-01`);
    // Caller-set baggage stays here: it must not reach the model endpoint.
    metadata.set("baggage", "user.secret=do-not-forward");
    await grpc.add(
      {
        threadId: "secret-thread-grpc",
        strategy: {
          kind: { case: "summary", value: { window: 1, summarizeEvery: 1, model: "openai" } },
        },
        messages: [
          { role: Role.USER, content: "private words one" },
          { role: Role.USER, content: "private words two" },
        ],
      },
      { metadata },
    );

    const inTrace = () => receiver.spans.filter((s) => s.traceId === traceId);
    const add = await waitFor("the gRPC Add span", 15_000, () =>
      inTrace().find((s) => s.name === "windlass.memory.v1.MemoryService/Add"),
    );
    expect(add.kind).toBe(SERVER);
    expect(add.parentSpanId).toBe(callerSpan);
    const append = await waitFor("store.append", 15_000, () =>
      inTrace().find((s) => s.name === "store.append"),
    );
    expect(append.parentSpanId).toBe(add.spanId);

    // The fold the Add kicked runs after the answer, still in the caller's trace.
    const fold = await waitFor("the fold span", 15_000, () =>
      inTrace().find((s) => s.name === "windlass.fold"),
    );
    expect(fold.parentSpanId).toBe(add.spanId);
    const model = await waitFor("the model call span", 15_000, () =>
      inTrace().find((s) => s.name === "summarize openai"),
    );
    expect(model.parentSpanId).toBe(fold.spanId);
    expect(model.kind).toBe(CLIENT);
    const foldStoreCalls = await waitFor("the fold's store calls", 15_000, () => {
      const names = inTrace()
        .filter((s) => s.parentSpanId === fold.spanId)
        .map((s) => s.name);
      return names.includes("store.commitSummary") ? names : undefined;
    });
    expect(foldStoreCalls).toEqual(
      expect.arrayContaining(["store.acquireFoldLease", "store.read", "store.commitSummary"]),
    );

    // The model endpoint got the same trace, with the model call span as parent.
    expect(llm.requests).toHaveLength(1);
    expect(llm.requests[0]?.headers.traceparent).toBe(`00-${traceId}-${model.spanId}-01`);
    expect(llm.requests[0]?.headers.baggage).toBeUndefined();
  });

  it("continues the caller's trace over Connect", async () => {
    const traceId = hex(3, 32);
    const callerSpan = hex(4, 16);
    await connect.client.get(
      { threadId: "secret-thread-connect" },
      { headers: { traceparent: `00-${traceId}-${callerSpan}-01` } },
    );
    const inTrace = () => receiver.spans.filter((s) => s.traceId === traceId);
    const get = await waitFor("the Connect Get span", 15_000, () =>
      inTrace().find((s) => s.name === "windlass.memory.v1.MemoryService/Get"),
    );
    expect(get.kind).toBe(SERVER);
    expect(get.parentSpanId).toBe(callerSpan);
    const attrs = Object.fromEntries((get.attributes ?? []).map((a) => [a.key, a.value]));
    expect(attrs["rpc.system"]).toEqual({ stringValue: "connect_rpc" });
    expect(attrs["rpc.method"]).toEqual({ stringValue: "Get" });
    const read = await waitFor("the Get's store read", 15_000, () =>
      inTrace().find((s) => s.parentSpanId === get.spanId && s.name.startsWith("store.")),
    );
    expect(read.name).toBe("store.read");
  });

  it("gives Watch streams a span on both ports, ended when the client leaves", async () => {
    for (const transport of ["grpc", "connect"] as const) {
      const traceId = hex(transport === "grpc" ? 5 : 6, 32);
      const callerSpan = hex(7, 16);
      const traceparent = `00-${traceId}-${callerSpan}-01`;
      let received = 0;
      if (transport === "grpc") {
        const metadata = new Metadata();
        metadata.set("traceparent", traceparent);
        const stream = grpc.watch({}, { metadata });
        stream.on("error", () => {});
        await new Promise<void>((resolve) =>
          stream.once("data", () => {
            received++;
            resolve();
          }),
        );
        stream.cancel();
      } else {
        const ac = new AbortController();
        const events = connect.client.watch({}, { headers: { traceparent }, signal: ac.signal });
        for await (const _ of events) {
          received++;
          ac.abort();
          break;
        }
      }
      expect(received).toBe(1);
      const watch = await waitFor(`the ${transport} Watch span`, 15_000, () =>
        receiver.spans.find(
          (s) => s.traceId === traceId && s.name === "windlass.memory.v1.MemoryService/Watch",
        ),
      );
      expect(watch.kind).toBe(SERVER);
      expect(watch.parentSpanId).toBe(callerSpan);
    }
  });

  it("starts a new trace for a call without traceparent", async () => {
    const before = new Set(receiver.spans.map((s) => s.traceId));
    await grpc.listThreads({});
    const list = await waitFor("the ListThreads span", 15_000, () =>
      receiver.spans.find(
        (s) => s.name === "windlass.memory.v1.MemoryService/ListThreads" && !before.has(s.traceId),
      ),
    );
    expect(list.parentSpanId ?? "").toBe("");
  });

  it("puts no thread ids or message contents into attributes", () => {
    expect(receiver.spans.length).toBeGreaterThan(0);
    const text = JSON.stringify(receiver.spans);
    expect(text).not.toContain("secret-thread");
    expect(text).not.toContain("private words");
  });
});

describe("tracing with --trace-thread-ids true", () => {
  it("names the thread and namespace in store spans, never the contents", async () => {
    const receiver = await startOtlpReceiver();
    const server = await serve(
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json",
        OTEL_BSP_SCHEDULE_DELAY: "50",
      },
      ["--trace-thread-ids", "true"],
    );
    const grpc = createGrpcClient(`127.0.0.1:${server.grpcPort}`);
    try {
      await grpc.add({
        threadId: "named-thread",
        messages: [{ role: Role.USER, content: "private words three" }],
      });
      const append = await waitFor("store.append", 15_000, () =>
        receiver.spans.find((s) => s.name === "store.append"),
      );
      const attrs = Object.fromEntries((append.attributes ?? []).map((a) => [a.key, a.value]));
      expect(attrs["windlass.thread_id"]).toEqual({ stringValue: "named-thread" });
      expect(attrs["windlass.namespace"]).toEqual({ stringValue: "" });
      expect(JSON.stringify(receiver.spans)).not.toContain("private words");
    } finally {
      grpc.close();
      server.child.kill("SIGTERM");
      await once(server.child, "exit");
      receiver.server.close();
    }
  });
});

describe("tracing with the SDK's default protocol", () => {
  it("sends OTLP/HTTP protobuf to the endpoint", async () => {
    const receiver = await startOtlpReceiver();
    const server = await serve(
      { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint, OTEL_BSP_SCHEDULE_DELAY: "50" },
      [],
    );
    const grpc = createGrpcClient(`127.0.0.1:${server.grpcPort}`);
    try {
      await grpc.listThreads({});
      await waitFor("a POST /v1/traces", 15_000, () => (receiver.posts() > 0 ? true : undefined));
      expect(receiver.contentTypes[0]).toBe("application/x-protobuf");
    } finally {
      grpc.close();
      server.child.kill("SIGTERM");
      await once(server.child, "exit");
      receiver.server.close();
    }
  });
});

describe("tracing off", () => {
  it.each([
    ["no OTEL_* variable asks for traces", {}],
    ["OTEL_TRACES_EXPORTER is none", { OTEL_TRACES_EXPORTER: "none" }],
    ["OTEL_SDK_DISABLED is true", { OTEL_SDK_DISABLED: "true" }],
  ])("stays off when %s", async (_why, extra: Record<string, string>) => {
    const receiver = await startOtlpReceiver();
    const env: Record<string, string> = {
      ...extra,
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json",
      OTEL_BSP_SCHEDULE_DELAY: "50",
    };
    // With a switch that turns tracing off, an endpoint too: it must not matter.
    if (Object.keys(extra).length > 0) env.OTEL_EXPORTER_OTLP_ENDPOINT = receiver.endpoint;
    const server = await serve(env, []);
    try {
      const grpc = createGrpcClient(`127.0.0.1:${server.grpcPort}`);
      await grpc.listThreads({});
      grpc.close();
      server.child.kill("SIGTERM");
      const [code] = (await once(server.child, "exit")) as [number | null];
      expect(code).toBe(0);
      expect(server.stderr()).not.toContain('"msg":"tracing on"');
      expect(receiver.posts()).toBe(0);
    } finally {
      if (server.child.exitCode === null) server.child.kill("SIGKILL");
      receiver.server.close();
    }
  });
});
