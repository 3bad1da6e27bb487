import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
// The tests' own PostgreSQL launcher (tsc compiles that file into dist as well).
import { type PostgresServer, startPostgresServer } from "../test/support/postgres-server.js";
import { type RedisCluster, startRedisCluster } from "../test/support/redis-cluster.js";
import { processCpuMicros } from "./cpu-time.js";
import { proportionalBytes } from "./process-memory.js";
import { type BenchRedis, startBenchRedis } from "./redis-server.js";

/**
 * The stores the real server is measured on, one server process each.
 * "redis-cluster" (the tests' six-node cluster: 3 primaries, 3 replicas)
 * is measured only where a scenario lists it.
 */
export type StoreKind = "memory" | "sqlite" | "redis" | "postgres" | "redis-cluster";

export const ALL_STORES: readonly StoreKind[] = ["memory", "sqlite", "redis", "postgres"];

/**
 * The bench's PostgreSQL: the tests' launcher (fsync on, shared_buffers
 * 32MB) with pg_stat_statements loaded, so a run can be profiled by
 * statement (`SELECT … FROM pg_stat_statements`) without another start.
 */
export interface BenchPostgres {
  /** The database the real server is given, created empty for this run. */
  readonly url: string;
  readonly server: PostgresServer;
  /** User + system CPU of the postmaster and its backends so far, microseconds; undefined without /proc. */
  cpuMicros(): number | undefined;
  /** Proportional set size (Pss) of the postmaster and its backends: shared buffers counted once. */
  memoryBytes(): number | undefined;
}

async function startBenchPostgres(): Promise<BenchPostgres> {
  const server = await startPostgresServer({
    settings: { shared_preload_libraries: "pg_stat_statements" },
  });
  try {
    const url = await server.createDatabase();
    // A backend that ended between the listing and the read is left out.
    const sumOver = (read: (pid: number) => number | undefined): number | undefined => {
      const values = server.processIds().flatMap((pid) => read(pid) ?? []);
      return values.length === 0 ? undefined : values.reduce((a, b) => a + b, 0);
    };
    return {
      url,
      server,
      cpuMicros: () => sumOver(processCpuMicros),
      memoryBytes: () => sumOver(proportionalBytes),
    };
  } catch (err) {
    await server.stop();
    throw err;
  }
}

/**
 * What the real servers' `--store` values point at: a temporary directory
 * holding the SQLite file, and a redis-server of the bench's own. Both are
 * fresh for each run, so every store starts empty.
 */
export interface StoreBackends {
  /** The `--store` value of the real server on `kind`. */
  storeFlag(kind: StoreKind): string;
  /** The bench's redis-server, when redis is among the stores. */
  readonly redis: BenchRedis | undefined;
  /** The bench's PostgreSQL, when postgres is among the stores. */
  readonly postgres: BenchPostgres | undefined;
  /** The six-node Redis Cluster, when redis-cluster is among the stores. */
  readonly cluster: RedisCluster | undefined;
  /** Stops redis-server and removes the temporary directory. Idempotent. */
  close(): Promise<void>;
}

/**
 * Prepares what `kinds` need, starting `redisServer` (a path or a name on
 * PATH) for redis and a PostgreSQL for postgres; on failure nothing is
 * left behind.
 */
export async function openStoreBackends(
  kinds: readonly StoreKind[],
  redisServer: string,
): Promise<StoreBackends> {
  const dir = mkdtempSync(join(tmpdir(), "windlass-bench-"));
  const removeDir = (): void => rmSync(dir, { recursive: true, force: true });
  // If the bench is ended (SIGINT, the watchdog), redis-server.ts kills
  // redis-server and this removes the files.
  process.on("exit", removeDir);
  let redis: BenchRedis | undefined;
  let postgres: BenchPostgres | undefined;
  let cluster: RedisCluster | undefined;
  try {
    if (kinds.includes("redis")) redis = await startBenchRedis(redisServer, join(dir, "redis"));
    if (kinds.includes("postgres")) postgres = await startBenchPostgres();
    if (kinds.includes("redis-cluster")) cluster = await startRedisCluster();
  } catch (err) {
    await redis?.stop();
    await postgres?.server.stop();
    removeDir();
    process.off("exit", removeDir);
    throw err;
  }
  let closed = false;
  return {
    redis,
    postgres,
    cluster,
    storeFlag(kind) {
      switch (kind) {
        case "memory":
          return "memory";
        case "sqlite":
          return `sqlite:${join(dir, "bench.sqlite")}`;
        case "redis":
          if (redis === undefined) throw new Error("bench: redis is not among the stores");
          return redis.url;
        case "postgres":
          if (postgres === undefined) throw new Error("bench: postgres is not among the stores");
          return postgres.url;
        case "redis-cluster":
          if (cluster === undefined)
            throw new Error("bench: redis-cluster is not among the stores");
          return cluster.url;
      }
    },
    async close() {
      if (closed) return;
      closed = true;
      await redis?.stop();
      await postgres?.server.stop();
      await cluster?.stop();
      removeDir();
      process.off("exit", removeDir);
    },
  };
}
