import * as http2 from "node:http2";
import * as net from "node:net";
import { setImmediate } from "node:timers/promises";
import { create, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it, onTestFinished, vi } from "vitest";
import {
  WatchRequestSchema,
  WatchResponseSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { startTestServers, type TestServers } from "./harness.js";
import { scriptedCore } from "./scripted-core.js";

/**
 * A Watch whose client stops reading must stall the core's generator instead
 * of buffering events in the server. The clients here are raw HTTP/2 and
 * HTTP/1.1 connections that simply stop reading: the grpc-js and connect-node
 * client libraries keep reading into their own memory, which would hide what
 * the server does.
 */

interface RawWatch {
  /** Starts reading (and discarding) the response. */
  resume(): void;
  close(): void;
}

const WATCH_PATH = "/windlass.memory.v1.MemoryService/Watch";

/** A length-prefixed WatchRequest, the framing of gRPC and Connect streaming. */
function framedWatchRequest(): Buffer {
  const message = toBinary(WatchRequestSchema, create(WatchRequestSchema, {}));
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  return frame;
}

function rawHttp2Watch(port: number, contentType: string): RawWatch {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on("error", () => {});
  const stream = session.request({
    ":method": "POST",
    ":path": WATCH_PATH,
    "content-type": contentType,
    te: "trailers",
    "connect-protocol-version": "1",
  });
  stream.on("error", () => {});
  stream.end(framedWatchRequest());
  stream.pause();
  return {
    resume: () => stream.resume(),
    close: () => {
      stream.close();
      session.destroy();
    },
  };
}

function rawHttp1Watch(port: number): RawWatch {
  const body = framedWatchRequest();
  const socket = net.connect(port, "127.0.0.1");
  socket.on("error", () => {});
  socket.write(
    `POST ${WATCH_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
      `Content-Type: application/connect+proto\r\nConnect-Protocol-Version: 1\r\n` +
      `Content-Length: ${body.length}\r\n\r\n`,
  );
  socket.write(body);
  socket.pause();
  return { resume: () => socket.resume(), close: () => socket.destroy() };
}

const EVENT_BYTES = 16 * 1024;

describe.each([
  {
    transport: "gRPC (grpc-js, HTTP/2)",
    open: (s: TestServers) => rawHttp2Watch(s.grpcPort, "application/grpc"),
    // HTTP/2 stream window (64 KiB) plus the stream's high-water mark.
    boundBytes: 4 * 1024 * 1024,
  },
  {
    transport: "Connect, HTTP/2",
    open: (s: TestServers) => rawHttp2Watch(s.httpPort, "application/connect+proto"),
    boundBytes: 4 * 1024 * 1024,
  },
  {
    transport: "Connect, HTTP/1.1",
    open: (s: TestServers) => rawHttp1Watch(s.httpPort),
    // No per-stream window: the kernel's socket buffers (a few MB on
    // loopback) absorb events before writes block.
    boundBytes: 16 * 1024 * 1024,
  },
])("Watch backpressure over $transport", ({ open, boundBytes }) => {
  it("stops pulling events while the client does not read, and resumes when it does", async () => {
    let produced = 0;
    const summary = "x".repeat(EVENT_BYTES);
    const core = scriptedCore({
      async *watch(_req, ctx) {
        while (!ctx.signal.aborted) {
          produced++;
          yield create(WatchResponseSchema, {
            resumeToken: String(produced),
            event: { case: "summaryUpdated", value: { summary } },
          });
          // Lets a transport that ignores backpressure race ahead.
          await setImmediate();
        }
      },
    });
    const servers = await startTestServers(core);
    const watch = open(servers);
    onTestFinished(async () => {
      watch.close();
      await servers.shutdown(2_000);
    });

    await vi.waitFor(() => expect(produced).toBeGreaterThan(0), { timeout: 15_000 });
    // Stalled: nothing produced between two polls 500 ms apart (the core
    // produces at every turn of the event loop while it is pulled). Socket
    // buffers on loopback keep growing for a while, so wait for it.
    let previous = -1;
    await vi.waitFor(
      () => {
        const now = produced;
        const unchanged = now === previous;
        previous = now;
        expect(unchanged).toBe(true);
      },
      { timeout: 15_000, interval: 500 },
    );
    const stalledAt = produced;
    expect(stalledAt * EVENT_BYTES).toBeLessThan(boundBytes);

    watch.resume();
    await vi.waitFor(() => expect(produced).toBeGreaterThan(stalledAt + 100), { timeout: 15_000 });
  });
});
