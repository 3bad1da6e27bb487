/**
 * The parts of test/support/redis-cluster.ts that talk to one node: its
 * kept connections, CLUSTER NODES parsed, and key slots computed locally.
 */
import { createClient, ErrorReply } from "redis";
import type { RedisServer } from "./redis-server.js";

/** MIGRATE of a batch takes up to its own timeout (5 s); other commands answer at once. */
const COMMAND_TIMEOUT_MS = 10_000;

/** One of the six processes; its role and slots change (failover, migration): ask `topology()`. */
export interface ClusterNode {
  readonly port: number;
  /** The cluster node id (40 hex digits); kept across restarts (nodes.conf stays in its directory). */
  readonly id: string;
  /** The running process's id; undefined while killed. */
  readonly pid: number | undefined;
  readonly server: RedisServer;
}

/** What the cluster says of one node now. */
export interface NodeState {
  readonly node: ClusterNode;
  readonly role: "primary" | "replica";
  /** The primary a replica follows; undefined for a primary. */
  readonly primaryId: string | undefined;
  /** Inclusive slot ranges a primary serves. */
  readonly slots: readonly (readonly [number, number])[];
  /** Marked fail (or pfail) by the node asked. */
  readonly failing: boolean;
}

export type Send = (port: number, args: string[]) => Promise<unknown>;

interface NodeClient {
  sendCommand(args: string[]): Promise<unknown>;
  destroy(): void;
}

/**
 * One connection per node, kept for the cluster's life (a fresh one per
 * command would cost more than the command: a migration sends thousands);
 * a connection that fails is dropped and the next command opens another.
 */
export function nodeConnections(): { send: Send; closeAll(): void } {
  const open = new Map<number, Promise<NodeClient>>();
  const drop = (port: number, client: Promise<NodeClient>) => {
    if (open.get(port) === client) open.delete(port);
    void client.then(
      (c) => c.destroy(),
      () => {},
    );
  };
  const connect = async (port: number): Promise<NodeClient> => {
    const client = createClient({
      socket: { host: "127.0.0.1", port, connectTimeout: 1000, reconnectStrategy: false },
      RESP: 2,
    });
    client.on("error", () => {});
    await client.connect();
    return client;
  };
  return {
    async send(port, args) {
      let client = open.get(port);
      if (client === undefined) {
        client = connect(port);
        open.set(port, client);
      }
      const current = client;
      let timer: NodeJS.Timeout | undefined;
      // A node killed under a command may never answer it: give up, drop the connection.
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`node ${port}: no answer in ${COMMAND_TIMEOUT_MS} ms`)),
          COMMAND_TIMEOUT_MS,
        );
      });
      try {
        return await Promise.race([current.then((c) => c.sendCommand(args)), timeout]);
      } catch (err) {
        // A reply error (MOVED, a refused command) leaves the connection usable.
        if (!(err instanceof ErrorReply)) drop(port, current);
        throw err;
      } finally {
        clearTimeout(timer);
      }
    },
    closeAll() {
      for (const [port, client] of open) drop(port, client);
    },
  };
}

/** CRC16 (XMODEM) of the key's hash tag, or of the key without one, mod 16384: CLUSTER KEYSLOT. */
export function slotOfKey(key: string): number {
  const bytes = Buffer.from(key, "utf8");
  let start = 0;
  let end = bytes.length;
  const open = bytes.indexOf(0x7b); // {
  if (open !== -1) {
    const close = bytes.indexOf(0x7d, open + 1); // }
    if (close > open + 1) {
      start = open + 1;
      end = close;
    }
  }
  let crc = 0;
  for (let i = start; i < end; i++) {
    crc ^= (bytes[i] ?? 0) << 8;
    for (let bit = 0; bit < 8; bit++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}

/** Parses CLUSTER NODES: `id host:port@bus flags primary ping pong epoch link slot…`. */
export function parseNodes(
  text: string,
  byId: (id: string) => ClusterNode | undefined,
): NodeState[] {
  const states: NodeState[] = [];
  for (const line of text.split("\n")) {
    const fields = line.trim().split(" ");
    const [id, , flags = "", primary = "-"] = fields;
    const node = id === undefined ? undefined : byId(id);
    if (node === undefined) continue;
    const slots: [number, number][] = [];
    for (const field of fields.slice(8)) {
      if (field.startsWith("[")) continue; // a slot being migrated or imported
      const [a, b = a] = field.split("-").map(Number);
      if (a !== undefined && b !== undefined) slots.push([a, b]);
    }
    const isPrimary = flags.split(",").includes("master");
    states.push({
      node,
      role: isPrimary ? "primary" : "replica",
      primaryId: isPrimary || primary === "-" ? undefined : primary,
      slots,
      failing: /fail/.test(flags),
    });
  }
  return states;
}

/**
 * Each node's role and, for a replica, its primary, in one string to compare
 * the nodes' views (a restarted primary turns replica some gossip rounds
 * after it is back: until then the nodes disagree).
 */
export function roleView(states: readonly NodeState[]): string {
  return states
    .map((s) => `${s.node.id}:${s.role === "primary" ? "primary" : `replica-of-${s.primaryId}`}`)
    .sort()
    .join(" ");
}

/** Which primary serves which slots, in one string to compare the nodes' views. */
export function slotView(states: readonly NodeState[]): string {
  return states
    .filter((s) => s.role === "primary" && s.slots.length > 0)
    .map((s) => `${s.node.id}:${s.slots.map(([a, b]) => `${a}-${b}`).join(",")}`)
    .sort()
    .join(" ");
}
