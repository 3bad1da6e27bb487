import type Database from "better-sqlite3";
import { MemoryError } from "../../core/errors.js";
import type { Labels, MemoryEvent, ThreadState } from "../../core/types.js";
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
import { fileIdentity, lockDatabaseFile, openDatabase } from "./connection.js";
import { SqliteEvents } from "./events.js";
import { sqliteHealth } from "./health.js";
import { MessageCache } from "./message-cache.js";
import { SqliteReads } from "./reads.js";
import { SqliteTtl } from "./ttl.js";
import { WriteWorker } from "./worker-client.js";
import type { WriteOp } from "./writes/ops.js";
import type { Committed } from "./writes/outcomes.js";

export { MESSAGE_QUERIES, SQLITE_SCHEMA_VERSION } from "./schema.js";

/** Default of --sqlite-cache-mb: suits a 2-core, 4 GiB node. */
export const DEFAULT_SQLITE_CACHE_BYTES = 256 * 1024 * 1024;

/** Default bound of the write queue: writes posted to the worker and not yet answered. */
export const DEFAULT_MAX_QUEUED_WRITES = 4096;

/** Default grace of close(): how long the worker may take to finish what it was handed. */
export const DEFAULT_CLOSE_GRACE_MS = 10_000;

/** Options of the SQLite store beyond the limits every store shares. */
export interface SqliteStoreOptions {
  /**
   * How long opening waits for another connection to let go of the file (a
   * previous server still shutting down) before refusing. Default 5000.
   */
  busyTimeoutMs?: number;
  /**
   * Memory the store may use for caches, in bytes (see cacheBudget): SQLite's
   * page cache of each of its two connections, and the message cache of
   * recently used threads. Default DEFAULT_SQLITE_CACHE_BYTES; 0 turns the
   * message cache off (each connection keeps a 1 MiB page cache).
   */
  cacheSize?: number;
  /**
   * Writes waiting for the disk beyond which further writes are refused with
   * UNAVAILABLE. Default DEFAULT_MAX_QUEUED_WRITES.
   */
  maxQueuedWrites?: number;
  /**
   * The database's size limit in bytes (PRAGMA max_page_count, rounded down
   * to pages): writes past it fail as on a full disk. Default: SQLite's own.
   */
  maxDatabaseBytes?: number;
}

/**
 * How the cache budget is split: each of the two connections (the reads on
 * the event loop, the writes in the worker) gets an eighth as SQLite page
 * cache (at least 1 MiB), the message cache the rest.
 */
export function cacheBudget(bytes: number): { pageCacheBytes: number; messageCacheBytes: number } {
  const pageCacheBytes = Math.max(1024 * 1024, Math.floor(bytes / 8));
  return { pageCacheBytes, messageCacheBytes: Math.max(0, bytes - 2 * pageCacheBytes) };
}

/**
 * The SQLite store: durable state for one server process, in one file
 * (better-sqlite3, WAL journal).
 *
 * Durability. `synchronous = FULL` in WAL mode: every write (Add, Rewind,
 * Clear, summary commit, lease) is committed in a transaction whose WAL
 * frames are fsynced before the call returns. So:
 * - process crash (kill -9, OOM kill, a fatal error): every acknowledged write
 *   survives; a write that was not acknowledged is either wholly there or
 *   wholly absent (one Add's messages are never partly stored);
 * - power loss or OS crash: the same, provided the disk honours fsync (a
 *   volatile write cache that ignores flushes, or macOS, where fsync does not
 *   flush the drive, can lose the newest acknowledged writes; the file stays
 *   consistent either way).
 * NORMAL would survive a process crash too, but on power loss it rolls back
 * the newest commits: seqs and event ids already acknowledged would then be
 * handed out again for other messages, and a client's resume token could
 * silently skip events.
 *
 * Writes off the event loop, committed in groups. A worker thread
 * (write-worker.ts; worker-client.ts is this side of it) owns the write
 * connection. Writes that reach it while it commits form the next group:
 * one transaction, one fsync, each write in its own savepoint (one that
 * fails, e.g. failed_precondition or a quota, is rolled back alone); each is
 * answered after that COMMIT (writes/group-commit.ts). When the file or the
 * disk fails (full, locked by another process, read-only, an I/O error)
 * each write's outcome is still what the file holds, a full disk being
 * resource_exhausted and the rest unavailable. At most `maxQueuedWrites`
 * writes wait; more are refused with unavailable; an Add or a Rewind still
 * queued at its deadline is refused unstored. Each write is a function of
 * its own in writes/ (appends.ts, rewind.ts, folds.ts, clears.ts,
 * imports.ts, forks.ts; segments.ts the frozen segments they share); the
 * decisions are the core's pure functions. Reads run on
 * this thread on a connection of their own (reads.ts): WAL lets them read
 * the last commit while the worker writes, so no Get waits for an fsync.
 *
 * One process per file. Two server processes on one file are not supported:
 * subscribers only hear events logged by their own process, and fold leases
 * held by a previous process are dropped on open. The store holds the lock of
 * a small file beside the database (PATH-lock, connection.ts
 * lockDatabaseFile), so a second process (or a second store in this one)
 * waits `busyTimeoutMs` and is then refused; the lock goes with the process,
 * so a restart after a crash opens the file at once.
 *
 * A Get reads only what it can return (Store.read's view): the newest
 * messages, and a summary thread's unfolded ones, by one range search on the
 * messages table's primary key (segment, seq) per segment of the thread's
 * lineage it touches (lineage.ts: a thread never forked has one). Because this process is the
 * file's only writer, it also keeps the newest messages of recently used
 * threads in memory (MessageCache, bounded in bytes), updated by each commit
 * as its answer comes back from the worker (a Rewind cuts it back, since the
 * next Add reuses the dropped seqs). Neither a Get nor an Add costs more on
 * a long thread: trimming reads only the messages it drops.
 *
 * Events and cursors: events.ts.
 */
export function createSqliteStore(
  path: string,
  limits: Partial<StoreLimits> = {},
  options: SqliteStoreOptions = {},
): Store {
  const busyTimeoutMs = options.busyTimeoutMs ?? 5000;
  const budget = cacheBudget(options.cacheSize ?? DEFAULT_SQLITE_CACHE_BYTES);
  const lock = lockDatabaseFile(path, busyTimeoutMs);
  let db: Database.Database;
  try {
    db = openDatabase(path, busyTimeoutMs, budget.pageCacheBytes);
  } catch (err) {
    lock.close();
    throw err;
  }
  const pageSize = Number(db.pragma("page_size", { simple: true }));
  return new SqliteStore(path, db, lock, budget.messageCacheBytes, (onCommitted) => {
    const { maxDatabaseBytes } = options;
    return new WriteWorker(
      {
        path,
        busyTimeoutMs,
        pageCacheBytes: budget.pageCacheBytes,
        limits: { ...DEFAULT_STORE_LIMITS, ...limits },
        ...(maxDatabaseBytes === undefined
          ? {}
          : { maxPageCount: Math.max(1, Math.floor(maxDatabaseBytes / pageSize)) }),
      },
      options.maxQueuedWrites ?? DEFAULT_MAX_QUEUED_WRITES,
      onCommitted,
    );
  });
}

/** The Store, assembled: reads.ts and events.ts on this thread, writes through the worker. */
class SqliteStore implements Store {
  readonly #path: string;
  readonly #db: Database.Database;
  readonly #lock: Database.Database;
  /** What the path must still name for this process to be serving that file (see health). */
  readonly #openedIdentity: string | undefined;
  readonly #cache: MessageCache;
  readonly #events: SqliteEvents;
  readonly #reads: SqliteReads;
  /** The sweep's read side (its writes run in the worker). */
  readonly #ttl: SqliteTtl;
  readonly #worker: WriteWorker;
  #closed = false;
  #closing: Promise<void> | undefined;

  constructor(
    path: string,
    db: Database.Database,
    lock: Database.Database,
    messageCacheBytes: number,
    startWorker: (onCommitted: (c: Committed<unknown>, namespace: string) => void) => WriteWorker,
  ) {
    this.#path = path;
    this.#db = db;
    this.#lock = lock;
    this.#openedIdentity = fileIdentity(path);
    this.#cache = new MessageCache(messageCacheBytes);
    this.#events = new SqliteEvents(db);
    this.#ttl = new SqliteTtl(db);
    try {
      this.#worker = startWorker((c, namespace) => this.#applyCommitted(c, namespace));
    } catch (err) {
      db.close();
      lock.close();
      throw err;
    }
    this.#reads = new SqliteReads(db, this.#cache, (ns, id) => this.#worker.writing(ns, id));
  }

  async append(cmd: AppendCommand): Promise<AppendResult> {
    const op: WriteOp = { kind: "append", cmd };
    return (await this.#worker.write<AppendResult>(op, cmd.namespace, cmd.threadId, cmd.deadline))
      .value;
  }

  async rewind(cmd: RewindCommand): Promise<RewindResult> {
    const op: WriteOp = { kind: "rewind", cmd };
    return (await this.#worker.write<RewindResult>(op, cmd.namespace, cmd.threadId, cmd.deadline))
      .value;
  }

  /** The fork writes the new thread and may freeze the parent's head: both are held as in flight. */
  async fork(cmd: ForkCommand): Promise<ForkResult> {
    const op: WriteOp = { kind: "fork", cmd };
    const threads = [cmd.newThreadId, cmd.threadId];
    return (await this.#worker.write<ForkResult>(op, cmd.namespace, threads, cmd.deadline)).value;
  }

  async read(
    namespace: string,
    threadId: string,
    view?: ReadView,
  ): Promise<ThreadSnapshot | undefined> {
    this.#assertOpen();
    return this.#reads.read(namespace, threadId, view);
  }

  async getThread(namespace: string, threadId: string): Promise<ThreadState | undefined> {
    this.#assertOpen();
    return this.#reads.getThread(namespace, threadId);
  }

  commitSummary(cmd: CommitSummaryCommand): Promise<ThreadState | undefined> {
    return this.#commit({ kind: "commitSummary", cmd }, cmd.namespace, cmd.threadId);
  }

  async recordFoldFailure(cmd: FoldFailureCommand): Promise<void> {
    await this.#commit({ kind: "recordFoldFailure", cmd }, cmd.namespace, cmd.threadId);
  }

  acquireFoldLease(namespace: string, threadId: string, ttlMs: number) {
    const op: WriteOp = { kind: "acquireLease", namespace, threadId, ttlMs };
    return this.#commit<number | undefined>(op, namespace, threadId);
  }

  async releaseFoldLease(namespace: string, threadId: string, token: number): Promise<void> {
    const op: WriteOp = { kind: "releaseLease", namespace, threadId, token };
    await this.#commit(op, namespace, threadId);
  }

  clear(namespace: string, threadId: string, now: number): Promise<boolean> {
    return this.#commit({ kind: "clear", namespace, threadId, now }, namespace, threadId);
  }

  async clearAll(namespace: string, now: number): Promise<number> {
    let total = 0;
    for (;;) {
      // Each batch is its own transaction; other calls run in between.
      const op: WriteOp = { kind: "clearBatch", namespace, now, limit: CLEAR_BATCH };
      const n = await this.#commit<number>(op, namespace, "*");
      total += n;
      if (n < CLEAR_BATCH) return total;
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
    return this.#reads.listThreads(namespace, after, limit, labels, forksOf);
  }

  /** An import sharing its parent's prefix may freeze the parent's head: both are held as in flight, as a Fork's. */
  async importThread(cmd: ImportThreadCommand): Promise<boolean> {
    const op: WriteOp = { kind: "import", cmd };
    const threads =
      cmd.shareFrom === undefined ? [cmd.threadId] : [cmd.threadId, cmd.shareFrom.threadId];
    return (await this.#worker.write<boolean>(op, cmd.namespace, threads)).value;
  }

  async sweepExpired(now: number, limit: number): Promise<number> {
    this.#assertOpen();
    let removed = 0;
    // Each thread is its own write (checked again in the worker), so a large
    // sweep never holds the file long and other writes go in between.
    for (const due of this.#ttl.due.all(now, Math.max(0, limit))) {
      const op: WriteOp = {
        kind: "sweepOne",
        namespace: due.namespace,
        threadId: due.thread_id,
        now,
      };
      if (await this.#commit<boolean>(op, due.namespace, due.thread_id)) removed++;
    }
    return removed;
  }

  async readEvents(namespace: string, cursor: string, limit: number): Promise<MemoryEvent[]> {
    this.#assertOpen();
    return this.#events.readEvents(namespace, cursor, limit);
  }

  async headCursor(namespace: string): Promise<string> {
    this.#assertOpen();
    return this.#events.headCursor(namespace);
  }

  compareCursors(a: string, b: string): number {
    return this.#events.compareCursors(a, b);
  }

  subscribe(namespace: string, listener: (events: MemoryEvent[]) => void): () => void {
    return this.#events.subscribe(namespace, listener);
  }

  /** See health.ts. */
  health(timeoutMs: number): Promise<StoreHealth> {
    if (this.#closed)
      return Promise.resolve({ serving: false, reason: "the SQLite store is closed" });
    return sqliteHealth(this.#worker, this.#path, this.#openedIdentity, timeoutMs);
  }

  /** See WriteWorker.close; then the read connection and the file's lock go. */
  close(graceMs = DEFAULT_CLOSE_GRACE_MS): Promise<void> {
    this.#closing ??= (async () => {
      this.#closed = true;
      await this.#worker.close(graceMs);
      this.#events.clear();
      this.#cache.clear();
      this.#db.close();
      this.#lock.close();
    })();
    return this.#closing;
  }

  #assertOpen(): void {
    if (this.#closed) throw new MemoryError("unavailable", "the store is closed");
  }

  /** Runs a write in the worker; its value once the group holding it has committed. */
  async #commit<T>(op: WriteOp, namespace: string, threadId: string): Promise<T> {
    return (await this.#worker.write<T>(op, namespace, threadId)).value;
  }

  /**
   * Brings the cache up to date with a commit and publishes its events. A
   * new thread's messages are all known; an existing one's entry, if any,
   * is brought up to date (or dropped), never left stale.
   */
  #applyCommitted(c: Committed<unknown>, namespace: string): void {
    const messages = c.messages;
    if (messages !== undefined) {
      const added = messages.added.map((m) => Object.freeze(m));
      if (messages.created) this.#cache.set(messages.incarnation, [], true, 0);
      this.#cache.update(
        messages.incarnation,
        messages.lastSeqBefore,
        added,
        messages.droppedThrough,
      );
    }
    const rewound = c.rewound;
    if (rewound !== undefined) {
      this.#cache.rewind(rewound.incarnation, rewound.lastSeqBefore, rewound.toSeq);
    }
    for (const incarnation of c.ended ?? []) this.#cache.delete(incarnation);
    this.#events.publish(namespace, c.events);
  }
}
