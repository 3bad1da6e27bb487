import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";
import type { HttpConnections } from "./http-connections.js";
import { MAX_CONCURRENT_STREAMS } from "./limits.js";

/** A request over HTTP/1.1 or HTTP/2. */
export type HttpRequest = http.IncomingMessage | http2.Http2ServerRequest;

/** A request handler that serves both HTTP/1.1 and HTTP/2 requests. */
export type HttpRequestHandler = (
  req: HttpRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
) => void;

/** First bytes of every HTTP/2 connection with prior knowledge (RFC 9113 3.4). */
const HTTP2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n", "latin1");

/** Tuning of the listener; the defaults suit production. */
export interface CleartextHttpListenerOptions {
  /** Options of the HTTP/1.1 server (headersTimeout, requestTimeout, keepAliveTimeout, ...). */
  readonly http1?: http.ServerOptions;
  /** A connection that sends nothing for this long is dropped. Default 10 s. */
  readonly firstBytesTimeoutMs?: number;
}

/**
 * One cleartext port for HTTP/1.1 and HTTP/2 (h2c with prior knowledge).
 *
 * Node has no server for both without TLS (ALPN picks the protocol there), so
 * a net server reads the first bytes of each connection: sockets that start
 * with the HTTP/2 preface go to an http2 server, all others to an http
 * server. That way `curl` and `fetch` (HTTP/1.1) and gRPC or Connect clients
 * on HTTP/2 share the port. The bytes read are put back with `unshift` before
 * the socket is handed over (both servers read what is already buffered).
 */
export function createCleartextHttpListener(
  handler: HttpRequestHandler,
  connections: HttpConnections,
  options: CleartextHttpListenerOptions = {},
): net.Server {
  const http1Server = http.createServer(options.http1 ?? {}, handler);
  // Node enforces headersTimeout and requestTimeout (slowloris protection)
  // with a checker that starts on 'listening'. This server never listens (it
  // is handed sockets), so the checker is started here.
  http1Server.emit("listening");
  const http2Server = http2.createServer(
    { settings: { maxConcurrentStreams: MAX_CONCURRENT_STREAMS } },
    handler,
  );
  http2Server.on("session", (session) => connections.acceptSession(session));
  const firstBytesTimeoutMs = options.firstBytesTimeoutMs ?? 10_000;
  const listener = net.createServer({ allowHalfOpen: true, noDelay: true }, (socket) => {
    connections.acceptSocket(socket);
    connections.markPending(socket);
    routeByFirstBytes(socket, firstBytesTimeoutMs, (isHttp2) => {
      connections.markRouted(socket);
      if (isHttp2) {
        http2Server.emit("connection", socket);
      } else {
        connections.acceptHttp1(socket);
        http1Server.emit("connection", socket);
      }
    });
  });
  // Stops the HTTP/1.1 server's timeout checker.
  listener.on("close", () => http1Server.close());
  return listener;
}

function routeByFirstBytes(
  socket: net.Socket,
  timeoutMs: number,
  route: (isHttp2: boolean) => void,
): void {
  let head = Buffer.alloc(0);
  const stop = (): void => {
    socket.off("readable", onReadable);
    socket.off("end", onEnd);
    socket.off("error", onError);
    socket.setTimeout(0);
  };
  const onEnd = (): void => {
    stop();
    socket.destroy();
  };
  const onError = (): void => {
    stop();
    socket.destroy();
  };
  function onReadable(): void {
    for (let chunk: unknown = socket.read(); chunk !== null; chunk = socket.read()) {
      if (Buffer.isBuffer(chunk)) head = Buffer.concat([head, chunk]);
    }
    const compared = Math.min(head.length, HTTP2_PREFACE.length);
    const prefaceSoFar = head.subarray(0, compared).equals(HTTP2_PREFACE.subarray(0, compared));
    if (prefaceSoFar && head.length < HTTP2_PREFACE.length) return;
    stop();
    socket.unshift(head);
    route(prefaceSoFar);
  }
  socket.on("readable", onReadable);
  socket.once("end", onEnd);
  socket.on("error", onError);
  socket.setTimeout(timeoutMs, () => socket.destroy());
}
