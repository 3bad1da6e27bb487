/**
 * A real Redis Cluster for tests: six `redis-server --cluster-enabled yes`
 * processes (three primaries, three replicas) on free ports of 127.0.0.1,
 * each in its own temporary directory, joined by
 * `redis-cli --cluster create … --cluster-replicas 1 --cluster-yes`, with a
 * short node timeout so a failover takes about a second.
 *
 * ```ts
 * const cluster = await startRedisCluster();
 * const store = await createRedisStore(cluster.url); // redis-cluster://127.0.0.1:P1,…
 * const slot = await cluster.keySlot("windlass:thread:t1");
 * const primary = await cluster.primaryOfSlot(slot);
 * await cluster.migrateSlot(slot, primary, other);   // keys move, SETSLOT NODE on all
 * await cluster.failover(replica);                   // CLUSTER FAILOVER, roles flipped
 * await cluster.kill(primary);                       // SIGKILL, its replica promoted
 * await cluster.restart(primary);                    // back as a replica, in sync
 * await cluster.stop();
 * ```
 *
 * A missing binary is an error, never a skip (as in redis-server.ts).
 */
import { execFile, execFileSync, spawnSync } from "node:child_process";
import { promisify } from "node:util";
import {
  type ClusterNode,
  type NodeState,
  nodeConnections,
  parseNodes,
  roleView,
  type Send,
  slotOfKey,
  slotView,
} from "./redis-cluster-nodes.js";
import { ask, QUICK_REPLICATION, waitForLinkOf, waitUntil } from "./redis-replication.js";
import { freePort, startRedisServer } from "./redis-server.js";

const CLI_BINARY = process.env.REDIS_CLI ?? "redis-cli";
const run = promisify(execFile);

export { type ClusterNode, type NodeState, slotOfKey };

export interface RedisCluster {
  /** `redis-cluster://127.0.0.1:P1,127.0.0.1:P2,…` (all six nodes, seeds for the client) */
  readonly url: string;
  /** The six nodes in start order (the roles are in `topology()`). */
  readonly nodes: readonly ClusterNode[];
  /** How long the start took, from the first spawn to every node ok and in sync. */
  readonly startMs: number;
  /** Every node's role and slots, as a live node sees them (CLUSTER NODES). */
  topology(): Promise<NodeState[]>;
  /** The live primaries now. */
  primaries(): Promise<ClusterNode[]>;
  /** The replicas of `primary` now. */
  replicasOf(primary: ClusterNode): Promise<ClusterNode[]>;
  /** CLUSTER KEYSLOT key. */
  keySlot(key: string): Promise<number>;
  /** Every key matching the SCAN pattern on the live primaries, with its slot and node. */
  keysMatching(pattern: string): Promise<{ key: string; slot: number; node: ClusterNode }[]>;
  /** The node serving `slot` now. */
  primaryOfSlot(slot: number): Promise<ClusterNode>;
  /** CLUSTER FAILOVER on `replica`; resolves once every node sees it primary and its old primary its replica. */
  failover(replica: ClusterNode): Promise<void>;
  /** SIGKILL; for a primary, resolves once its replica has been promoted and the cluster is ok again. */
  kill(node: ClusterNode): Promise<void>;
  /** Starts a killed node again (same port and directory); resolves once it is a replica in sync. */
  restart(node: ClusterNode): Promise<void>;
  /**
   * Moves `slot` from `from` to `to` as `redis-cli --cluster reshard` does:
   * SETSLOT IMPORTING/MIGRATING, MIGRATE of its keys in batches of
   * `batch` (`afterBatch` runs between them, to keep the slot half-moved
   * while writers run), then SETSLOT NODE on every primary.
   */
  migrateSlot(
    slot: number,
    from: ClusterNode,
    to: ClusterNode,
    options?: MigrateOptions,
  ): Promise<number>;
  /** Resolves once every live node says cluster_state:ok, they agree on the slots, and every replica is in sync. */
  waitUntilSettled(timeoutMs?: number): Promise<void>;
  /** SIGTERM to every node; removes their directories. */
  stop(): Promise<void>;
}

export interface MigrateOptions {
  /** Keys per MIGRATE; default 100. */
  batch?: number;
  /** Runs after each batch (and once before the first) while the slot is half-moved. */
  afterBatch?: () => Promise<void>;
}

export interface RedisClusterOptions {
  /** More arguments for every node, e.g. `--appendonly yes --appendfsync always`. */
  args?: readonly string[];
  /** cluster-node-timeout: how long before a silent node is failed; default 1000 ms. */
  nodeTimeoutMs?: number;
}

const NODE_COUNT = 6;
const SETTLE_TIMEOUT_MS = 30_000;

export async function startRedisCluster(options: RedisClusterOptions = {}): Promise<RedisCluster> {
  requireBinary();
  const started = Date.now();
  const args = [
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    String(options.nodeTimeoutMs ?? 1000),
    // A replica may always take over, however long it was cut off (tests kill primaries at will).
    "--cluster-replica-validity-factor",
    "0",
    ...QUICK_REPLICATION,
    ...(options.args ?? []),
  ];
  // The bus port is the client port + 10000 unless set: above 55535 that is
  // no port at all, so each node gets a free one of its own (again on each
  // attempt: another test's process may take it first).
  const servers = await Promise.all(
    Array.from({ length: NODE_COUNT }, async () =>
      startRedisServer({
        args,
        portArgs: async () => ["--cluster-port", String(await freePort())],
      }),
    ),
  );
  try {
    await run(CLI_BINARY, [
      "--cluster",
      "create",
      ...servers.map((s) => `127.0.0.1:${s.port}`),
      "--cluster-replicas",
      "1",
      "--cluster-yes",
    ]);
    const nodes: ClusterNode[] = [];
    for (const server of servers) {
      const id = String(await ask(server.port, ["CLUSTER", "MYID"]));
      nodes.push({
        port: server.port,
        id,
        server,
        get pid() {
          return server.pid;
        },
      });
    }
    const cluster = new LocalCluster(nodes);
    await cluster.waitUntilSettled();
    cluster.startMs = Date.now() - started;
    return cluster;
  } catch (err) {
    await Promise.all(servers.map((s) => s.stop()));
    throw err;
  }
}

/** The cluster's state as the tests see it: which nodes were killed, one connection per node. */
class LocalCluster implements RedisCluster {
  readonly url: string;
  startMs = 0;
  readonly #connections = nodeConnections();
  readonly #killed = new Set<ClusterNode>();

  constructor(readonly nodes: readonly ClusterNode[]) {
    this.url = `redis-cluster://${nodes.map((n) => `127.0.0.1:${n.port}`).join(",")}`;
  }

  #send: Send = (port, args) => this.#connections.send(port, args);
  #live = () => this.nodes.filter((n) => !this.#killed.has(n));
  #byId = (id: string) => this.nodes.find((n) => n.id === id);
  #parse = (text: unknown) => parseNodes(String(text), this.#byId);

  async topology(): Promise<NodeState[]> {
    let lastError: unknown;
    for (const asked of this.#live()) {
      try {
        return this.#parse(await this.#send(asked.port, ["CLUSTER", "NODES"]));
      } catch (err) {
        lastError = err;
      }
    }
    throw new Error(`no live cluster node answered CLUSTER NODES: ${String(lastError)}`);
  }

  /** Whether every live node says ok, sees no live node failing, and all agree on the slots and roles. */
  async #agreed(): Promise<boolean> {
    let agreed: string | undefined;
    for (const n of this.#live()) {
      const info = String(await this.#send(n.port, ["CLUSTER", "INFO"]));
      if (!/cluster_state:ok/.test(info)) return false;
      const states = this.#parse(await this.#send(n.port, ["CLUSTER", "NODES"]));
      if (states.some((s) => !this.#killed.has(s.node) && s.failing)) return false;
      // A killed primary still holding slots has not been failed over yet
      // (cluster_state stays ok while it is only suspected, PFAIL).
      const stale = (s: NodeState) => this.#killed.has(s.node) && s.role === "primary";
      if (states.some((s) => stale(s) && s.slots.length > 0)) return false;
      const live = states.filter((s) => !this.#killed.has(s.node));
      const view = `${slotView(states)} | ${roleView(live)}`;
      if (agreed !== undefined && view !== agreed) return false;
      agreed = view;
    }
    return true;
  }

  async waitUntilSettled(timeoutMs = SETTLE_TIMEOUT_MS): Promise<void> {
    await waitUntil(timeoutMs, "the cluster to settle (state ok, agreed slots)", () =>
      this.#agreed(),
    );
    for (const s of await this.topology()) {
      if (s.role !== "replica" || this.#killed.has(s.node)) continue;
      await waitForLinkOf(s.node.server, timeoutMs).catch(async (err: unknown) => {
        // What the replica says of its link, for the failure's message.
        const info = await this.#send(s.node.port, ["INFO", "replication"]).catch((e) => e);
        throw new Error(
          `${String(err)}; its INFO replication: ${String(info).replaceAll("\r\n", " ")}`,
        );
      });
    }
  }

  async #roleOf(node: ClusterNode): Promise<NodeState["role"]> {
    const info = String(await this.#send(node.port, ["INFO", "replication"]));
    return /role:master/.test(info) ? "primary" : "replica";
  }

  async primaries(): Promise<ClusterNode[]> {
    return (await this.topology())
      .filter((s) => s.role === "primary" && !this.#killed.has(s.node) && s.slots.length > 0)
      .map((s) => s.node);
  }

  async replicasOf(primary: ClusterNode): Promise<ClusterNode[]> {
    return (await this.topology())
      .filter((s) => s.primaryId === primary.id && !this.#killed.has(s.node))
      .map((s) => s.node);
  }

  async keySlot(key: string): Promise<number> {
    return Number(await this.#send(this.#live()[0]?.port ?? 0, ["CLUSTER", "KEYSLOT", key]));
  }

  async keysMatching(pattern: string): Promise<{ key: string; slot: number; node: ClusterNode }[]> {
    const found: { key: string; slot: number; node: ClusterNode }[] = [];
    for (const node of await this.primaries()) {
      let cursor = "0";
      do {
        const scan = ["SCAN", cursor, "MATCH", pattern, "COUNT", "1000"];
        const [next, keys] = (await this.#send(node.port, scan)) as [string, string[]];
        cursor = next;
        for (const key of keys) found.push({ key, node, slot: slotOfKey(key) });
      } while (cursor !== "0");
    }
    return found;
  }

  async primaryOfSlot(slot: number): Promise<ClusterNode> {
    const owner = (await this.topology()).find(
      (s) => s.role === "primary" && s.slots.some(([a, b]) => slot >= a && slot <= b),
    );
    if (owner === undefined) throw new Error(`no primary serves slot ${slot}`);
    return owner.node;
  }

  async failover(replica: ClusterNode): Promise<void> {
    const states = await this.topology();
    const oldPrimary = this.#byId(states.find((s) => s.node === replica)?.primaryId ?? "");
    if (oldPrimary === undefined) throw new Error(`node ${replica.port} is not a replica`);
    await this.#send(replica.port, ["CLUSTER", "FAILOVER"]);
    await waitUntil(SETTLE_TIMEOUT_MS, `node ${replica.port} to take over`, async () => {
      const flipped = (await this.#roleOf(replica)) === "primary";
      return flipped && (await this.#roleOf(oldPrimary)) === "replica";
    });
    await this.waitUntilSettled();
  }

  async kill(node: ClusterNode): Promise<void> {
    const states = await this.topology();
    const wasPrimary = states.some((s) => s.node === node && s.role === "primary");
    await node.server.kill();
    this.#killed.add(node);
    // Settled means: a live node has taken over every slot the killed one served.
    if (wasPrimary) await this.waitUntilSettled();
  }

  async restart(node: ClusterNode): Promise<void> {
    await node.server.restart();
    this.#killed.delete(node);
    // A primary killed and failed over comes back with its old slots in
    // nodes.conf and claims them until it hears of the newer epoch, then
    // turns replica of the node that took them over: wait for that in its
    // own view (INFO); waitUntilSettled then has every node agree (#agreed
    // compares the roles too).
    await waitUntil(
      SETTLE_TIMEOUT_MS,
      `node ${node.port} to rejoin as a replica`,
      async () => (await this.#roleOf(node)) === "replica",
    );
    await this.waitUntilSettled();
  }

  async migrateSlot(
    slot: number,
    from: ClusterNode,
    to: ClusterNode,
    options: MigrateOptions = {},
  ): Promise<number> {
    const livePrimaries = async () =>
      (await this.topology())
        .filter((s) => s.role === "primary" && !this.#killed.has(s.node))
        .map((s) => s.node);
    return migrate(this.#send, this.nodes, slot, from, to, options, livePrimaries);
  }

  async stop(): Promise<void> {
    this.#connections.closeAll();
    await Promise.all(this.nodes.map((n) => n.server.stop()));
  }
}

/** Moves one slot, as redis-cli's reshard does it; returns how many keys moved. */
async function migrate(
  send: Send,
  nodes: readonly ClusterNode[],
  slot: number,
  from: ClusterNode,
  to: ClusterNode,
  options: MigrateOptions,
  primaries: () => Promise<ClusterNode[]>,
): Promise<number> {
  if (!nodes.includes(from) || !nodes.includes(to) || from === to) {
    throw new Error("migrateSlot needs two different nodes of this cluster");
  }
  const batch = options.batch ?? 100;
  // The target first: once the source says MIGRATING, clients get ASK to it.
  await send(to.port, ["CLUSTER", "SETSLOT", String(slot), "IMPORTING", from.id]);
  await send(from.port, ["CLUSTER", "SETSLOT", String(slot), "MIGRATING", to.id]);
  await options.afterBatch?.();
  let moved = 0;
  for (;;) {
    const keys = (await send(from.port, [
      "CLUSTER",
      "GETKEYSINSLOT",
      String(slot),
      String(batch),
    ])) as string[];
    if (keys.length === 0) break;
    await send(from.port, [
      "MIGRATE",
      "127.0.0.1",
      String(to.port),
      "",
      "0",
      "5000",
      "KEYS",
      ...keys,
    ]);
    moved += keys.length;
    await options.afterBatch?.();
  }
  // The target, then the source, then everyone else (the order redis-cli uses).
  const others = (await primaries()).filter((n) => n !== to && n !== from);
  for (const n of [to, from, ...others]) {
    await send(n.port, ["CLUSTER", "SETSLOT", String(slot), "NODE", to.id]);
  }
  return moved;
}

function requireBinary(): void {
  const probe = spawnSync(CLI_BINARY, ["--version"], { encoding: "utf8" });
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error(
      `${CLI_BINARY} is not installed or does not run (${probe.error?.message ?? probe.stderr}); ` +
        "install Debian's redis-tools (apt-get install redis-server brings it) or set REDIS_CLI to its path",
    );
  }
}

/** `redis-cli -c -p PORT ARGS…`: a command through redis-cli's own cluster redirects (MOVED/ASK). */
export async function clusterCli(port: number, args: readonly string[]): Promise<string> {
  const { stdout } = await run(CLI_BINARY, ["-c", "-p", String(port), ...args]);
  return stdout.trim();
}

/**
 * Several commands on one redis-cli connection to one node (no redirects),
 * one a line: `SET k v` then `WAIT 1 1000` counts the replicas that have it.
 */
export function nodeCli(port: number, commands: readonly string[]): string {
  return execFileSync(CLI_BINARY, ["-p", String(port)], {
    input: `${commands.join("\n")}\n`,
    encoding: "utf8",
  }).trim();
}
