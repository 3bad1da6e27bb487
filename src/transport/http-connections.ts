import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse, Http2Session } from "node:http2";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";

/**
 * The connections of a Node HTTP server that speaks HTTP/1.1 and HTTP/2, kept
 * so it can close gracefully: Node's `server.close()` only stops accepting,
 * and idle keep-alive connections would hold it open until they time out.
 *
 * Graceful close sends GOAWAY on HTTP/2 sessions (streams in flight finish),
 * ends idle HTTP/1.1 connections at once and busy ones after their response,
 * and drops connections that have not sent a byte yet. Force close destroys
 * everything. An HTTP/2 session with no stream open for `maxConnectionIdleMs`
 * is closed (GOAWAY); HTTP/1.1 keep-alive has Node's own timeout.
 */
export interface HttpConnectionsOptions {
  /** Default: no idle timeout. */
  readonly maxConnectionIdleMs?: number;
}

export class HttpConnections {
  readonly #sockets = new Set<Socket>();
  readonly #pending = new Set<Socket>();
  /** HTTP/1.1 connections and their requests in flight. */
  readonly #http1 = new Map<Duplex, number>();
  readonly #sessions = new Set<Http2Session>();
  #closing = false;
  readonly #maxIdleMs: number | undefined;

  constructor(options: HttpConnectionsOptions = {}) {
    this.#maxIdleMs = options.maxConnectionIdleMs;
  }

  /** A TCP connection was accepted. */
  acceptSocket(socket: Socket): void {
    this.#sockets.add(socket);
    socket.once("close", () => {
      this.#sockets.delete(socket);
      this.#pending.delete(socket);
    });
  }

  /** A connection whose protocol is not known yet (it has sent no bytes). */
  markPending(socket: Socket): void {
    this.#pending.add(socket);
  }

  /** The connection's protocol is known and it has been handed to a server. */
  markRouted(socket: Socket): void {
    this.#pending.delete(socket);
  }

  /** A connection speaks HTTP/1.1 (the TCP socket, or the TLS socket over it). */
  acceptHttp1(socket: Duplex): void {
    if (this.#closing) {
      socket.end();
      return;
    }
    this.#http1.set(socket, 0);
    socket.once("close", () => this.#http1.delete(socket));
  }

  /** An HTTP/2 session started. */
  acceptSession(session: Http2Session): void {
    if (this.#closing) {
      session.close();
      return;
    }
    this.#sessions.add(session);
    const idle = this.#closeWhenIdle(session);
    session.once("close", () => {
      if (idle !== undefined) clearTimeout(idle);
      this.#sessions.delete(session);
    });
  }

  /**
   * One timer per session, refreshed rather than remade, so a busy session
   * costs no timer per call.
   */
  #closeWhenIdle(session: Http2Session): NodeJS.Timeout | undefined {
    const maxIdleMs = this.#maxIdleMs;
    if (maxIdleMs === undefined) return undefined;
    let open = 0;
    let idleSince = performance.now();
    const timer = setTimeout(function check() {
      if (open > 0 || session.closed) return;
      if (performance.now() - idleSince >= maxIdleMs) session.close();
      else timer.refresh();
    }, maxIdleMs);
    timer.unref();
    session.on("stream", (stream: Duplex) => {
      open++;
      stream.once("close", () => {
        open--;
        if (open === 0) {
          idleSince = performance.now();
          timer.refresh();
        }
      });
    });
    return timer;
  }

  /** Counts an HTTP/1.1 request until its response closes; no-op for HTTP/2. */
  trackRequest(
    req: IncomingMessage | Http2ServerRequest,
    res: ServerResponse | Http2ServerResponse,
  ): void {
    if (req.httpVersionMajor !== 1) return;
    const socket = req.socket;
    this.#http1.set(socket, (this.#http1.get(socket) ?? 0) + 1);
    // Arrived while closing: answer it, then let Node close the connection.
    if (this.#closing && !res.headersSent) res.setHeader("connection", "close");
    res.once("close", () => {
      const inFlight = (this.#http1.get(socket) ?? 1) - 1;
      if (this.#http1.has(socket)) this.#http1.set(socket, inFlight);
      if (this.#closing && inFlight === 0) socket.end();
    });
  }

  /** Starts a graceful close; connections then close as their calls finish. */
  closeGracefully(): void {
    this.#closing = true;
    for (const socket of this.#pending) socket.destroy();
    for (const session of this.#sessions) session.close();
    for (const [socket, inFlight] of this.#http1) {
      if (inFlight === 0) socket.end();
    }
  }

  /** Closes every connection now. */
  destroyAll(): void {
    this.#closing = true;
    for (const session of this.#sessions) session.destroy();
    for (const socket of this.#http1.keys()) socket.destroy();
    for (const socket of this.#sockets) socket.destroy();
  }
}
