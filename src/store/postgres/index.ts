import pg from "pg";
import { MemoryError } from "../../core/errors.js";
import type { Labels, MemoryEvent, ThreadState } from "../../core/types.js";
import { DEFAULT_STORE_LIMITS } from "../memory-store.js";
import { ResumeTokens } from "../resume-token.js";
import {
  type AppendCommand,
  type AppendResult,
  CLEAR_BATCH,
  type CommitSummaryCommand,
  type FoldFailureCommand,
  type ImportThreadCommand,
  type ReadView,
  type Store,
  type StoreHealth,
  type StoreLimits,
  type ThreadSnapshot,
} from "../store.js";
import { PG_TYPES } from "./codec.js";
import { headPosition, type Query, readEventsAfter } from "./events.js";
import { GroupCommitter } from "./group-commit.js";
import { acquireFoldLease, releaseFoldLease } from "./leases.js";
import { dueThreads, getThread, listThreads, readThread } from "./reads.js";
import { migrate, readIncarnation } from "./schema.js";
import { EventFeed } from "./subscriptions.js";
import type { WriteOp } from "./writes.js";

export { POSTGRES_SCHEMA_VERSION } from "./schema.js";

/** Default of --postgres-pool-size: connections to Postgres per server (plus one for LISTEN). */
export const DEFAULT_POSTGRES_POOL_SIZE = 10;

/** Default grace of close(): how long writes already handed over may take to commit. */
export const DEFAULT_CLOSE_GRACE_MS = 10_000;

export interface PostgresStoreOptions {
  /** Pool connections (reads, write groups, leases). Default DEFAULT_POSTGRES_POOL_SIZE. */
  poolSize?: number;
  /** Writes waiting for a transaction beyond which more are refused. Default 4096. */
  maxQueuedWrites?: number;
}

/** How long a connection attempt and a statement may take: bounded, never a hang. */
const CONNECT_TIMEOUT_MS = 10_000;
const STATEMENT_TIMEOUT_MS = 30_000;

/**
 * The Postgres store: state shared by any number of server replicas, in
 * one PostgreSQL database (or a Citus cluster: schema.ts states the key
 * layout), through node-postgres.
 *
 * Durability: an Add is acknowledged only after its transaction's COMMIT
 * returned, so it is as durable as the server's synchronous_commit makes a
 * commit: `on` (the default) flushes the WAL to disk first (and, with
 * synchronous standbys configured, waits for them, as remote_apply or
 * remote_write say); `off` or `local` trade the newest commits on a
 * Postgres crash (not a windlass crash) for speed. The store sets nothing:
 * the database's, role's or server's setting applies.
 *
 * Writes are committed in groups (group-commit.ts); reads are single
 * statements on the pool; Watch reads the events table, woken by
 * LISTEN/NOTIFY (subscriptions.ts). Cursors carry the database's id and a
 * MAC under its secret (meta: its incarnation), so they stay valid across
 * restarts and replicas, and a restored or other database's are out_of_range.
 */
export async function createPostgresStore(
  url: string,
  limits: Partial<StoreLimits> = {},
  options: PostgresStoreOptions = {},
): Promise<Store> {
  const lim = { ...DEFAULT_STORE_LIMITS, ...limits };
  const poolSize = options.poolSize ?? DEFAULT_POSTGRES_POOL_SIZE;
  const config: pg.ClientConfig = {
    connectionString: url,
    types: PG_TYPES,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    statement_timeout: STATEMENT_TIMEOUT_MS,
    keepAlive: true,
    application_name: "windlass-memory",
  };
  const pool = new pg.Pool({ ...config, max: poolSize });
  // A connection's error (Postgres restarted) reaches the query it was running, or
  // the pool drops the idle connection: never an unhandled 'error' event (a crash).
  pool.on("error", () => {});
  pool.on("connect", (client) => client.on("error", () => {}));
  try {
    await migrate(pool);
  } catch (err) {
    await pool.end().catch(() => {});
    throw err;
  }
  let incarnation = await readIncarnation(pool);
  let tokens = tokensOf(incarnation);
  let closed = false;

  /** Reads on the pool: a lost connection is unavailable, never a raw driver error. */
  const q: Query = async (sql, params) => {
    try {
      return (await pool.query(sql, params)).rows;
    } catch (err) {
      throw err instanceof MemoryError ? err : unavailable("read", err);
    }
  };

  const feed = new EventFeed({
    q,
    connect: () => {
      const client = new pg.Client(config);
      return client;
    },
    read: (namespace, after) => readEventsAfter(q, tokens, namespace, after, 500),
    sameIncarnation: async () => {
      const now = await readIncarnation(pool);
      if (
        now.databaseId === incarnation.databaseId &&
        now.tokenSecret === incarnation.tokenSecret
      ) {
        return true;
      }
      incarnation = now;
      tokens = tokensOf(now);
      return false;
    },
  });
  const writes = new GroupCommitter(
    pool,
    lim,
    {
      maxQueued: options.maxQueuedWrites ?? 4096,
      maxGroups: Math.max(1, Math.floor(poolSize / 2)),
      maxGroupSize: 256,
    },
    (logged) => {
      for (const l of logged) feed.committed(l.namespace, l.first);
    },
  );

  function write<T>(op: WriteOp, deadline?: number): Promise<T> {
    if (closed) return Promise.reject(new MemoryError("unavailable", "the store is closed"));
    return writes.submit(op, deadline) as Promise<T>;
  }

  function assertOpen(): void {
    if (closed) throw new MemoryError("unavailable", "the store is closed");
  }

  async function lease<T>(f: () => Promise<T>): Promise<T> {
    assertOpen();
    try {
      return await f();
    } catch (err) {
      throw err instanceof MemoryError ? err : unavailable("take or release a fold lease", err);
    }
  }

  return {
    append: (cmd: AppendCommand) => write<AppendResult>({ kind: "append", cmd }, cmd.deadline),

    async read(
      namespace: string,
      threadId: string,
      view?: ReadView,
    ): Promise<ThreadSnapshot | undefined> {
      assertOpen();
      return readThread(q, namespace, threadId, view);
    },

    async getThread(namespace: string, threadId: string): Promise<ThreadState | undefined> {
      assertOpen();
      return getThread(q, namespace, threadId);
    },

    commitSummary: (cmd: CommitSummaryCommand) =>
      write<ThreadState | undefined>({ kind: "commitSummary", cmd }),

    recordFoldFailure: (cmd: FoldFailureCommand) => write<void>({ kind: "recordFoldFailure", cmd }),

    acquireFoldLease: (namespace, threadId, ttlMs) =>
      lease(() => acquireFoldLease(pool, namespace, threadId, ttlMs)),

    releaseFoldLease: (namespace, threadId, token) =>
      lease(() => releaseFoldLease(pool, namespace, threadId, token)),

    clear: (namespace: string, threadId: string, now: number) =>
      write<boolean>({ kind: "clear", namespace, threadId, now }),

    async clearAll(namespace: string, now: number): Promise<number> {
      let total = 0;
      for (;;) {
        // Each batch is its own write: other writes go in between.
        const n = await write<number>({ kind: "clearBatch", namespace, now, limit: CLEAR_BATCH });
        total += n;
        if (n < CLEAR_BATCH) return total;
      }
    },

    async listThreads(namespace: string, after: string, limit: number, labels?: Labels) {
      assertOpen();
      return listThreads(q, namespace, after, limit, labels);
    },

    importThread: (cmd: ImportThreadCommand) => write<boolean>({ kind: "import", cmd }),

    async sweepExpired(now: number, limit: number): Promise<number> {
      assertOpen();
      const due = await dueThreads(q, now, limit);
      // Each thread is its own write (checked again under the namespace's lock).
      const swept = await Promise.all(
        due.map((d) =>
          write<boolean>({ kind: "sweepOne", namespace: d.namespace, threadId: d.thread_id, now }),
        ),
      );
      return swept.filter(Boolean).length;
    },

    async readEvents(namespace: string, cursor: string, limit: number): Promise<MemoryEvent[]> {
      assertOpen();
      return readEventsAfter(q, tokens, namespace, tokens.open(namespace, cursor), limit);
    },

    async headCursor(namespace: string): Promise<string> {
      assertOpen();
      return tokens.issue(namespace, await headPosition(q, namespace));
    },

    compareCursors(a: string, b: string): number {
      return tokens.positionOf(a) - tokens.positionOf(b);
    },

    subscribe: (namespace, listener) => feed.subscribe(namespace, listener),

    /** Serving when a `SELECT 1` on a pool connection answers within `timeoutMs`. */
    async health(timeoutMs: number): Promise<StoreHealth> {
      if (closed) return { serving: false, reason: "the Postgres store is closed" };
      return probe(pool, timeoutMs);
    },

    async close(graceMs = DEFAULT_CLOSE_GRACE_MS): Promise<void> {
      if (closed) return;
      closed = true;
      await writes.close(graceMs);
      await feed.close();
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        pool.end().catch(() => {}),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, Math.max(250, graceMs));
        }),
      ]);
      clearTimeout(timer);
    },
  };
}

async function probe(pool: pg.Pool, timeoutMs: number): Promise<StoreHealth> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), timeoutMs);
  });
  const ask = (async () => {
    const c = await pool.connect();
    try {
      await c.query("SELECT 1");
      c.release();
      return "ok" as const;
    } catch (err) {
      c.release(err instanceof Error ? err : true);
      throw err;
    }
  })();
  const answer = await Promise.race([ask.catch((err: unknown) => err), timeout]);
  clearTimeout(timer);
  if (answer === "late") {
    // A late answer still returns its connection to the pool: checks hold at most the pool.
    void ask.catch(() => {});
    return { serving: false, reason: `Postgres did not answer within ${timeoutMs} ms` };
  }
  if (answer === "ok") return { serving: true };
  return { serving: false, reason: `Postgres cannot be reached: ${describe(answer)}` };
}

function tokensOf(i: { databaseId: string; tokenSecret: string }): ResumeTokens {
  return new ResumeTokens(
    i.databaseId,
    i.tokenSecret,
    "it refers to the history of another database",
  );
}

function describe(err: unknown): string {
  // Driver messages name the host at most, never the password of the URL.
  return err instanceof Error ? err.message : String(err);
}

function unavailable(what: string, err: unknown): MemoryError {
  return new MemoryError("unavailable", `the Postgres store could not ${what} (${describe(err)})`, {
    cause: err,
  });
}
