import type { StoreConfig } from "../config.js";
import { createMemoryStore } from "./memory/index.js";
import { createSqliteStore } from "./sqlite/index.js";
import type { Store, StoreLimits } from "./store.js";

/** Opens the store the configuration names. */
export async function createStore(
  config: StoreConfig,
  limits: Partial<StoreLimits>,
): Promise<Store> {
  switch (config.kind) {
    case "memory":
      return createMemoryStore(limits);
    case "sqlite":
      try {
        return createSqliteStore(config.path, limits, {
          cacheSize: config.cacheMb * 1024 * 1024,
        });
      } catch (err) {
        // A failed start (exit 1), not bad configuration: the flag is well formed,
        // the file is locked by another server or its directory is missing.
        throw new Error(
          `--store / WINDLASS_STORE: cannot open the SQLite database "${config.path}": ${err instanceof Error ? err.message : String(err)}`,
          { cause: err },
        );
      }
    case "redis": {
      // Loaded on demand: node-redis is only needed by deployments that use it.
      const { createRedisStore } = await import("./redis/index.js");
      return createRedisStore(config.url, limits, {
        minReplicas: config.minReplicas,
        replicaWaitMs: config.replicaWaitMs,
        namespaceShards: config.namespaceShards,
      });
    }
    case "postgres": {
      // Loaded on demand, like node-redis: only deployments on Postgres need pg.
      const { createPostgresStore } = await import("./postgres/index.js");
      try {
        return await createPostgresStore(config.url, limits, { poolSize: config.poolSize });
      } catch (err) {
        // Unreachable is a failed start (exit 1), not bad configuration. The
        // driver's message names the host at most: the URL and its password stay out.
        throw new Error(
          `the Postgres store (--store) did not open: ${err instanceof Error ? err.message : String(err)}`,
        );
      }
    }
  }
}
