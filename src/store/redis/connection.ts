import { createClient, createSentinel } from "redis";
import { parseRedisSentinelUrl } from "../../config.js";
import { MemoryError } from "../../core/errors.js";

/**
 * The structural part of a node-redis client (or sentinel client) the Redis
 * store uses. Raw `sendCommand` with RESP2 replies (strings, integers, null,
 * arrays) keeps reply parsing in one place and independent of node-redis's
 * typed wrappers.
 */
export interface RedisConnection {
  readonly isOpen: boolean;
  sendCommand(args: readonly string[]): Promise<unknown>;
  connect(): Promise<unknown>;
  close(): Promise<void>;
  destroy(): void;
  on(event: "error", listener: (err: Error) => void): unknown;
}

/** The store's connections to one Redis deployment (a single node, or a primary behind Sentinel). */
export interface RedisClients {
  /** "host:port", or the sentinel master's name and sentinels: never a password. */
  readonly target: string;
  /** Every command but blocking reads and acknowledged writes, pipelined. */
  readonly main: RedisConnection;
  /** A new connection of the same kind, for one blocking reader (XREAD BLOCK). */
  duplicate(): RedisConnection;
  /** Calls `listener` each time `main` is (re)connected and ready, to a node or a promoted one. */
  onReady(listener: () => void): void;
  /**
   * A new single-socket connection to the current primary (never
   * reconnecting by itself, so one client object is one server session:
   * what WAIT needs; see ReplicaConfirmation).
   */
  openPrimarySession(): RedisConnection;
}

const SENTINEL_SCHEME = "redis+sentinel://";

/**
 * Commands one connection holds waiting for replies. A Redis that hangs
 * (SIGSTOP, a black-holed network) answers nothing while calls keep coming;
 * past this they fail at once (unavailable) instead of filling memory.
 */
const MAX_QUEUED_COMMANDS = 10_000;

function reconnectDelay(retries: number): number {
  return Math.min(2000, 50 * 2 ** Math.min(retries, 10)) + Math.floor(Math.random() * 100);
}

/** Opens (but does not connect) the clients of a redis://, rediss:// or redis+sentinel:// URL. */
export function redisClients(url: string): RedisClients {
  return url.startsWith(SENTINEL_SCHEME) ? sentinelClients(url) : singleNodeClients(url);
}

function singleNodeClients(url: string): RedisClients {
  const options = {
    url,
    RESP: 2,
    disableOfflineQueue: true,
    commandsQueueMaxLength: MAX_QUEUED_COMMANDS,
    maintNotifications: "disabled",
    socket: { connectTimeout: 1000, reconnectStrategy: reconnectDelay },
  } as const;
  const main = createClient(options);
  return {
    target: describeUrl(url),
    main,
    duplicate: () => main.duplicate(),
    onReady: (listener) => {
      main.on("ready", listener);
    },
    openPrimarySession: () =>
      createClient({ ...options, socket: { connectTimeout: 1000, reconnectStrategy: false } }),
  };
}

/**
 * node-redis's sentinel client: it asks the sentinels for the primary,
 * subscribes to their failover announcements and moves its connections to
 * the promoted replica. The userinfo's credentials are for the Redis nodes.
 */
function sentinelClients(url: string): RedisClients {
  const parsed = parseRedisSentinelUrl(url);
  const nodeOptions = {
    RESP: 2,
    disableOfflineQueue: true,
    commandsQueueMaxLength: MAX_QUEUED_COMMANDS,
    maintNotifications: "disabled",
    ...(parsed.username === undefined ? {} : { username: parsed.username }),
    ...(parsed.password === undefined ? {} : { password: parsed.password }),
    socket: { connectTimeout: 1000, reconnectStrategy: reconnectDelay },
  } as const;
  const open = (): SentinelClient =>
    createSentinel({
      name: parsed.masterName,
      sentinelRootNodes: parsed.sentinels,
      RESP: 2,
      nodeClientOptions: nodeOptions,
      sentinelClientOptions: { socket: { connectTimeout: 1000 } },
      // Errors of the inner clients reach the store's "error" listener (start-up reports the last).
      passthroughClientErrorEvents: true,
    });
  const main = sentinelLink(open());
  return {
    target: `sentinel master ${parsed.masterName} via ${parsed.sentinels.map((s) => `${s.host}:${s.port}`).join(",")}`,
    main: main.link,
    duplicate: () => sentinelLink(open()).link,
    onReady: (listener) => {
      main.sentinel.on("ready", listener);
    },
    openPrimarySession: () => {
      // Where the sentinel client last found the primary; a stale address
      // fails (refused, or READONLY on a demoted node), and the next session asks again.
      const primary = main.sentinel.getMasterNode();
      return createClient({
        ...nodeOptions,
        socket: {
          host: primary?.host ?? "primary-not-known-yet.invalid",
          port: primary?.port ?? 6379,
          connectTimeout: 1000,
          reconnectStrategy: false,
        },
      });
    },
  };
}

/** The part of node-redis's sentinel client used here. */
interface SentinelClient {
  readonly isOpen: boolean;
  sendCommand(isReadonly: boolean, args: string[]): Promise<unknown>;
  connect(): Promise<unknown>;
  close(): Promise<void>;
  destroy(): Promise<void>;
  on(event: "error", listener: (err: unknown) => void): unknown;
  on(event: "ready", listener: () => void): unknown;
  getMasterNode(): { host: string; port: number } | undefined;
}

function sentinelLink(sentinel: SentinelClient) {
  const link: RedisConnection = {
    get isOpen() {
      return sentinel.isOpen;
    },
    sendCommand: (args) => sentinel.sendCommand(false, [...args]),
    connect: () => sentinel.connect(),
    close: () => sentinel.close(),
    destroy: () => {
      sentinel.destroy().catch(() => {});
    },
    on: (event, listener) =>
      // The sentinel client also emits plain strings as errors.
      sentinel.on(event, (err: unknown) =>
        listener(err instanceof Error ? err : new Error(String(err))),
      ),
  };
  return { link, sentinel };
}

/** "host:port" of a redis URL, never its credentials. */
function describeUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || "6379"}`;
  } catch {
    throw new Error("redis store: the URL is not a valid redis:// or rediss:// URL");
  }
}

/** How the store sends one command on a given connection (its timeout and closed check). */
export type SendOn = (
  link: RedisConnection,
  args: readonly string[],
  timeoutMs: number,
) => Promise<unknown>;

/** The connection an acknowledged write is sent on, and how to confirm it. */
export interface AcknowledgedWrite {
  readonly link: RedisConnection;
  /** Resolves once enough replicas have every write sent on `link` so far; unavailable otherwise. */
  confirm(): Promise<void>;
}

export interface ReplicaConfirmationOptions {
  /** Replicas that must confirm (WAIT numreplicas), at least 1. */
  replicas: number;
  /** WAIT's timeout. */
  waitMs: number;
  /** Room for the round trips on top of waitMs. */
  commandTimeoutMs: number;
  /** Key of the fence counter (see confirm). */
  fenceKey: string;
}

/**
 * Acknowledged writes when replicas must confirm them. WAIT blocks the
 * connection it runs on and covers only that connection's writes, so the
 * writes that need it go on a connection of their own (reads never queue
 * behind a WAIT), and one WAIT confirms every write sent before it: an Add
 * finishing while a WAIT is in flight joins the single next one, so at most
 * two WAITs exist at a time however many Adds run.
 *
 * Each WAIT follows an INCR of a fence key on the same connection, so it
 * waits for the primary's replication offset as of now, which is past every
 * write whose reply came before (a replayed Add wrote nothing on this
 * connection, but its first attempt, maybe through another connection or
 * another replica of the service, must be confirmed too). The connection
 * never reconnects by itself: a write and its WAIT that ran on different
 * sessions (a reconnect, a failover in between) would confirm nothing.
 * When the session ends, its writes fail as unavailable and the next write
 * opens a new one.
 */
export class ReplicaConfirmation {
  readonly #options: ReplicaConfirmationOptions;
  readonly #open: () => RedisConnection;
  readonly #send: SendOn;
  #session: Session | undefined;
  /** The current session, once connected. */
  #ready: Promise<Session> | undefined;
  #closed = false;

  constructor(open: () => RedisConnection, send: SendOn, options: ReplicaConfirmationOptions) {
    this.#open = open;
    this.#send = send;
    this.#options = options;
  }

  /** The connection to send an acknowledged write on (connected), and its confirmation. */
  async begin(): Promise<AcknowledgedWrite> {
    const session = await this.#current();
    return { link: session.link, confirm: () => this.#confirm(session) };
  }

  async close(): Promise<void> {
    this.#closed = true;
    const session = this.#session;
    this.#session = undefined;
    if (session !== undefined) this.#end(session);
  }

  async #current(): Promise<Session> {
    if (this.#closed) throw new MemoryError("unavailable", "the store is closed");
    const existing = this.#session;
    if (existing !== undefined && !existing.ended && this.#ready !== undefined) return this.#ready;
    const opened = this.#open();
    // Any failed command but NOSCRIPT (answered by EVAL on the same session)
    // ends the session: a READONLY means it reached a demoted primary, and
    // the next session asks where the primary is now.
    const link: RedisConnection = {
      get isOpen() {
        return opened.isOpen;
      },
      sendCommand: (args) =>
        opened.sendCommand(args).catch((err: unknown) => {
          if (!(err instanceof Error && err.message.startsWith("NOSCRIPT"))) this.#end(session);
          throw err;
        }),
      connect: () => opened.connect(),
      close: () => opened.close(),
      destroy: () => opened.destroy(),
      on: (event, listener) => opened.on(event, listener),
    };
    const session: Session = { link, ended: false, inFlight: undefined, next: undefined };
    link.on("error", () => this.#end(session));
    const ready = link.connect().then(
      () => session,
      (err: unknown) => {
        this.#end(session);
        throw err;
      },
    );
    ready.catch(() => {});
    this.#session = session;
    this.#ready = ready;
    return ready;
  }

  #end(session: Session): void {
    if (session.ended) return;
    session.ended = true;
    if (this.#session === session) this.#session = undefined;
    session.link.destroy();
  }

  async #confirm(session: Session): Promise<void> {
    // A WAIT in flight was sent before this write's reply arrived: it may not cover it.
    let wait: Promise<number>;
    if (session.inFlight === undefined) {
      wait = this.#startWait(session);
    } else {
      session.next ??= session.inFlight
        .catch(() => 0)
        .then(() => {
          session.next = undefined;
          return this.#startWait(session);
        });
      wait = session.next;
    }
    const confirmed = await wait;
    const { replicas, waitMs } = this.#options;
    if (confirmed < replicas) {
      throw new MemoryError(
        "unavailable",
        `${confirmed} of the ${replicas} Redis replicas required (--redis-min-replicas) confirmed the write within ${waitMs} ms; it may have been stored: a retry with the same request_id answers the stored result`,
      );
    }
  }

  #startWait(session: Session): Promise<number> {
    const run = (async () => {
      if (session.ended) throw notConfirmed();
      const { replicas, waitMs, commandTimeoutMs, fenceKey } = this.#options;
      const fence = this.#send(session.link, ["INCR", fenceKey], commandTimeoutMs);
      const waited = this.#send(
        session.link,
        ["WAIT", String(replicas), String(waitMs)],
        waitMs + commandTimeoutMs,
      );
      // Both are settled here, whichever fails first.
      fence.catch(() => {});
      waited.catch(() => {});
      try {
        await fence;
        const count = Number(await waited);
        if (session.ended) throw notConfirmed();
        return count;
      } catch (err) {
        // The session is in an unknown state (a timeout, a closed socket): start a new one.
        this.#end(session);
        throw err instanceof MemoryError ? err : notConfirmed(err);
      }
    })();
    session.inFlight = run;
    run
      .catch(() => {})
      .finally(() => {
        if (session.inFlight === run) session.inFlight = undefined;
      });
    return run;
  }
}

interface Session {
  link: RedisConnection;
  ended: boolean;
  inFlight: Promise<number> | undefined;
  next: Promise<number> | undefined;
}

function notConfirmed(cause?: unknown): MemoryError {
  return new MemoryError(
    "unavailable",
    "the connection to the Redis primary ended before its replicas confirmed the write; it may have been stored: a retry with the same request_id answers the stored result",
    cause === undefined ? undefined : { cause },
  );
}
