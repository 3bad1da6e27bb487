import { createClient, createCluster } from "redis";
import { parseRedisClusterUrl } from "../../config.js";
import { COMMAND_OPTIONS, type RedisClients, type RedisConnection } from "./connection.js";
import { keySlot } from "./key-slot.js";

/**
 * The store's connections to a Redis Cluster (redis-cluster://): node-redis's
 * cluster client, which learns the slot map from the seed nodes, sends each
 * command to the primary of its first key's slot and follows MOVED and ASK
 * replies (a failover, a slot being migrated). Every script's keys share one
 * hash tag (keys.ts), so no command crosses slots.
 */

/** Commands one node connection holds waiting for replies (as connection.ts, per node). */
const MAX_QUEUED_COMMANDS = 10_000;
/** How soon after a node's first reconnect attempt the client reloads the slot map (node-redis: 5000). */
const TOPOLOGY_REFRESH_MS = 500;
/** MOVED/ASK redirections one command may follow before it fails (unavailable). */
const MAX_REDIRECTIONS = 16;

function reconnectDelay(retries: number): number {
  return Math.min(2000, 50 * 2 ** Math.min(retries, 10)) + Math.floor(Math.random() * 100);
}

/** The part of node-redis's cluster client used here. */
interface ClusterClient {
  readonly isOpen: boolean;
  sendCommand(firstKey: string | undefined, isReadonly: boolean, args: string[]): Promise<unknown>;
  connect(): Promise<unknown>;
  close(): Promise<void>;
  destroy(): void;
  on(event: string, listener: (...args: never[]) => void): unknown;
  getSlotMaster(slot: number): ClusterNode | undefined;
  readonly masters: readonly ClusterNode[];
  nodeClient(node: ClusterNode): Promise<{ sendCommand(args: string[]): Promise<unknown> }>;
}

interface ClusterNode {
  readonly host: string;
  readonly port: number;
}

/** Opens (but does not connect) the clients of a redis-cluster:// URL. */
export function clusterClients(url: string): RedisClients {
  const parsed = parseRedisClusterUrl(url);
  const credentials = {
    ...(parsed.username === undefined ? {} : { username: parsed.username }),
    ...(parsed.password === undefined ? {} : { password: parsed.password }),
  };
  const nodeDefaults = {
    ...credentials,
    disableOfflineQueue: true,
    commandsQueueMaxLength: MAX_QUEUED_COMMANDS,
    commandOptions: COMMAND_OPTIONS,
    socket: { connectTimeout: 1000, reconnectStrategy: reconnectDelay },
  };
  const open = (minimizeConnections: boolean): ClusterClient =>
    createCluster({
      rootNodes: parsed.nodes.map((n) => ({ socket: { host: n.host, port: n.port } })),
      defaults: nodeDefaults,
      // node-redis's own per-command timeout off, as for Sentinel (connection.ts COMMAND_OPTIONS).
      commandOptions: COMMAND_OPTIONS,
      RESP: 2,
      minimizeConnections,
      maxCommandRedirections: MAX_REDIRECTIONS,
      // After a node stops answering, ask for the slot map again soon (a failover takes ~1 s).
      topologyRefreshOnReconnectionAttemptStrategy: TOPOLOGY_REFRESH_MS,
    }) as unknown as ClusterClient;
  const main = open(false);
  return {
    target: `redis cluster via ${parsed.nodes.map((n) => `${n.host}:${n.port}`).join(",")}`,
    main: clusterLink(main),
    // A reader's XREAD BLOCK holds its node connection: a cluster client of its
    // own, connecting only to the node that serves its stream.
    duplicate: () => clusterLink(open(true)),
    onReady: (listener) => {
      main.on("node-ready", listener);
    },
    openPrimarySession: (key) => {
      // Where the client last saw the slot's primary; a stale one answers
      // MOVED (or is gone), the session ends and the next one asks again.
      const primary = main.getSlotMaster(keySlot(key));
      return createClient({
        ...credentials,
        RESP: 2,
        disableOfflineQueue: true,
        commandsQueueMaxLength: MAX_QUEUED_COMMANDS,
        commandOptions: COMMAND_OPTIONS,
        socket: {
          host: primary?.host ?? "primary-not-known-yet.invalid",
          port: primary?.port ?? 6379,
          connectTimeout: 1000,
          reconnectStrategy: false,
        },
      });
    },
    primaryOf: (key) => {
      const primary = main.getSlotMaster(keySlot(key));
      return primary === undefined ? "unknown" : `${primary.host}:${primary.port}`;
    },
    // A command on the cluster client that meets MOVED makes it reload the
    // slot map before it follows the redirection: once it is answered, the
    // map is new.
    moved: async (key) => {
      await main.sendCommand(key, false, ["EXISTS", key]).catch(() => {});
    },
    eachPrimary: async (args) => {
      for (const primary of main.masters) {
        await (await main.nodeClient(primary)).sendCommand([...args]);
      }
    },
  };
}

/**
 * The key a command is routed by: EVAL/EVALSHA/FCALL's first key, XREAD's
 * first stream, else the first argument; none for INFO, SCRIPT, FUNCTION,
 * WAIT …
 */
export function routingKey(args: readonly string[]): string | undefined {
  const name = args[0]?.toUpperCase();
  switch (name) {
    case "EVAL":
    case "EVALSHA":
    case "FCALL":
      return Number(args[2]) > 0 ? args[3] : undefined;
    case "XREAD": {
      const at = args.findIndex((a) => a.toUpperCase() === "STREAMS");
      return at === -1 ? undefined : args[at + 1];
    }
    case "INFO":
    case "SCRIPT":
    case "FUNCTION":
    case "WAIT":
    case "PING":
      return undefined;
    default:
      return args[1];
  }
}

function clusterLink(cluster: ClusterClient): RedisConnection {
  return {
    get isOpen() {
      return cluster.isOpen;
    },
    sendCommand: (args) => cluster.sendCommand(routingKey(args), false, [...args]),
    connect: () => cluster.connect(),
    close: () => cluster.close(),
    destroy: () => cluster.destroy(),
    on: (event, listener) =>
      cluster.on(event, (err: unknown) =>
        listener(err instanceof Error ? err : new Error(String(err))),
      ),
  };
}
