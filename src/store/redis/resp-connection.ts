import { EventEmitter } from "node:events";
import * as net from "node:net";
import * as tls from "node:tls";
import { AwaitingQueue, execReplies, IGNORED } from "./awaiting-replies.js";
import type { RedisConnection } from "./connection.js";
import type { RedisEndpoint } from "./redis-url.js";
import { CommandWriter, RespReader } from "./resp.js";

/**
 * The single-node Redis connection: one socket, commands pipelined, RESP2
 * (resp.ts). It stands in for node-redis's client on redis:// and rediss://
 * because the store's hot path is one script call per Add and one read per
 * Get, and node-redis spent more CPU per command than the rest of the
 * store's own code did: a generic reply decoder and a command queue built
 * for every option it offers. Here every command sent in one turn of the
 * event loop leaves in one write, and a reply costs a parse and a resolve. Sentinel and Cluster deployments keep
 * node-redis's clients (connection.ts, cluster.ts), which follow failovers
 * and slot moves.
 *
 * What it keeps of node-redis's behaviour, which the store relies on:
 * - No offline queue: while not connected, a command fails at once (the
 *   store answers unavailable) and the connection reconnects in the
 *   background with the given backoff, emitting "error" for each failure
 *   and "ready" each time it is connected and authenticated again.
 * - A bound on the commands awaiting replies: past it a command fails at
 *   once, so a hung Redis (SIGSTOP, a black-holed network) fills no memory.
 * - connect() resolves at the first "ready" (retrying meanwhile, unless
 *   reconnecting is off: then the first failure rejects it), close() lets
 *   the replies awaited arrive, destroy() fails them at once.
 * - Replies: strings, numbers, null, arrays; an error reply rejects with
 *   node-redis's ErrorReply.
 * Unlike node-redis, the handshake (AUTH and SELECT, or a PING) must also
 * finish within the connect timeout, so a Redis that accepts and then hangs
 * is retried.
 */

export interface RespConnectionOptions {
  readonly endpoint: RedisEndpoint;
  /** Longest a connection, with its AUTH and SELECT, may take before it is retried. */
  readonly connectTimeoutMs: number;
  /** Delay before reconnect number `retries` (from 0); false: never reconnect. */
  readonly reconnect: ((retries: number) => number) | false;
  /** Commands awaiting replies at most; past it a command fails at once. */
  readonly maxQueued: number;
  /**
   * More options of a rediss:// connection's TLS (a test's CA). The server
   * passes none: a certificate is checked against Node's CAs and any in
   * NODE_EXTRA_CA_CERTS, as node-redis's client did.
   */
  readonly tlsOptions?: tls.ConnectionOptions;
}

/** A command refused because the connection is not connected (or was closed). */
export class ConnectionNotReady extends Error {
  override readonly name = "ConnectionNotReady";
}

/** A command refused because too many await replies. */
export class CommandQueueFull extends Error {
  override readonly name = "CommandQueueFull";
}

/** A command whose connection closed before its reply came. */
export class ConnectionLost extends Error {
  override readonly name = "ConnectionLost";
}

/** The socket of one connection attempt and what belongs to it alone. */
interface Link {
  readonly socket: net.Socket;
  readonly awaiting: AwaitingQueue;
  /** Commands encoded since the last write. */
  readonly out: CommandWriter;
  ready: boolean;
  /** Set by close(): end the socket once every reply has come. */
  endWhenDone: boolean;
  /** Resolves when the socket has closed (what close() returns). */
  readonly socketClosed: Promise<void>;
  /** Its commands have been failed and the connection told: nothing more to do for it. */
  done: boolean;
  /** Why it failed, for the commands it fails. */
  failure: Error | undefined;
}

export class RespConnection extends EventEmitter implements RedisConnection {
  readonly #options: RespConnectionOptions;
  #open = false;
  #link: Link | undefined;
  #retries = 0;
  #retryTimer: NodeJS.Timeout | undefined;
  /** connect()'s promise, until the first "ready" (or a failure that ends it). */
  #connecting: { resolve(): void; reject(err: Error): void } | undefined;
  /** Links with commands encoded and not yet written. */
  readonly #toFlush: Link[] = [];
  #flushScheduled = false;

  constructor(options: RespConnectionOptions) {
    super();
    this.#options = options;
  }

  /** From connect() until close() or destroy(), reconnecting included (as node-redis's isOpen). */
  get isOpen(): boolean {
    return this.#open;
  }

  /** Connected and authenticated: commands are sent. */
  get isReady(): boolean {
    return this.#link?.ready === true;
  }

  /** Commands sent and awaiting replies. */
  get awaitingReplies(): number {
    return this.#link?.awaiting.length ?? 0;
  }

  /** Another connection to the same endpoint with the same options, not yet connected. */
  duplicate(): RespConnection {
    return new RespConnection(this.#options);
  }

  connect(): Promise<void> {
    if (this.#open) return Promise.reject(new Error("redis connection: already open"));
    if (this.#link !== undefined) {
      return Promise.reject(new Error("redis connection: still closing"));
    }
    this.#open = true;
    this.#retries = 0;
    const connected = new Promise<void>((resolve, reject) => {
      this.#connecting = { resolve, reject };
    });
    this.#dial();
    return connected;
  }

  sendCommand(args: readonly string[]): Promise<unknown> {
    const link = this.#linkFor(1);
    return link instanceof Error ? Promise.reject(link) : this.#send(link, args);
  }

  sendAtomic(commands: readonly (readonly string[])[]): Promise<unknown[]> {
    const link = this.#linkFor(commands.length + 2);
    if (link instanceof Error) return Promise.reject(link);
    // MULTI's +OK and each +QUEUED say nothing EXEC does not: an error
    // queueing a command makes EXEC fail (EXECABORT), and a command that
    // fails when run is an error in EXEC's reply.
    this.#queueIgnored(link, ["MULTI"]);
    for (const command of commands) this.#queueIgnored(link, command);
    return this.#send(link, ["EXEC"]).then(execReplies);
  }

  /** The ready link that can take `count` more commands, or why there is none. */
  #linkFor(count: number): Link | Error {
    const link = this.#link;
    if (link === undefined || !link.ready) {
      return new ConnectionNotReady(
        this.#open ? "redis connection: not connected (reconnecting)" : "redis connection: closed",
      );
    }
    if (link.awaiting.length + count > this.#options.maxQueued) {
      return new CommandQueueFull(
        `redis connection: ${this.#options.maxQueued} commands already await replies`,
      );
    }
    return link;
  }

  /** Lets the replies awaited arrive, then closes; no reconnect. */
  close(): Promise<void> {
    this.#stopReconnecting(new ConnectionNotReady("redis connection: closed before it was ready"));
    const link = this.#link;
    if (link === undefined) return Promise.resolve();
    if (link.endWhenDone) return link.socketClosed; // a second close(): the first goes on
    if (!link.ready) {
      this.#fail(link, new ConnectionNotReady("redis connection: closed"), false);
    } else {
      link.ready = false;
      link.endWhenDone = true;
      this.#write(link);
      if (link.awaiting.length === 0) link.socket.end();
    }
    return link.socketClosed;
  }

  /** Closes now: every command awaiting a reply fails. */
  destroy(): void {
    this.#stopReconnecting(new ConnectionNotReady("redis connection: destroyed"));
    const link = this.#link;
    if (link !== undefined) {
      this.#fail(link, new ConnectionLost("redis connection: destroyed"), false);
    }
  }

  #stopReconnecting(why: Error): void {
    this.#open = false;
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    const connecting = this.#connecting;
    this.#connecting = undefined;
    connecting?.reject(why);
  }

  #send(link: Link, args: readonly string[]): Promise<unknown> {
    if (link.out.empty) this.#toFlush.push(link);
    link.out.write(args);
    if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      setImmediate(this.#flush);
    }
    return new Promise<unknown>((resolve, reject) => {
      link.awaiting.push({ resolve, reject });
    });
  }

  /** Sends a command whose reply is not wanted (it still takes its place in the queue). */
  #queueIgnored(link: Link, args: readonly string[]): void {
    if (link.out.empty) this.#toFlush.push(link);
    link.out.write(args);
    link.awaiting.push(IGNORED);
  }

  /** Writes what each link encoded in this turn of the event loop, in one write per link. */
  readonly #flush = (): void => {
    this.#flushScheduled = false;
    const links = this.#toFlush.splice(0);
    for (const link of links) this.#write(link);
  };

  #write(link: Link): void {
    if (link.out.empty || link.failure !== undefined) return;
    link.socket.write(link.out.take());
  }

  #dial(): void {
    const { endpoint, connectTimeoutMs } = this.#options;
    const socket = endpoint.tls
      ? tls.connect({
          ...this.#options.tlsOptions,
          host: endpoint.host,
          port: endpoint.port,
          ...(net.isIP(endpoint.host) === 0 ? { servername: endpoint.host } : {}),
        })
      : net.connect({ host: endpoint.host, port: endpoint.port });
    socket.setNoDelay(true);
    socket.setKeepAlive(true, 5000);
    const link: Link = {
      socket,
      awaiting: new AwaitingQueue(),
      out: new CommandWriter(),
      ready: false,
      endWhenDone: false,
      socketClosed: new Promise<void>((resolve) => socket.once("close", () => resolve())),
      done: false,
      failure: undefined,
    };
    this.#link = link;
    const timer = setTimeout(() => {
      this.#fail(link, new Error(`redis connection: not ready within ${connectTimeoutMs} ms`));
    }, connectTimeoutMs);
    const reader = new RespReader((reply) => this.#reply(link, reply));
    socket.on("data", (chunk: Buffer) => {
      try {
        reader.push(chunk);
      } catch (err) {
        this.#fail(link, err instanceof Error ? err : new Error(String(err)));
      }
    });
    socket.once(endpoint.tls ? "secureConnect" : "connect", () => {
      this.#handshake(link).then(
        () => {
          clearTimeout(timer);
          if (this.#link !== link || link.failure !== undefined) return;
          link.ready = true;
          this.#retries = 0;
          const connecting = this.#connecting;
          this.#connecting = undefined;
          connecting?.resolve();
          this.emit("ready");
        },
        (err: unknown) => this.#fail(link, err instanceof Error ? err : new Error(String(err))),
      );
    });
    socket.on("error", (err) => {
      if (link.failure === undefined) link.failure = err;
      this.#emitError(err);
    });
    socket.once("close", () => {
      clearTimeout(timer);
      // Closed by Redis or on the way (its timeout, CLIENT KILL, a restart,
      // a proxy): a failure like any other, reported so that whoever holds
      // this connection (a WAIT session) stops using it.
      if (link.failure === undefined && !link.endWhenDone) {
        link.failure = new ConnectionLost("redis connection: closed by the server");
        this.#emitError(link.failure);
      }
      this.#closed(link);
    });
  }

  /**
   * AUTH (as node-redis: a user without a password sends an empty one) and
   * SELECT, pipelined, before any other command; else a PING, so that a
   * connection is ready only once Redis has answered (a frozen Redis, or a
   * proxy whose Redis is down, accepts connections and says nothing).
   */
  async #handshake(link: Link): Promise<void> {
    const { username, password, database } = this.#options.endpoint;
    const steps: Promise<unknown>[] = [];
    if (username !== undefined) steps.push(this.#send(link, ["AUTH", username, password ?? ""]));
    else if (password !== undefined) steps.push(this.#send(link, ["AUTH", password]));
    if (database !== 0) steps.push(this.#send(link, ["SELECT", String(database)]));
    if (steps.length === 0) steps.push(this.#send(link, ["PING"]));
    await Promise.all(steps);
  }

  #reply(link: Link, reply: unknown): void {
    const awaiting = link.awaiting.shift();
    if (awaiting === undefined) {
      // Redis says why it drops a connection it just accepted (max clients, protected mode).
      throw reply instanceof Error
        ? reply
        : new Error("redis connection: a reply came for no command");
    }
    if (reply instanceof Error) awaiting.reject(reply);
    else awaiting.resolve(reply);
    if (link.endWhenDone && link.awaiting.length === 0) link.socket.end();
  }

  /** Ends the link now: its commands fail with `err` (reported as "error" unless asked not to). */
  #fail(link: Link, err: Error, report = true): void {
    if (link.failure === undefined) {
      link.failure = err;
      if (report) this.#emitError(err);
    }
    link.socket.destroy();
    this.#closed(link);
  }

  /** The link's socket closed (or was failed): its commands fail, and the connection reconnects. */
  #closed(link: Link): void {
    if (link.done) return;
    link.done = true;
    link.ready = false;
    link.out.clear();
    const why = new ConnectionLost(
      `redis connection closed${link.failure === undefined ? "" : ` (${link.failure.message})`}`,
      { cause: link.failure },
    );
    for (const awaiting of link.awaiting.drain()) awaiting.reject(why);
    if (this.#link !== link) return;
    this.#link = undefined;
    if (!this.#open) return;
    if (this.#options.reconnect === false) {
      this.#stopReconnecting(link.failure ?? why);
      return;
    }
    const delay = this.#options.reconnect(this.#retries++);
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      if (this.#open && this.#link === undefined) this.#dial();
    }, delay);
  }

  #emitError(err: Error): void {
    // An "error" with no listener would throw; the store always listens.
    if (this.listenerCount("error") > 0) this.emit("error", err);
  }
}
