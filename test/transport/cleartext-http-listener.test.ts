import * as http2 from "node:http2";
import * as net from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it, onTestFinished } from "vitest";
import {
  type CleartextHttpListenerOptions,
  createCleartextHttpListener,
} from "../../src/transport/cleartext-http-listener.js";
import { HttpConnections } from "../../src/transport/http-connections.js";

/** A listener whose handler answers with the HTTP version and the body length it read. */
async function listen(options: CleartextHttpListenerOptions = {}): Promise<number> {
  const connections = new HttpConnections();
  const listener = createCleartextHttpListener(
    (req, res) => {
      let length = 0;
      req.on("data", (chunk: Buffer) => {
        length += chunk.length;
      });
      req.on("end", () => res.end(`${req.httpVersion} ${length}`));
    },
    connections,
    options,
  );
  await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
  onTestFinished(async () => {
    connections.destroyAll();
    await new Promise((resolve) => listener.close(resolve));
  });
  return (listener.address() as net.AddressInfo).port;
}

/** Writes `chunks` with pauses between them, then collects the whole reply. */
async function rawExchange(port: number, chunks: (string | Buffer)[]): Promise<string> {
  const socket = net.connect(port, "127.0.0.1");
  await new Promise((resolve) => socket.once("connect", resolve));
  const reply: Buffer[] = [];
  socket.on("data", (chunk: Buffer) => reply.push(chunk));
  const closed = new Promise((resolve) => socket.once("close", resolve));
  for (const chunk of chunks) {
    socket.write(chunk);
    await sleep(30);
  }
  await closed;
  return Buffer.concat(reply).toString("latin1");
}

function http2Post(port: number, body: Buffer): Promise<string> {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  onTestFinished(() => session.destroy());
  return new Promise((resolve, reject) => {
    const stream = session.request({ ":method": "POST", ":path": "/" });
    stream.on("error", reject);
    let reply = "";
    stream.on("data", (chunk: Buffer) => {
      reply += chunk.toString();
    });
    stream.on("end", () => resolve(reply));
    stream.end(body);
  });
}

describe("cleartext HTTP listener", () => {
  it("serves HTTP/1.1 and HTTP/2 with prior knowledge on one port, bodies intact", async () => {
    const port = await listen();
    const body = Buffer.alloc(1024 * 1024, "b");
    expect(await http2Post(port, body)).toBe(`2.0 ${body.length}`);
    const response = await fetch(`http://127.0.0.1:${port}/`, { method: "POST", body });
    expect(await response.text()).toBe(`1.1 ${body.length}`);
  });

  it("routes by the first bytes even when they arrive in pieces", async () => {
    const port = await listen();
    // "G", then the rest: not the HTTP/2 preface, so HTTP/1.1.
    const http1 = await rawExchange(port, [
      "G",
      "ET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ]);
    expect(http1).toMatch(/^HTTP\/1\.1 200 OK\r\n[\s\S]*1\.1 0$/);
    // The HTTP/2 preface split in two: still HTTP/2 (the server answers with
    // its SETTINGS frame, then GOAWAY when the client goes away).
    const socket = net.connect(port, "127.0.0.1");
    onTestFinished(() => {
      socket.destroy();
    });
    await new Promise((resolve) => socket.once("connect", resolve));
    socket.write("PRI * HT");
    await sleep(30);
    socket.write("TP/2.0\r\n\r\nSM\r\n\r\n");
    const frame = await new Promise<Buffer>((resolve) => socket.once("data", resolve));
    // Frame header: 3-byte length, then type 0x4 (SETTINGS).
    expect(frame[3]).toBe(0x4);
  });

  it("drops a connection that sends nothing", async () => {
    const port = await listen({ firstBytesTimeoutMs: 200 });
    const started = Date.now();
    expect(await rawExchange(port, [])).toBe("");
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it("enforces the HTTP/1.1 headers timeout (slowloris)", { timeout: 5_000 }, async () => {
    const port = await listen({
      http1: { headersTimeout: 300, requestTimeout: 500, connectionsCheckingInterval: 50 },
    });
    const reply = await rawExchange(port, ["GET / HTTP/1.1\r\nHost: x\r\n"]);
    expect(reply).toMatch(/^HTTP\/1\.1 408 /);
  });
});
