import { mkdtemp, readFile, rm } from "node:fs/promises";
import * as http from "node:http";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setImmediate } from "node:timers/promises";
import { connect as connectTls } from "node:tls";
import { create, toBinary } from "@bufbuild/protobuf";
import { BinaryReader } from "@bufbuild/protobuf/wire";
import { Code, ConnectError } from "@connectrpc/connect";
import { type ServiceError, status } from "@grpc/grpc-js";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import {
  Role,
  WatchRequestSchema,
  WatchResponseSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { ServerMetrics } from "../../src/metrics.js";
import { isLoopbackHost, metricsEndpoint } from "../../src/transport/metrics-endpoint.js";
import type { StartServersOptions } from "../../src/transport/servers.js";
import { startAppHarness } from "../integration/app-harness.js";
import { metricSeries as series } from "../support/metric-series.js";
import { writeSelfSignedCert } from "../support/self-signed.js";
import { createConnectClient, createGrpcClient } from "../transport/clients.js";
import { startTestServers, type TestServers } from "../transport/harness.js";
import { scriptedCore } from "../transport/scripted-core.js";

/**
 * Limits per caller and per connection, from the outside: raw sockets that
 * never speak, too many sockets, a namespace over its rate, watchers that stop
 * reading, and who may read /metrics. Timeouts are configured short and each
 * test waits for the event itself, with a generous upper bound.
 */

const WAIT = { timeout: 10_000, interval: 20 };
const WATCH_PATH = "/windlass.memory.v1.MemoryService/Watch";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function servers(
  overrides: Partial<Omit<StartServersOptions, "core" | "logger">> = {},
  core = scriptedCore(),
): Promise<TestServers> {
  const s = await startTestServers(core, overrides);
  cleanups.push(() => s.shutdown(0));
  return s;
}

/** A TCP connection the test holds; `closed` resolves when the server ends it. */
function rawSocket(port: number): { socket: net.Socket; closed: Promise<void> } {
  const socket = net.connect(port, "127.0.0.1");
  socket.on("error", () => {});
  // Read whatever the server sends (an HTTP/2 SETTINGS frame), so 'close' can fire.
  socket.resume();
  cleanups.push(() => socket.destroy());
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  return { socket, closed };
}

function connected(socket: net.Socket): Promise<void> {
  return new Promise((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
}

/** Whether the server takes an HTTP/2 connection (sends its SETTINGS) or closes it. */
function http2Accepted(port: number): Promise<boolean> {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on("error", () => {});
  cleanups.push(() => session.destroy());
  return new Promise((resolve) => {
    session.once("remoteSettings", () => resolve(true));
    session.once("close", () => resolve(false));
  });
}

const PORTS = [
  { port: "gRPC", of: (s: TestServers) => s.grpcPort },
  { port: "HTTP", of: (s: TestServers) => s.httpPort },
] as const;

describe.each(PORTS)("connections on the $port port", ({ of }) => {
  it("closes a socket that never sends a byte, after the first-byte timeout", async () => {
    const s = await servers({ connectionLimits: { firstByteTimeoutMs: 200 } });
    const silent = rawSocket(of(s));
    await connected(silent.socket);
    let closedAt: number | undefined;
    void silent.closed.then(() => {
      closedAt = Date.now();
    });
    await vi.waitFor(() => expect(closedAt).toBeDefined(), WAIT);
  });

  it("refuses sockets beyond --max-connections, and accepts again once one closes", async () => {
    const s = await servers({
      connectionLimits: { maxConnections: 2, firstByteTimeoutMs: 60_000 },
    });
    const first = rawSocket(of(s));
    const second = rawSocket(of(s));
    await Promise.all([connected(first.socket), connected(second.socket)]);
    // Accepted in order, so the third is the one over the cap.
    expect(await http2Accepted(of(s))).toBe(false);
    expect(first.socket.destroyed).toBe(false);
    expect(second.socket.destroyed).toBe(false);

    first.socket.destroy();
    await vi.waitFor(async () => expect(await http2Accepted(of(s))).toBe(true), WAIT);
  });

  it("sends GOAWAY to an HTTP/2 connection idle for --max-connection-idle-ms", async () => {
    const s = await servers({ connectionLimits: { maxConnectionIdleMs: 200 } });
    const session = http2.connect(`http://127.0.0.1:${of(s)}`);
    session.on("error", () => {});
    cleanups.push(() => session.destroy());
    await new Promise<void>((resolve) => session.once("goaway", () => resolve()));
  });
});

describe("keepalive on the gRPC port", () => {
  it("closes a connection that does not answer its pings within --keepalive-timeout-ms", async () => {
    const s = await servers({
      connectionLimits: { keepaliveTimeMs: 100, keepaliveTimeoutMs: 200 },
    });
    // An HTTP/2 client in name only: the preface and an empty SETTINGS
    // frame, then it reads (and drops) what comes but never answers a PING.
    const peer = rawSocket(s.grpcPort);
    await connected(peer.socket);
    peer.socket.write(
      Buffer.concat([
        Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1"),
        Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]),
      ]),
    );
    await peer.closed;
  });

  it("pings connections every --keepalive-time-ms", async () => {
    const s = await servers({ connectionLimits: { keepaliveTimeMs: 100 } });
    const session = http2.connect(`http://127.0.0.1:${s.grpcPort}`);
    session.on("error", () => {});
    cleanups.push(() => session.destroy());
    let pings = 0;
    session.on("ping", () => pings++);
    await vi.waitFor(() => expect(pings).toBeGreaterThanOrEqual(2), WAIT);
  });
});

/** google.rpc.RetryInfo.retry_delay in ms, from the RetryInfo bytes. */
function retryDelayMs(retryInfo: Uint8Array): number {
  const reader = new BinaryReader(retryInfo);
  let ms = 0;
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field !== 1) {
      reader.skip(wireType);
      continue;
    }
    const duration = new BinaryReader(reader.bytes());
    while (duration.pos < duration.len) {
      const [f, w] = duration.tag();
      if (f === 1) ms += Number(duration.int64()) * 1000;
      else if (f === 2) ms += duration.int32() / 1_000_000;
      else duration.skip(w);
    }
  }
  return ms;
}

/** The RetryInfo detail of a google.rpc.Status (grpc-status-details-bin), and its message. */
function retryInfoOfStatus(bytes: Uint8Array): { message: string; retryInfo?: Uint8Array } {
  const reader = new BinaryReader(bytes);
  let message = "";
  let retryInfo: Uint8Array | undefined;
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === 2) {
      message = reader.string();
    } else if (field === 3) {
      const any = new BinaryReader(reader.bytes());
      let typeUrl = "";
      let value: Uint8Array | undefined;
      while (any.pos < any.len) {
        const [f, w] = any.tag();
        if (f === 1) typeUrl = any.string();
        else if (f === 2) value = any.bytes();
        else any.skip(w);
      }
      if (typeUrl === "type.googleapis.com/google.rpc.RetryInfo") retryInfo = value;
    } else {
      reader.skip(wireType);
    }
  }
  return retryInfo === undefined ? { message } : { message, retryInfo };
}

describe("requests per second per namespace", () => {
  it("answers RESOURCE_EXHAUSTED with RetryInfo past the burst, on both transports, and leaves other namespaces alone", async () => {
    const core = scriptedCore();
    // One token per 100 s: nothing refills while the test runs.
    const s = await servers(
      {
        auth: new Map([
          ["token-a", "tenant-a"],
          ["token-b", "tenant-b"],
        ]),
        rateLimit: { ratePerSecond: 0.01, burst: 3 },
      },
      core,
    );
    const grpcA = createGrpcClient(s.grpcAddress, { token: "token-a" });
    const grpcB = createGrpcClient(s.grpcAddress, { token: "token-b" });
    const connectA = createConnectClient(s.httpUrl, { httpVersion: "1.1", token: "token-a" });
    cleanups.push(
      () => grpcA.close(),
      () => grpcB.close(),
      () => connectA.close(),
    );

    for (let i = 0; i < 3; i++) await grpcA.get({ threadId: "t" });
    const refused = (await grpcA.get({ threadId: "t" }).catch((e: unknown) => e)) as ServiceError;
    expect(refused.code).toBe(status.RESOURCE_EXHAUSTED);
    expect(refused.details).toMatch(/rate limit/);
    const [details] = refused.metadata.get("grpc-status-details-bin");
    expect(details).toBeInstanceOf(Buffer);
    const parsed = retryInfoOfStatus(details as Buffer);
    expect(parsed.message).toBe(refused.details);
    expect(parsed.retryInfo).toBeDefined();
    const delay = retryDelayMs(parsed.retryInfo ?? new Uint8Array());
    // One token at 0.01/s is up to 100 s away.
    expect(delay).toBeGreaterThan(1_000);
    expect(delay).toBeLessThanOrEqual(100_000);

    // The same namespace over Connect shares the bucket...
    const viaConnect = await connectA.client.get({ threadId: "t" }).catch((e: unknown) => e);
    expect(viaConnect).toBeInstanceOf(ConnectError);
    const connectError = viaConnect as ConnectError;
    expect(connectError.code).toBe(Code.ResourceExhausted);
    const detail = connectError.details.find(
      (d) => "type" in d && d.type === "google.rpc.RetryInfo",
    );
    expect(detail).toBeDefined();
    expect(retryDelayMs((detail as { value: Uint8Array }).value)).toBeGreaterThan(1_000);

    // ...while another namespace is untouched.
    for (let i = 0; i < 3; i++) await grpcB.get({ threadId: "t" });
    const namespaces = core.calls.map((c) => c.ctx.namespace);
    expect(namespaces.filter((n) => n === "tenant-a")).toHaveLength(3);
    expect(namespaces.filter((n) => n === "tenant-b")).toHaveLength(3);
  });
});

/** A length-prefixed WatchRequest, the framing of gRPC and Connect streaming. */
function framedWatchRequest(resumeToken = ""): Buffer {
  const message = toBinary(WatchRequestSchema, create(WatchRequestSchema, { resumeToken }));
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  return frame;
}

/** A Watch over raw HTTP/2 whose client never reads the response. */
function pausedHttp2Watch(port: number, contentType: string, resumeToken = "") {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on("error", () => {});
  cleanups.push(() => session.destroy());
  const stream = session.request({
    ":method": "POST",
    ":path": WATCH_PATH,
    "content-type": contentType,
    te: "trailers",
    "connect-protocol-version": "1",
  });
  stream.on("error", () => {});
  stream.end(framedWatchRequest(resumeToken));
  stream.pause();
  const closed = new Promise<number | undefined>((resolve) =>
    stream.once("close", () => resolve(stream.rstCode)),
  );
  return { stream, closed };
}

/** A Connect Watch over raw HTTP/1.1 whose client never reads the response. */
function pausedHttp1Watch(port: number) {
  const body = framedWatchRequest();
  const socket = net.connect(port, "127.0.0.1");
  cleanups.push(() => socket.destroy());
  socket.on("error", () => {});
  socket.write(
    `POST ${WATCH_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
      `Content-Type: application/connect+proto\r\nConnect-Protocol-Version: 1\r\n` +
      `Content-Length: ${body.length}\r\n\r\n`,
  );
  socket.write(body);
  socket.pause();
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  return { socket, closed };
}

/** A core whose Watch yields 16 KiB events as fast as it is pulled, and says when it is let go. */
function floodingCore() {
  const state = { produced: 0, released: false };
  const summary = "x".repeat(16 * 1024);
  const core = scriptedCore({
    async *watch(_req, ctx) {
      try {
        while (!ctx.signal.aborted) {
          state.produced++;
          yield create(WatchResponseSchema, {
            resumeToken: String(state.produced),
            event: { case: "summaryUpdated", value: { summary } },
          });
          await setImmediate();
        }
      } finally {
        state.released = true;
      }
    },
  });
  return { core, state };
}

describe("a Watch whose client stops reading", () => {
  it.each([
    { transport: "grpc", contentType: "application/grpc", port: (s: TestServers) => s.grpcPort },
    {
      transport: "connect",
      contentType: "application/connect+proto",
      port: (s: TestServers) => s.httpPort,
    },
  ])(
    "is reset with ENHANCE_YOUR_CALM (RESOURCE_EXHAUSTED) over HTTP/2 ($transport)",
    async ({ transport, contentType, port }) => {
      const { core, state } = floodingCore();
      const metrics = new ServerMetrics();
      const s = await servers({ watchStallTimeoutMs: 300, metrics }, core);
      const watch = pausedHttp2Watch(port(s), contentType);

      const rstCode = await watch.closed;
      expect(rstCode).toBe(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
      // The server let go of the stream: the core's generator is closed and it
      // stopped producing at the bound the transport buffers.
      await vi.waitFor(() => expect(state.released).toBe(true), WAIT);
      expect(state.produced * 16 * 1024).toBeLessThan(4 * 1024 * 1024);
      expect(
        await series(
          metrics,
          `windlass_rpc_requests_total{transport="${transport}",method="Watch",code="RESOURCE_EXHAUSTED"}`,
        ),
      ).toBe(1);
    },
  );

  it("has its HTTP/1.1 connection closed, with no end-of-stream message", async () => {
    const { core, state } = floodingCore();
    const metrics = new ServerMetrics();
    const s = await servers({ watchStallTimeoutMs: 300, metrics }, core);
    const watch = pausedHttp1Watch(s.httpPort);

    await vi.waitFor(() => expect(state.released).toBe(true), WAIT);
    expect(
      await series(
        metrics,
        'windlass_rpc_requests_total{transport="connect",method="Watch",code="RESOURCE_EXHAUSTED"}',
      ),
    ).toBe(1);
    // Reading again, the client gets what was already on its way, then the
    // end of the connection (the server reset it: Linux reports that as EOF
    // once the received bytes are read). No status can follow unread bytes
    // on HTTP/1.1, so the body simply stops.
    const received: Buffer[] = [];
    watch.socket.on("data", (chunk: Buffer) => received.push(chunk));
    watch.socket.resume();
    await watch.closed;
    const body = Buffer.concat(received);
    expect(body.length).toBeGreaterThan(0);
    expect(body.length).toBeLessThan(16 * 1024 * 1024);
    expect(body.includes(Buffer.from('"code"'))).toBe(false);
  });

  it("still works for a client that reads slowly but keeps reading", async () => {
    const { core, state } = floodingCore();
    const s = await servers({ watchStallTimeoutMs: 2_000 }, core);
    const watch = pausedHttp2Watch(s.grpcPort, "application/grpc");
    let read = 0;
    watch.stream.on("data", (chunk: Buffer) => {
      read += chunk.length;
      // Takes a little, often: never 2 s without reading.
      watch.stream.pause();
      setTimeout(() => watch.stream.resume(), 5);
    });
    watch.stream.resume();
    await vi.waitFor(() => expect(read).toBeGreaterThan(2 * 1024 * 1024), {
      ...WAIT,
      timeout: 30_000,
    });
    expect(state.released).toBe(false);
  });
});

describe("finding 8: a gRPC watcher that stops reading and later resumes", () => {
  it("gets RESOURCE_EXHAUSTED, as the README says, not OUT_OF_RANGE", async () => {
    const h = await startAppHarness([
      "--watch-buffer",
      "50",
      "--event-retention",
      "1000",
      "--watch-stall-timeout-ms",
      "600000",
      // 4,500 Adds in a few seconds: this test is about the watcher, not the rate limit.
      "--rate-limit-rps",
      "0",
    ]);
    cleanups.push(() => h.close());
    const writer = createGrpcClient(`127.0.0.1:${h.app.grpcPort}`);
    cleanups.push(() => writer.close());
    const addMany = async (count: number): Promise<void> => {
      for (let i = 0; i < count; i += 50) {
        await Promise.all(
          Array.from({ length: Math.min(50, count - i) }, (_, j) =>
            writer.add({
              threadId: `t${(i + j) % 7}`,
              messages: [{ role: Role.USER, content: "y" }],
            }),
          ),
        );
      }
    };

    // The resume token of the first event, then a backlog of 1,500 events
    // (the log keeps 1,000 to 2,000): the watcher below reads it in full
    // batches, and parks in the middle of one when its window is full.
    const first = writer.watch({});
    cleanups.push(() => first.cancel());
    const firstEvent = new Promise<string>((resolve) =>
      first.on("data", (e: { resumeToken: string }) => resolve(e.resumeToken)),
    );
    first.on("error", () => {});
    await addMany(1);
    const token = await firstEvent;
    first.cancel();
    await addMany(1_499);

    const watch = pausedHttp2Watch(h.app.grpcPort, "application/grpc", token);
    const trailers = new Promise<http2.IncomingHttpHeaders>((resolve) =>
      watch.stream.once("trailers", resolve),
    );
    // Events are on their way and the client is not reading them.
    await vi.waitFor(() => expect(watch.stream.readableLength).toBeGreaterThan(16 * 1024), WAIT);
    // Meanwhile 3,000 more: far past the watch buffer, and past the log's retention.
    await addMany(3_000);

    watch.stream.resume();
    const end = await trailers;
    expect(decodeURIComponent(String(end["grpc-message"]))).toMatch(/behind/);
    expect(end["grpc-status"]).toBe(String(status.RESOURCE_EXHAUSTED));
  });
});

describe("GET /metrics", () => {
  async function get(url: string, token?: string): Promise<number> {
    const res = await fetch(
      url,
      token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } },
    );
    await res.arrayBuffer();
    return res.status;
  }

  it("needs WINDLASS_METRICS_TOKEN when one is set", async () => {
    const s = await servers({ metrics: new ServerMetrics(), metricsToken: "m-secret" });
    const url = `${s.httpUrl}/metrics`;
    expect(await get(url)).toBe(401);
    expect(await get(url, "m-secreT")).toBe(401);
    expect(await get(url, "m-secret")).toBe(200);
  });

  it("moves to --metrics-port, off the HTTP port", async () => {
    const s = await servers({ metrics: new ServerMetrics(), metricsPort: 0 });
    expect(s.metricsPort).toBeGreaterThan(0);
    expect(await get(`http://127.0.0.1:${s.metricsPort}/metrics`)).toBe(200);
    expect(await get(`${s.httpUrl}/metrics`)).not.toBe(200);
  });

  it("answers 403 without a token on a public address", async () => {
    const endpoint = metricsEndpoint({ metrics: new ServerMetrics(), openWithoutToken: false });
    const server = http.createServer(endpoint);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise((resolve) => server.close(resolve)));
    const port = (server.address() as AddressInfo).port;
    expect(await get(`http://127.0.0.1:${port}/metrics`)).toBe(403);
    // Which addresses count as public: all but loopback.
    expect(["127.0.0.1", "::1", "localhost"].every(isLoopbackHost)).toBe(true);
    expect(["0.0.0.0", "::", "10.0.0.5", "example.com"].some(isLoopbackHost)).toBe(false);
  });
});

describe("with TLS", () => {
  let dir = "";
  let tls: { cert: Buffer; key: Buffer };
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "windlass-limits-tls-"));
    const files = await writeSelfSignedCert(dir);
    tls = { cert: await readFile(files.cert), key: await readFile(files.key) };
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it.each(PORTS)("closes a $port-port socket that sends nothing", async ({ of }) => {
    const s = await servers({ tls, connectionLimits: { firstByteTimeoutMs: 300 } });
    const silent = rawSocket(of(s));
    await connected(silent.socket);
    await silent.closed;
  });

  it("closes an HTTP-port socket that starts a TLS handshake and stops", async () => {
    const s = await servers({ tls, connectionLimits: { firstByteTimeoutMs: 300 } });
    const peer = rawSocket(s.httpPort);
    await connected(peer.socket);
    // The first bytes of a ClientHello record, and nothing more: the handshake
    // must finish within the timeout. (On the gRPC port these bytes pass the
    // first-byte check, and grpc-js's TLS server has Node's 120 s limit.)
    peer.socket.write(Buffer.from([0x16, 0x03, 0x01]));
    await peer.closed;
  });

  it("ends a non-reading HTTP/1.1 watcher over TLS", async () => {
    const { core, state } = floodingCore();
    const s = await servers({ tls, watchStallTimeoutMs: 300 }, core);
    const body = framedWatchRequest();
    const socket = connectTls({
      host: "127.0.0.1",
      port: s.httpPort,
      ca: tls.cert,
      ALPNProtocols: ["http/1.1"],
    });
    socket.on("error", () => {});
    cleanups.push(() => socket.destroy());
    await new Promise<void>((resolve) => socket.once("secureConnect", () => resolve()));
    socket.write(
      `POST ${WATCH_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
        `Content-Type: application/connect+proto\r\nConnect-Protocol-Version: 1\r\n` +
        `Content-Length: ${body.length}\r\n\r\n`,
    );
    socket.write(body);
    socket.pause();
    await vi.waitFor(() => expect(state.released).toBe(true), WAIT);
    const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
    socket.resume();
    await closed;
  });
});
