import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createMemoryStore } from "../../../src/store/memory/index.js";
import { createPostgresStore } from "../../../src/store/postgres/index.js";
import { createRedisStore } from "../../../src/store/redis/index.js";
import { createSqliteStore } from "../../../src/store/sqlite/index.js";
import { tracedStore } from "../../../src/store/traced-store.js";
import { startPostgresServer } from "../../support/postgres-server.js";
import { startRedisServer } from "../../support/redis-server.js";
import { type ContractBackend, serverBackend } from "./support.js";

/**
 * Every backend the contract suites run against (test/store/contract.test.ts).
 * Each open() returns a store that shares nothing with any other: a fresh
 * memory store, SQLite file, Redis key prefix or Postgres database.
 */

const nothingToStart = async (): Promise<void> => {};

const memory: ContractBackend = {
  name: "memory",
  start: nothingToStart,
  stop: nothingToStart,
  open: async (limits) => createMemoryStore(limits),
};

/** The tracing decorator must be invisible: it forwards every call unchanged. */
const tracedMemory: ContractBackend = {
  name: "traced memory",
  start: nothingToStart,
  stop: nothingToStart,
  open: async (limits) => tracedStore(createMemoryStore(limits), "memory"),
};

/** Fresh files in a directory of its own; with `cacheSize` 0 every read and trim goes to the file. */
function sqlite(name: string, cacheSize?: number): ContractBackend {
  let dir: string | undefined;
  return {
    name,
    start: async () => {
      dir = mkdtempSync(join(tmpdir(), "windlass-sqlite-"));
    },
    stop: async () => {
      if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
      dir = undefined;
    },
    open: async (limits) => {
      if (dir === undefined) throw new Error(`${name}: open before start`);
      const path = join(dir, `${randomUUID()}.db`);
      return createSqliteStore(path, limits, cacheSize === undefined ? {} : { cacheSize });
    },
  };
}

/** A real redis-server on a free port; a fresh key prefix per store. */
const redis = serverBackend("redis", startRedisServer, (server, limits) =>
  createRedisStore(server.url, limits, { keyPrefix: `contract-${randomUUID()}` }),
);

/**
 * The same server, each namespace split into 4 shards (keys.ts): threads
 * of one namespace in 4 slots, Watch cursors across 4 logs, forks across
 * shards copied.
 */
const redisShardedServer = serverBackend(
  "redis, 4 namespace shards",
  startRedisServer,
  (server, limits) =>
    createRedisStore(server.url, limits, {
      keyPrefix: `contract-${randomUUID()}`,
      namespaceShards: 4,
    }),
);
const redisSharded: ContractBackend = { ...redisShardedServer, namespaceShards: 4 };

/** A real PostgreSQL on a free port; a fresh database per store. */
const postgres = serverBackend("postgres", startPostgresServer, async (server, limits) =>
  createPostgresStore(await server.createDatabase(), limits),
);

export const backends: readonly ContractBackend[] = [
  memory,
  tracedMemory,
  sqlite("sqlite"),
  sqlite("sqlite, no cache", 0),
  redis,
  redisSharded,
  postgres,
];
