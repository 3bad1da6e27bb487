import type { StoreConfig } from "../config.js";
import { ConfigError } from "../config.js";
import { createMemoryStore } from "./memory-store.js";
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
      throw new ConfigError(
        "--store / WINDLASS_STORE: the sqlite store is not part of this release yet; use memory",
      );
    case "redis":
      throw new ConfigError(
        "--store / WINDLASS_STORE: the redis store is not part of this release yet; use memory",
      );
  }
}
