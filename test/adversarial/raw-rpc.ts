import * as http from "node:http";
import * as http2 from "node:http2";

/**
 * Raw RPCs for the adversarial tests: arbitrary request bytes sent over each
 * protocol the servers speak, without any client library that would refuse
 * to send them, and the answer read back as a gRPC code and message.
 */

/** How the bytes go out. */
export type Wire =
  /** gRPC over HTTP/2 (the grpc-js port, or the Connect port over h2c). */
  | "grpc"
  /** gRPC over HTTP/1.1 with chunked trailers (Connect port). */
  | "grpc-http1"
  /** gRPC-Web, binary, HTTP/1.1. */
  | "grpc-web"
  /** gRPC-Web, JSON, HTTP/1.1. */
  | "grpc-web-json"
  /** Connect unary, binary, HTTP/1.1 or HTTP/2. */
  | "connect-proto"
  | "connect-proto-h2"
  /** Connect unary, JSON, HTTP/1.1. */
  | "connect-json"
  /** Connect streaming (server streaming methods), binary or JSON, HTTP/1.1. */
  | "connect-stream-proto"
  | "connect-stream-json";

export interface RawResult {
  /** gRPC status code (0 OK). */
  readonly code: number;
  readonly message: string;
}

export interface RawCall {
  readonly port: number;
  readonly wire: Wire;
  /** e.g. "/windlass.memory.v1.MemoryService/Add" */
  readonly path: string;
  /** The message bytes; the envelope is added for enveloped protocols. */
  readonly payload: Uint8Array;
  readonly token?: string;
  /** Sent as the protocol's timeout header. */
  readonly timeoutMs?: number;
  /** Upper bound on the whole exchange (a safety net, not the behaviour). */
  readonly giveUpMs?: number;
  /** Flags byte of the envelope (bit 0: compressed). Default 0. */
  readonly envelopeFlags?: number;
  /** Extra request headers. */
  readonly headers?: Record<string, string>;
}

const CONNECT_CODES = [
  "ok",
  "canceled",
  "unknown",
  "invalid_argument",
  "deadline_exceeded",
  "not_found",
  "already_exists",
  "permission_denied",
  "resource_exhausted",
  "failed_precondition",
  "aborted",
  "out_of_range",
  "unimplemented",
  "internal",
  "unavailable",
  "data_loss",
  "unauthenticated",
];

export function codeFromConnect(name: string): number {
  const i = CONNECT_CODES.indexOf(name);
  return i === -1 ? 2 : i;
}

export function envelope(payload: Uint8Array, flags = 0): Buffer {
  const out = Buffer.alloc(5 + payload.byteLength);
  out[0] = flags;
  out.writeUInt32BE(payload.byteLength, 1);
  out.set(payload, 5);
  return out;
}

interface HttpReply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly trailers: Record<string, string | string[] | undefined>;
  readonly body: Buffer;
}

/** Sends one raw RPC and reads back its status. */
export async function rawCall(call: RawCall): Promise<RawResult> {
  const headers: Record<string, string> = { ...call.headers };
  if (call.token !== undefined) headers.authorization = `Bearer ${call.token}`;
  const giveUpMs = call.giveUpMs ?? 10_000;
  switch (call.wire) {
    case "grpc":
    case "grpc-http1": {
      headers["content-type"] = "application/grpc+proto";
      headers.te = "trailers";
      if (call.timeoutMs !== undefined) headers["grpc-timeout"] = `${call.timeoutMs}m`;
      const body = envelope(call.payload, call.envelopeFlags);
      const reply =
        call.wire === "grpc"
          ? await h2Request(call.port, call.path, headers, body, giveUpMs)
          : await h1Request(call.port, call.path, headers, body, giveUpMs);
      return grpcStatus(reply);
    }
    case "grpc-web":
    case "grpc-web-json": {
      headers["content-type"] =
        call.wire === "grpc-web" ? "application/grpc-web+proto" : "application/grpc-web+json";
      headers["x-grpc-web"] = "1";
      if (call.timeoutMs !== undefined) headers["grpc-timeout"] = `${call.timeoutMs}m`;
      const reply = await h1Request(
        call.port,
        call.path,
        headers,
        envelope(call.payload, call.envelopeFlags),
        giveUpMs,
      );
      return grpcWebStatus(reply);
    }
    case "connect-proto":
    case "connect-proto-h2":
    case "connect-json": {
      headers["content-type"] =
        call.wire === "connect-json" ? "application/json" : "application/proto";
      headers["connect-protocol-version"] = "1";
      if (call.timeoutMs !== undefined) headers["connect-timeout-ms"] = String(call.timeoutMs);
      const body = Buffer.from(call.payload);
      const reply =
        call.wire === "connect-proto-h2"
          ? await h2Request(call.port, call.path, headers, body, giveUpMs)
          : await h1Request(call.port, call.path, headers, body, giveUpMs);
      return connectUnaryStatus(reply);
    }
    case "connect-stream-proto":
    case "connect-stream-json": {
      headers["content-type"] =
        call.wire === "connect-stream-proto"
          ? "application/connect+proto"
          : "application/connect+json";
      headers["connect-protocol-version"] = "1";
      if (call.timeoutMs !== undefined) headers["connect-timeout-ms"] = String(call.timeoutMs);
      const reply = await h1Request(
        call.port,
        call.path,
        headers,
        envelope(call.payload, call.envelopeFlags),
        giveUpMs,
      );
      return connectStreamStatus(reply);
    }
  }
}

function header(
  h: Record<string, string | string[] | undefined>,
  name: string,
): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}

function grpcStatus(reply: HttpReply): RawResult {
  const code = header(reply.trailers, "grpc-status") ?? header(reply.headers, "grpc-status");
  const message = header(reply.trailers, "grpc-message") ?? header(reply.headers, "grpc-message");
  if (code === undefined) {
    throw new Error(`no grpc-status (HTTP ${reply.status}): ${reply.body.toString("latin1")}`);
  }
  return { code: Number(code), message: decodeURIComponent(message ?? "") };
}

function grpcWebStatus(reply: HttpReply): RawResult {
  const inHeaders = header(reply.headers, "grpc-status");
  if (inHeaders !== undefined) return grpcStatus(reply);
  for (const frame of frames(reply.body)) {
    if ((frame.flags & 0x80) === 0) continue;
    const fields: Record<string, string> = {};
    for (const line of frame.data.toString("utf8").split("\r\n")) {
      const colon = line.indexOf(":");
      if (colon > 0)
        fields[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
    return {
      code: Number(fields["grpc-status"]),
      message: decodeURIComponent(fields["grpc-message"] ?? ""),
    };
  }
  throw new Error(`no gRPC-Web trailers (HTTP ${reply.status})`);
}

function connectUnaryStatus(reply: HttpReply): RawResult {
  if (reply.status === 200) return { code: 0, message: "" };
  const text = reply.body.toString("utf8");
  let parsed: { code?: string; message?: string };
  try {
    parsed = JSON.parse(text) as { code?: string; message?: string };
  } catch {
    throw new Error(`HTTP ${reply.status} without a Connect error: ${text}`);
  }
  return { code: codeFromConnect(parsed.code ?? ""), message: parsed.message ?? "" };
}

function connectStreamStatus(reply: HttpReply): RawResult {
  if (reply.status !== 200) return connectUnaryStatus(reply);
  for (const frame of frames(reply.body)) {
    if ((frame.flags & 0x02) === 0) continue;
    const end = JSON.parse(frame.data.toString("utf8")) as {
      error?: { code?: string; message?: string };
    };
    if (end.error === undefined) return { code: 0, message: "" };
    return { code: codeFromConnect(end.error.code ?? ""), message: end.error.message ?? "" };
  }
  throw new Error("Connect stream without an end-of-stream message");
}

function* frames(body: Buffer): Generator<{ flags: number; data: Buffer }> {
  let at = 0;
  while (at + 5 <= body.length) {
    const flags = body[at] as number;
    const size = body.readUInt32BE(at + 1);
    yield { flags, data: body.subarray(at + 5, at + 5 + size) };
    at += 5 + size;
  }
}

function h2Request(
  port: number,
  path: string,
  headers: Record<string, string>,
  body: Buffer,
  giveUpMs: number,
): Promise<HttpReply> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    const timer = setTimeout(() => {
      session.destroy();
      reject(new Error(`no answer within ${giveUpMs} ms`));
    }, giveUpMs);
    session.on("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
    const stream = session.request({ ":method": "POST", ":path": path, ...headers });
    let responseHeaders: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    stream.on("response", (h) => {
      responseHeaders = h;
    });
    stream.on("trailers", (t) => {
      trailers = t;
    });
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("error", (err) => {
      clearTimeout(timer);
      session.close();
      reject(err);
    });
    stream.on("close", () => {
      clearTimeout(timer);
      session.close();
      resolve({
        status: Number(responseHeaders[":status"] ?? 0),
        headers: responseHeaders,
        trailers,
        body: Buffer.concat(chunks),
      });
    });
    stream.end(body);
  });
}

function h1Request(
  port: number,
  path: string,
  headers: Record<string, string>,
  body: Buffer,
  giveUpMs: number,
): Promise<HttpReply> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: "127.0.0.1",
        port,
        path,
        method: "POST",
        headers: { ...headers, "content-length": String(body.length) },
        agent: false,
        timeout: giveUpMs,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            trailers: res.trailers,
            body: Buffer.concat(chunks),
          }),
        );
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error(`no answer within ${giveUpMs} ms`)));
    req.on("error", reject);
    req.end(body);
  });
}
