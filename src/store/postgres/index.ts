import pg from "pg";
import { MemoryError } from "../../core/errors.js";
import type { Labels, MemoryEvent, ThreadState } from "../../core/types.js";
import { ResumeTokens } from "../resume-token.js";
import {
  type AppendCommand,
  type AppendResult,
  CLEAR_BATCH,
  type CommitSummaryCommand,
  DEFAULT_STORE_LIMITS,
  type FoldFailureCommand,
  type ForkCommand,
  type ForkResult,
  type ImportThreadCommand,
  type ReadView,
  type RewindCommand,
  type RewindResult,
  type Store,
  type StoreHealth,
  type StoreLimits,
  type ThreadSnapshot,
} from "../store.js";
import { PG_TYPES } from "./codec.js";
import { headPosition, type Query, readEventsAfter } from "./events.js";
import { type GroupCommitOptions, GroupCommitter } from "./group-commit.js";
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
  /**
   * How long a statement may run on the server (statement_timeout), ms;
   * the client gives up on an answer after twice that (a network that
   * black-holes the connection), drops the connection and answers the
   * write as not stored, or as of unknown outcome when it was the COMMIT.
   * Default 30000.
   */
  statementTimeoutMs?: number;
}

/** How long a connection attempt and a statement may take: bounded, never a hang. */
const CONNECT_TIMEOUT_MS = 10_000;
const STATEMENT_TIMEOUT_MS = 30_000;
/** Idle time before TCP keepalive probes a connection (the LISTEN one is idle for good). */
const KEEPALIVE_DELAY_MS = 10_000;

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
  const config: pg.ClientConfig = {
    connectionString: url,
    types: PG_TYPES,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    statement_timeout: options.statementTimeoutMs ?? STATEMENT_TIMEOUT_MS,
    query_timeout: 2 * (options.statementTimeoutMs ?? STATEMENT_TIMEOUT_MS),
    keepAlive: true,
    keepAliveInitialDelayMillis: KEEPALIVE_DELAY_MS,
    application_name: "windlass-memory",
  };
  const poolSize = options.poolSize ?? DEFAULT_POSTGRES_POOL_SIZE;
  const pool = new pg.Pool({ ...config, max: poolSize });
  // A connection's error (Postgres restarted) reaches the query it was running, or
  // the pool drops the idle connection: never an unhandled 'error' event (a crash).
  pool.on("error", () => {});
  pool.on("connect", (client) => client.on("error", () => {}));
  try {
    await migrate(pool);
    const incarnation = await readIncarnation(pool);
    return new PostgresStore(
      pool,
      config,
      incarnation,
      { ...DEFAULT_STORE_LIMITS, ...limits },
      {
        maxQueued: options.maxQueuedWrites ?? 4096,
        maxGroups: Math.max(1, Math.floor(poolSize / 2)),
        maxGroupSize: 256,
      },
    );
  } catch (err) {
    await pool.end().catch(() => {});
    throw err;
  }
}

type Incarnation = { databaseId: string; tokenSecret: string };

class PostgresStore implements Store {
  readonly #pool: pg.Pool;
  readonly #feed: EventFeed;
  readonly #writes: GroupCommitter;
  #incarnation: Incarnation;
  #tokens: ResumeTokens;
  #closed = false;

  constructor(
    pool: pg.Pool,
    config: pg.ClientConfig,
    incarnation: Incarnation,
    lim: StoreLimits,
    groups: GroupCommitOptions,
  ) {
    this.#pool = pool;
    this.#incarnation = incarnation;
    this.#tokens = tokensOf(incarnation);
    this.#feed = new EventFeed({
      q: this.#q,
      connect: () => new pg.Client(config),
      read: (namespace, after) => readEventsAfter(this.#q, this.#tokens, namespace, after, 500),
      sameIncarnation: () => this.#sameIncarnation(),
    });
    this.#writes = new GroupCommitter(pool, lim, groups, (logged) => {
      for (const l of logged) this.#feed.committed(l.namespace, l.first);
    });
  }

  /** Reads on the pool: a lost connection is unavailable, never a raw driver error. */
  readonly #q: Query = async (sql, params) => {
    try {
      return (await this.#pool.query(sql, params)).rows;
    } catch (err) {
      throw err instanceof MemoryError ? err : unavailable("read", err);
    }
  };

  /** Whether the database still has the incarnation adopted; adopts a new one if not. */
  async #sameIncarnation(): Promise<boolean> {
    return this.#adopt(await readIncarnation(this.#pool));
  }

  #adopt(now: Incarnation): boolean {
    const was = this.#incarnation;
    if (now.databaseId === was.databaseId && now.tokenSecret === was.tokenSecret) return true;
    this.#incarnation = now;
    this.#tokens = tokensOf(now);
    return false;
  }

  #write<T>(op: WriteOp, deadline?: number): Promise<T> {
    if (this.#closed) return Promise.reject(closedError());
    return this.#writes.submit(op, deadline) as Promise<T>;
  }

  #assertOpen(): void {
    if (this.#closed) throw closedError();
  }

  async #lease<T>(f: () => Promise<T>): Promise<T> {
    this.#assertOpen();
    try {
      return await f();
    } catch (err) {
      throw err instanceof MemoryError ? err : unavailable("take or release a fold lease", err);
    }
  }

  append(cmd: AppendCommand): Promise<AppendResult> {
    return this.#write({ kind: "append", cmd }, cmd.deadline);
  }

  rewind(cmd: RewindCommand): Promise<RewindResult> {
    return this.#write({ kind: "rewind", cmd }, cmd.deadline);
  }

  fork(cmd: ForkCommand): Promise<ForkResult> {
    return this.#write({ kind: "fork", cmd }, cmd.deadline);
  }

  async read(
    namespace: string,
    threadId: string,
    view?: ReadView,
  ): Promise<ThreadSnapshot | undefined> {
    this.#assertOpen();
    return readThread(this.#q, namespace, threadId, view);
  }

  async getThread(namespace: string, threadId: string): Promise<ThreadState | undefined> {
    this.#assertOpen();
    return getThread(this.#q, namespace, threadId);
  }

  commitSummary(cmd: CommitSummaryCommand): Promise<ThreadState | undefined> {
    return this.#write({ kind: "commitSummary", cmd });
  }

  recordFoldFailure(cmd: FoldFailureCommand): Promise<void> {
    return this.#write({ kind: "recordFoldFailure", cmd });
  }

  acquireFoldLease(
    namespace: string,
    threadId: string,
    ttlMs: number,
  ): Promise<number | undefined> {
    return this.#lease(() => acquireFoldLease(this.#pool, namespace, threadId, ttlMs));
  }

  releaseFoldLease(namespace: string, threadId: string, token: number): Promise<void> {
    return this.#lease(() => releaseFoldLease(this.#pool, namespace, threadId, token));
  }

  clear(namespace: string, threadId: string, now: number): Promise<boolean> {
    return this.#write({ kind: "clear", namespace, threadId, now });
  }

  async clearAll(namespace: string, now: number): Promise<number> {
    let total = 0;
    for (;;) {
      // Each batch is its own write: other writes go in between.
      const n = await this.#write<number>({
        kind: "clearBatch",
        namespace,
        now,
        limit: CLEAR_BATCH,
      });
      total += n;
      if (n < CLEAR_BATCH) return total;
      // Writes that came meanwhile are answered before the next batch (Store.clearAll).
      await this.#writes.others();
    }
  }

  async listThreads(
    namespace: string,
    after: string,
    limit: number,
    labels?: Labels,
    forksOf?: string,
  ): Promise<string[]> {
    this.#assertOpen();
    return listThreads(this.#q, namespace, after, limit, labels, forksOf);
  }

  importThread(cmd: ImportThreadCommand): Promise<boolean> {
    return this.#write({ kind: "import", cmd });
  }

  async sweepExpired(now: number, limit: number): Promise<number> {
    this.#assertOpen();
    const due = await dueThreads(this.#q, now, limit);
    // Each thread is its own write (checked again under the namespace's lock).
    const swept = await Promise.all(
      due.map((d) =>
        this.#write<boolean>({
          kind: "sweepOne",
          namespace: d.namespace,
          threadId: d.thread_id,
          now,
        }),
      ),
    );
    return swept.filter(Boolean).length;
  }

  async readEvents(namespace: string, cursor: string, limit: number): Promise<MemoryEvent[]> {
    this.#assertOpen();
    const tokens = this.#tokens;
    return readEventsAfter(this.#q, tokens, namespace, tokens.open(namespace, cursor), limit);
  }

  async headCursor(namespace: string): Promise<string> {
    this.#assertOpen();
    return this.#tokens.issue(namespace, await headPosition(this.#q, namespace));
  }

  compareCursors(a: string, b: string): number {
    return this.#tokens.positionOf(a) - this.#tokens.positionOf(b);
  }

  subscribe(namespace: string, listener: (events: MemoryEvent[]) => void): () => void {
    return this.#feed.subscribe(namespace, listener);
  }

  /**
   * Serving when the database answers a read of its incarnation (as cheap
   * as `SELECT 1`) on a pool connection within `timeoutMs`.
   */
  async health(timeoutMs: number): Promise<StoreHealth> {
    if (this.#closed) return { serving: false, reason: "the Postgres store is closed" };
    const answer = await probe(this.#pool, timeoutMs);
    if ("incarnation" in answer) {
      // A database put in its place (a restore of another, a failover to a
      // copy) is seen within a health interval, watched or not.
      if (!this.#adopt(answer.incarnation)) this.#feed.historyChanged();
      return { serving: true };
    }
    return answer;
  }

  /**
   * Writes already handed over get `graceMs` to commit; then those left are
   * refused (unavailable) and the connections closed, within the grace
   * plus at most as long again for the pool to end.
   */
  async close(graceMs = DEFAULT_CLOSE_GRACE_MS): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#writes.close(graceMs);
    await this.#feed.close();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.#pool.end().catch(() => {}),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, Math.max(250, graceMs));
      }),
    ]);
    clearTimeout(timer);
  }
}

function closedError(): MemoryError {
  return new MemoryError("unavailable", "the store is closed");
}

async function probe(
  pool: pg.Pool,
  timeoutMs: number,
): Promise<StoreHealth | { incarnation: Incarnation }> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), timeoutMs);
  });
  const ask = readIncarnation(pool);
  const answer = await Promise.race([ask.catch((err: unknown) => ({ err })), timeout]);
  clearTimeout(timer);
  if (answer === "late") {
    // A late answer still returns its connection to the pool: checks hold at most the pool.
    void ask.catch(() => {});
    return { serving: false, reason: `Postgres did not answer within ${timeoutMs} ms` };
  }
  if ("err" in answer) {
    return { serving: false, reason: `Postgres cannot be reached: ${describe(answer.err)}` };
  }
  return { incarnation: answer };
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
