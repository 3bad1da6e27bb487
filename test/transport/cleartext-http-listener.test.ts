import * as http2 from "node:http2";
import * as net from "node:net";
import { describe, expect, it, onTestFinished } from "vitest";
import {
  type CleartextHttpListenerOptions,
  createCleartextHttpListener,
} from "../../src/transport/cleartext-http-listener.js";
import { HttpConnections } from "../../src/transport/http-connections.js";

interface Listening {
  port: number;
  /** The listener's side of the connection `client` opened. */
  serverSide(client: net.Socket): Promise<net.Socket>;
}

/** Polls `value` until it is defined; the bound only fails a stuck run. */
async function eventually<T>(what: string, value: () => T | undefined): Promise<T> {
  for (const until = Date.now() + 10_000; ; ) {
    const v = value();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`${what}: not within 10 s`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** A listener whose handler answers with the HTTP version and the body length it read. */
async function listen(options: CleartextHttpListenerOptions = {}): Promise<Listening> {
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
  // By the client's port; a case opens a few connections.
  const accepted = new Map<number, net.Socket>();
  listener.on("connection", (socket: net.Socket) => accepted.set(socket.remotePort ?? 0, socket));
  await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
  onTestFinished(async () => {
    connections.destroyAll();
    await new Promise((resolve) => listener.close(resolve));
  });
  return {
    port: (listener.address() as net.AddressInfo).port,
    serverSide: (client) =>
      eventually("the listener accepting the connection", () =>
        accepted.get(client.localPort ?? 0),
      ),
  };
}

async function connect(port: number): Promise<net.Socket> {
  const socket = net.connect(port, "127.0.0.1");
  onTestFinished(() => {
    socket.destroy();
  });
  await new Promise((resolve) => socket.once("connect", resolve));
  // Each write leaves at once, never held back to join the next.
  socket.setNoDelay(true);
  return socket;
}

/**
 * Writes `chunks` to `client` in order, each only once the listener has read
 * every byte before it, so the listener surely sees them apart. Its
 * 'readable' handler runs in the same turn its socket takes the bytes in, so
 * once bytesRead shows them they have been looked at.
 */
async function writeApart(
  served: Listening,
  client: net.Socket,
  chunks: (string | Buffer)[],
): Promise<void> {
  const server = await served.serverSide(client);
  let sent = 0;
  for (const [i, chunk] of chunks.entries()) {
    client.write(chunk);
    sent += Buffer.byteLength(chunk);
    if (i === chunks.length - 1) break;
    await eventually(`the listener reading the first ${sent} bytes`, () =>
      server.bytesRead >= sent ? true : undefined,
    );
    // Nothing more was written: the listener has these bytes and no others.
    expect(server.bytesRead).toBe(sent);
  }
}

/** Writes `chunks` apart (see writeApart), then collects the whole reply until the server closes. */
async function rawExchange(served: Listening, chunks: (string | Buffer)[]): Promise<string> {
  const client = await connect(served.port);
  const reply: Buffer[] = [];
  client.on("data", (chunk: Buffer) => reply.push(chunk));
  const closed = new Promise((resolve) => client.once("close", resolve));
  await writeApart(served, client, chunks);
  await closed;
  return Buffer.concat(reply).toString("latin1");
}

/** Reads HTTP/2 frames until a SETTINGS ACK ("SETTINGS ACK") or a GOAWAY ("GOAWAY"), or the end. */
function settingsAck(socket: net.Socket): Promise<string> {
  return new Promise((resolve) => {
    let buffered = Buffer.alloc(0);
    socket.on("data", (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      // Frame header: 3-byte length, type, flags, 4-byte stream id.
      while (buffered.length >= 9 && buffered.length >= 9 + buffered.readUIntBE(0, 3)) {
        const [type, flags] = [buffered[3], buffered[4] ?? 0];
        if (type === 0x4 && (flags & 0x1) !== 0) resolve("SETTINGS ACK");
        if (type === 0x7) resolve("GOAWAY");
        buffered = buffered.subarray(9 + buffered.readUIntBE(0, 3));
      }
    });
    socket.once("close", () => resolve("closed"));
  });
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
    const { port } = await listen();
    const body = Buffer.alloc(1024 * 1024, "b");
    expect(await http2Post(port, body)).toBe(`2.0 ${body.length}`);
    const response = await fetch(`http://127.0.0.1:${port}/`, { method: "POST", body });
    expect(await response.text()).toBe(`1.1 ${body.length}`);
  });

  it("routes by the first bytes even when they arrive in pieces", async () => {
    const served = await listen();
    // "G", then the rest: not the HTTP/2 preface, so HTTP/1.1 at the first byte.
    const http1 = await rawExchange(served, [
      "G",
      "ET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ]);
    expect(http1).toMatch(/^HTTP\/1\.1 200 OK\r\n[\s\S]*1\.1 0$/);
    // "P" could begin the preface, so the listener holds it; "OST" settles it
    // as HTTP/1.1, which must get both pieces, body intact.
    const post = await rawExchange(served, [
      "P",
      "OST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
    ]);
    expect(post).toMatch(/^HTTP\/1\.1 200 OK\r\n[\s\S]*1\.1 3$/);
    // The HTTP/2 preface split in two, then the client's SETTINGS: the server
    // acknowledges them only if it read the whole preface intact (else GOAWAY).
    const socket = await connect(served.port);
    const acked = settingsAck(socket);
    const settings = Buffer.from([0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
    await writeApart(served, socket, [
      "PRI * HT",
      Buffer.concat([Buffer.from("TP/2.0\r\n\r\nSM\r\n\r\n", "latin1"), settings]),
    ]);
    expect(await acked).toBe("SETTINGS ACK");
  });

  it("drops a connection that sends nothing", async () => {
    const served = await listen({ firstBytesTimeoutMs: 200 });
    const started = Date.now();
    expect(await rawExchange(served, [])).toBe("");
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it("enforces the HTTP/1.1 headers timeout (slowloris)", { timeout: 5_000 }, async () => {
    const served = await listen({
      http1: { headersTimeout: 300, requestTimeout: 500, connectionsCheckingInterval: 50 },
    });
    const reply = await rawExchange(served, ["GET / HTTP/1.1\r\nHost: x\r\n"]);
    expect(reply).toMatch(/^HTTP\/1\.1 408 /);
  });
});
