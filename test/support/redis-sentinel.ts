/**
 * A Redis Sentinel deployment for tests: a primary, one replica and three
 * `redis-sentinel` processes (quorum 2), each on a free port of 127.0.0.1,
 * with short down-after-milliseconds and failover-timeout so a failover
 * takes seconds.
 *
 * ```ts
 * const redis = await startSentinelDeployment();
 * const store = await createRedisStore(redis.url); // redis+sentinel://…/windlass
 * await redis.primary.kill();                      // SIGKILL
 * await redis.waitForPrimary(redis.replica.port);  // the sentinels promoted it
 * await redis.stop();
 * ```
 *
 * A missing binary is an error, never a skip (as in redis-server.ts).
 */
import { type ChildProcess, spawnSync } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ask, QUICK_REPLICATION, waitForLinkOf, waitUntil } from "./redis-replication.js";
import {
  freePort,
  type RedisServer,
  spawnAnsweringPing,
  startRedisServer,
} from "./redis-server.js";

export const MASTER_NAME = "windlass";

const SENTINEL_BINARY = process.env.REDIS_SENTINEL ?? "redis-sentinel";
const START_TIMEOUT_MS = 10_000;
/** Sentinels find each other and the replica through hello messages every 2 s. */
const DISCOVERY_TIMEOUT_MS = 30_000;

export interface SentinelDeployment {
  /** `redis+sentinel://[:PASSWORD@]127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/windlass` */
  readonly url: string;
  /** The server that was primary at start (the sentinels may have demoted it since). */
  readonly primary: RedisServer;
  /** The server that was its replica at start. */
  readonly replica: RedisServer;
  readonly sentinelPorts: readonly number[];
  /** The port the sentinels (each of them) name as the primary now. */
  primaryPort(): Promise<number>;
  /** Resolves once every sentinel names `port` as the primary; rejects after `timeoutMs`. */
  waitForPrimary(port: number, timeoutMs?: number): Promise<void>;
  /** Resolves once `server` is a replica whose link to its primary is up. */
  waitForReplicaLink(server: RedisServer, timeoutMs?: number): Promise<void>;
  /** Stops the sentinels and both servers. */
  stop(): Promise<void>;
}

export interface SentinelDeploymentOptions {
  /** Arguments for both Redis servers (persistence, say). */
  serverArgs?: readonly string[];
  /** How long the sentinels wait before they call an unanswering primary down; default 1000. */
  downAfterMs?: number;
  /** Both servers require it (the sentinels do not); the url carries it. */
  password?: string;
}

export async function startSentinelDeployment(
  options: SentinelDeploymentOptions = {},
): Promise<SentinelDeployment> {
  requireBinary();
  const serverArgs = [...(options.serverArgs ?? []), ...QUICK_REPLICATION];
  const password = options.password;
  const primary = await startRedisServer({ args: serverArgs, password });
  const replica = await startRedisServer({
    args: [...serverArgs, "--replicaof", "127.0.0.1", String(primary.port)],
    password,
  });
  const dir = mkdtempSync(join(tmpdir(), "windlass-sentinel-"));
  const sentinels: { port: number; child: ChildProcess }[] = [];
  const stopAll = async () => {
    for (const s of sentinels) await end(s.child);
    await replica.stop();
    await primary.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < 3; i++) {
      sentinels.push(
        await launchSentinel(dir, i, primary.port, options.downAfterMs ?? 1000, password),
      );
    }
    await waitForLinkOf(replica, START_TIMEOUT_MS, password);
    // Every sentinel must know the replica (to promote it) and the other two (for the quorum).
    await waitUntil(DISCOVERY_TIMEOUT_MS, "the sentinels to discover each other", async () => {
      for (const s of sentinels) {
        const replicas = (await ask(s.port, ["SENTINEL", "REPLICAS", MASTER_NAME])) as unknown[];
        const others = (await ask(s.port, ["SENTINEL", "SENTINELS", MASTER_NAME])) as unknown[];
        if (replicas.length < 1 || others.length < 2) return false;
      }
      return true;
    });
  } catch (err) {
    await stopAll();
    throw err;
  }

  const primaryPortOf = async (port: number) => {
    const reply = (await ask(port, ["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])) as
      | string[]
      | null;
    return Number(reply?.[1]);
  };
  return {
    url: `redis+sentinel://${password === undefined ? "" : `:${password}@`}${sentinels.map((s) => `127.0.0.1:${s.port}`).join(",")}/${MASTER_NAME}`,
    primary,
    replica,
    sentinelPorts: sentinels.map((s) => s.port),
    primaryPort: () => primaryPortOf(sentinels[0]?.port ?? 0),
    async waitForPrimary(port, timeoutMs = 30_000) {
      await waitUntil(timeoutMs, `the sentinels to name port ${port} the primary`, async () => {
        for (const s of sentinels) if ((await primaryPortOf(s.port)) !== port) return false;
        return true;
      });
    },
    waitForReplicaLink: (server, timeoutMs = 30_000) => waitForLinkOf(server, timeoutMs, password),
    stop: stopAll,
  };
}

async function launchSentinel(
  dir: string,
  index: number,
  primaryPort: number,
  downAfterMs: number,
  password: string | undefined,
): Promise<{ port: number; child: ChildProcess }> {
  const port = await freePort();
  // The sentinel rewrites its file (what it learns), so each has its own.
  const file = join(dir, `sentinel-${index}.conf`);
  writeFileSync(
    file,
    [
      `port ${port}`,
      "bind 127.0.0.1",
      "protected-mode no",
      "daemonize no",
      `dir ${dir}`,
      `sentinel monitor ${MASTER_NAME} 127.0.0.1 ${primaryPort} 2`,
      `sentinel down-after-milliseconds ${MASTER_NAME} ${downAfterMs}`,
      `sentinel failover-timeout ${MASTER_NAME} ${downAfterMs * 3}`,
      `sentinel parallel-syncs ${MASTER_NAME} 1`,
      ...(password === undefined ? [] : [`sentinel auth-pass ${MASTER_NAME} ${password}`]),
      "",
    ].join("\n"),
  );
  return {
    port,
    child: await spawnAnsweringPing(SENTINEL_BINARY, [file, "--loglevel", "warning"], port),
  };
}

async function end(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, "exit");
  child.kill("SIGKILL");
  await exited;
}

function requireBinary(): void {
  const probe = spawnSync(SENTINEL_BINARY, ["--version"], { encoding: "utf8" });
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error(
      `${SENTINEL_BINARY} is not installed or does not run (${probe.error?.message ?? probe.stderr}); ` +
        "install Debian's redis-sentinel (apt-get install redis-sentinel) or set REDIS_SENTINEL to its path",
    );
  }
}
