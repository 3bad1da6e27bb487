import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { H2LOAD_MISSING, h2loadAvailable, runH2load } from "../../bench/h2load.js";

/**
 * The h2load driver end to end: the real h2load (Debian's nghttp2-client;
 * .ci/run installs it) against a local HTTP/2 server answering gRPC calls,
 * so its output, latency log and CPU are read as the bench reads them.
 */

/** h2load must be there: a missing tool fails the run, never skips it. */
function requireH2load(): void {
  if (!h2loadAvailable()) throw new Error(H2LOAD_MISSING);
}

let server: http2.Http2Server;
let address = "";
let answered = 0;

beforeAll(async () => {
  requireH2load();
  server = http2.createServer();
  server.on("stream", (stream) => {
    stream.resume();
    stream.on("end", () => {
      answered++;
      stream.respond(
        { ":status": 200, "content-type": "application/grpc" },
        { waitForTrailers: true },
      );
      stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
      // An empty message: its frame is the 5-byte prefix alone.
      stream.end(Buffer.alloc(5));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  address = `127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

describe("the h2load driver against a local server", () => {
  it("counts the calls the server answered, with a latency for each and h2load's CPU", async () => {
    const before = answered;
    const run = await runH2load(address, "/test.Service/Call", Buffer.from([8, 1]), {
      concurrency: 4,
      connections: 2,
      durationMs: 500,
      callTimeoutMs: 5_000,
    });
    expect(run.load.calls).toBeGreaterThan(0);
    expect(run.load.errors).toBe(0);
    expect(run.load.latenciesMs.length).toBe(run.load.calls);
    expect(Math.min(...run.load.latenciesMs)).toBeGreaterThan(0);
    // h2load counts only the calls of its measured time; the server saw those at least.
    expect(answered - before).toBeGreaterThanOrEqual(run.load.calls);
    expect(run.load.elapsedMs).toBeGreaterThanOrEqual(400);
    expect(run.driverCpuMicros).toBeGreaterThanOrEqual(0);
  });

  it("fails a run that completed no call instead of reporting zeros", async () => {
    // A port just closed: nobody listens there.
    const closed = http2.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    await expect(
      runH2load(`127.0.0.1:${port}`, "/test.Service/Call", Buffer.alloc(0), {
        concurrency: 1,
        connections: 1,
        durationMs: 300,
        callTimeoutMs: 1_000,
      }),
    ).rejects.toThrow(/completed no call/);
  });
});
