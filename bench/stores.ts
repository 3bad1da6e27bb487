import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BenchRedis, startBenchRedis } from "./redis-server.js";

/** The stores the real server is measured on, one server process each. */
export type StoreKind = "memory" | "sqlite" | "redis";

export const ALL_STORES: readonly StoreKind[] = ["memory", "sqlite", "redis"];

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
  /** Stops redis-server and removes the temporary directory. Idempotent. */
  close(): Promise<void>;
}

/**
 * Prepares what `kinds` need, starting `redisServer` (a path or a name on
 * PATH) for redis; on failure nothing is left behind.
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
  try {
    if (kinds.includes("redis")) redis = await startBenchRedis(redisServer, join(dir, "redis"));
  } catch (err) {
    removeDir();
    process.off("exit", removeDir);
    throw err;
  }
  let closed = false;
  return {
    redis,
    storeFlag(kind) {
      switch (kind) {
        case "memory":
          return "memory";
        case "sqlite":
          return `sqlite:${join(dir, "bench.sqlite")}`;
        case "redis":
          if (redis === undefined) throw new Error("bench: redis is not among the stores");
          return redis.url;
      }
    },
    async close() {
      if (closed) return;
      closed = true;
      await redis?.stop();
      removeDir();
      process.off("exit", removeDir);
    },
  };
}
