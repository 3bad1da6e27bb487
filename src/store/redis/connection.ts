import { createClient, createSentinel } from "redis";
import { parseRedisSentinelUrl, SENTINEL_SCHEME } from "../../config.js";
import { parseRedisUrl } from "./redis-url.js";
import { RespConnection, type RespConnectionOptions } from "./resp-connection.js";

/**
 * What the Redis store uses of a connection: the single-node RespConnection
 * (resp-connection.ts), node-redis's sentinel client, or its cluster client
 * (cluster.ts). Raw `sendCommand` with RESP2 replies (strings, integers,
 * null, arrays) keeps reply parsing in one place and independent of
 * node-redis's typed wrappers.
 */
export interface RedisConnection {
  readonly isOpen: boolean;
  sendCommand(args: readonly string[]): Promise<unknown>;
  /**
   * The commands as one MULTI … EXEC, sent back to back: their replies, or
   * the first error among them. Only where one connection carries them
   * (the single-node connection); the others leave it out.
   */
  sendAtomic?(commands: readonly (readonly string[])[]): Promise<unknown[]>;
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
   * A new single-socket connection to the current primary of `key` (never
   * reconnecting by itself, so one client object is one server session:
   * what WAIT needs; see ReplicaConfirmation).
   */
  openPrimarySession(key: string): RedisConnection;
  /** Which primary holds `key` now ("host:port"; one name for a single primary). */
  primaryOf(key: string): string;
  /** A session found `key`'s slot moved (MOVED/ASK): refresh where it is; resolves once asked. */
  moved(key: string): Promise<void>;
  /** Sends `args` to every primary (SCRIPT LOAD). */
  eachPrimary(args: readonly string[]): Promise<void>;
}

/**
 * Commands one connection holds waiting for replies. A Redis that hangs
 * (SIGSTOP, a black-holed network) answers nothing while calls keep coming;
 * past this they fail at once (unavailable) instead of filling memory.
 */
const MAX_QUEUED_COMMANDS = 10_000;

/**
 * node-redis's own per-command timeout (5000 ms unless told otherwise) is
 * off: every command is already bounded by Commands' timeout (and a blocking
 * XREAD by its block time plus that). Its timeout is an AbortSignal.timeout
 * per command whose timer is never cancelled, so each one fires later and
 * builds a DOMException: measurable server CPU on every call. It would
 * also cut a 5000 ms XREAD BLOCK short.
 */
export const COMMAND_OPTIONS = { timeout: 0 } as const;

/** How long one connection attempt (with its handshake) may take. */
const CONNECT_TIMEOUT_MS = 1000;

function reconnectDelay(retries: number): number {
  return Math.min(2000, 50 * 2 ** Math.min(retries, 10)) + Math.floor(Math.random() * 100);
}

/** Opens (but does not connect) the clients of a redis://, rediss:// or redis+sentinel:// URL. */
export function redisClients(url: string): RedisClients {
  return url.startsWith(SENTINEL_SCHEME) ? sentinelClients(url) : singleNodeClients(url);
}

/** What a deployment with one primary answers for primaryOf and eachPrimary. */
function onePrimary(
  main: RedisConnection,
): Pick<RedisClients, "primaryOf" | "moved" | "eachPrimary"> {
  return {
    primaryOf: () => "primary",
    moved: async () => {},
    eachPrimary: async (args) => {
      await main.sendCommand(args);
    },
  };
}

/**
 * One node: the store's own pipelined RESP2 connection (resp-connection.ts),
 * the hot path's client, with the same reconnect, queue bound and
 * connect timeout as the node-redis clients below.
 */
function singleNodeClients(url: string): RedisClients {
  const endpoint = parseRedisUrl(url);
  const options: RespConnectionOptions = {
    endpoint,
    connectTimeoutMs: CONNECT_TIMEOUT_MS,
    reconnect: reconnectDelay,
    maxQueued: MAX_QUEUED_COMMANDS,
  };
  const main = new RespConnection(options);
  return {
    target: `${endpoint.host}:${endpoint.port}`,
    main,
    duplicate: () => main.duplicate(),
    onReady: (listener) => {
      main.on("ready", listener);
    },
    openPrimarySession: () => new RespConnection({ ...options, reconnect: false }),
    ...onePrimary(main),
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
    commandOptions: COMMAND_OPTIONS,
    ...(parsed.username === undefined ? {} : { username: parsed.username }),
    ...(parsed.password === undefined ? {} : { password: parsed.password }),
    socket: { connectTimeout: CONNECT_TIMEOUT_MS, reconnectStrategy: reconnectDelay },
  } as const;
  const open = (): SentinelClient =>
    createSentinel({
      name: parsed.masterName,
      sentinelRootNodes: parsed.sentinels,
      RESP: 2,
      commandOptions: COMMAND_OPTIONS,
      nodeClientOptions: nodeOptions,
      sentinelClientOptions: { socket: { connectTimeout: CONNECT_TIMEOUT_MS } },
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
          connectTimeout: CONNECT_TIMEOUT_MS,
          reconnectStrategy: false,
        },
      });
    },
    ...onePrimary(main.link),
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
