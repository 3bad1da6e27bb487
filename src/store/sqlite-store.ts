import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import type Database from "better-sqlite3";
import { MemoryError } from "../core/errors.js";
import { recallSize } from "../core/recall.js";
import { isExpired } from "../core/ttl.js";
import type { Labels, MemoryEvent, StoredMessage, Strategy, ThreadState } from "../core/types.js";
import { historyLostError, ResumeTokens } from "./resume-token.js";
import { rewindPending } from "./rewind-pending.js";
import { SqliteLabels } from "./sqlite/labels.js";
import { MessageCache } from "./sqlite/message-cache.js";
import {
  type EventRow,
  fileIdentity,
  lockDatabaseFile,
  MESSAGE_QUERIES,
  type MessageRow,
  openDatabase,
  type ThreadRow,
  toMessage,
  toThread,
} from "./sqlite/schema.js";
import { SqliteTtl } from "./sqlite/ttl.js";
import { Activity, WriteGate } from "./sqlite/write-gate.js";
import type { WriteWorkerData } from "./sqlite/write-worker.js";
import {
  type Committed,
  fromWireError,
  type LoggedEvent,
  type QueuedWrite,
  queuedPastDeadline,
  type WireError,
  type WriteOp,
  type WriteOutcome,
} from "./sqlite/writer.js";
import {
  type AppendCommand,
  type AppendResult,
  CLEAR_BATCH,
  type CommitSummaryCommand,
  DEFAULT_STORE_LIMITS,
  type FoldFailureCommand,
  type ImportThreadCommand,
  READ_SLACK,
  type ReadView,
  type Store,
  type StoreHealth,
  type StoreLimits,
  type ThreadSnapshot,
} from "./store.js";

export { MESSAGE_QUERIES, SQLITE_SCHEMA_VERSION } from "./sqlite/schema.js";

/** Default of --sqlite-cache-mb: suits a 2-core, 4 GiB node. */
export const DEFAULT_SQLITE_CACHE_BYTES = 256 * 1024 * 1024;

/** Default bound of the write queue: writes posted to the worker and not yet answered. */
export const DEFAULT_MAX_QUEUED_WRITES = 4096;

/** Default grace of close(): how long the worker may take to finish what it was handed. */
export const DEFAULT_CLOSE_GRACE_MS = 10_000;

/**
 * After close's grace, how long the worker has to stop waiting for a lock
 * (it looks between slices of 25 ms) and then to end once terminated.
 */
const STOP_WAIT_MS = 250;

/** setTimeout fires at once for longer delays (24 days). */
const MAX_TIMER_DELAY_MS = 2_147_483_647;

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
 * The worker's compiled file: beside this module when it runs from dist/;
 * from the sources (vitest runs them as .ts), the build's copy, so tests need
 * `npm run build` first.
 */
function workerFile(): string {
  const here = import.meta.url;
  const url = here.endsWith(".ts")
    ? new URL("../../dist/src/store/sqlite/write-worker.js", here)
    : new URL("./sqlite/write-worker.js", here);
  const file = fileURLToPath(url);
  if (!existsSync(file)) {
    throw new Error(`the SQLite write worker ${file} is missing: run npm run build`);
  }
  return file;
}

interface Waiting {
  resolve: (c: Committed<unknown>) => void;
  reject: (err: Error) => void;
  /** The key of `inFlight` this write holds. */
  key: string;
  namespace: string;
  /** Its WriteGate slot, free again once the worker has answered. */
  slot: number;
  /** Refuses it at its call's deadline if the worker has not taken it. */
  timer?: NodeJS.Timeout;
  /** Already refused (deadline, close): the worker's answer only frees the slot. */
  refused?: boolean;
}

/**
 * The SQLite store: durable state for one server process, in one file
 * (better-sqlite3, WAL journal).
 *
 * Durability. `synchronous = FULL` in WAL mode: every write (Add, Clear,
 * summary commit, lease) is committed in a transaction whose WAL frames are
 * fsynced before the call returns. So:
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
 * (sqlite/write-worker.ts) owns the write connection. Writes that reach it
 * while it commits form the next group: one transaction, one fsync, each
 * write in its own savepoint (one that fails, e.g. failed_precondition or a
 * quota, is rolled back alone); each is answered after that COMMIT. When the
 * file or the disk fails (full, locked by another process, read-only, an I/O
 * error) each write's outcome is still what the file holds (writer.ts
 * runGroup), a full disk being resource_exhausted and the rest unavailable.
 * At most `maxQueuedWrites` writes wait; more are refused with unavailable;
 * an Add still queued at its deadline is refused unstored. Reads run
 * on this thread on a connection of their own: WAL lets them read the last
 * commit while the worker writes, so no Get waits for an fsync.
 *
 * One process per file. Two server processes on one file are not supported:
 * subscribers only hear events logged by their own process, and fold leases
 * held by a previous process are dropped on open. The store holds the lock of
 * a small file beside the database (PATH-lock, schema.ts lockDatabaseFile),
 * so a second process (or a second store in this one) waits `busyTimeoutMs`
 * and is then refused; the lock goes with the process, so a restart after a
 * crash opens the file at once.
 *
 * A Get reads only what it can return (Store.read's view): the newest
 * messages, and a summary thread's unfolded ones, by one range search on the
 * messages table's primary key (thread, seq). Because this process is the
 * file's only writer, it also keeps the newest messages of recently used
 * threads in memory (MessageCache, bounded in bytes), updated by each commit
 * as its answer comes back from the worker. A thread with a write still in
 * the worker is read from the file and not cached, since the file may
 * already be ahead of the cache. Neither a Get nor an Add costs more on a
 * long thread: trimming reads only the messages it drops.
 *
 * Events are published when the worker's answer arrives, in commit order; a
 * subscriber may also hear events committed just before it subscribed
 * (Watch reads the log by cursor, so it sees each once).
 *
 * Cursors (resume-token.ts) carry the random id of the database file, the
 * event's seq in its namespace and a MAC under a secret kept in `meta`, so a
 * token from another file (or from the memory store) is out_of_range instead
 * of resuming at an unrelated position, and tokens stay valid across restarts
 * of the same file.
 */
export function createSqliteStore(
  path: string,
  limits: Partial<StoreLimits> = {},
  options: SqliteStoreOptions = {},
): Store {
  const lim = { ...DEFAULT_STORE_LIMITS, ...limits };
  const busyTimeoutMs = options.busyTimeoutMs ?? 5000;
  const maxQueued = options.maxQueuedWrites ?? DEFAULT_MAX_QUEUED_WRITES;
  const budget = cacheBudget(options.cacheSize ?? DEFAULT_SQLITE_CACHE_BYTES);
  const file = workerFile();
  const lock = lockDatabaseFile(path, busyTimeoutMs);
  let db: Database.Database;
  try {
    db = openDatabase(path, busyTimeoutMs, budget.pageCacheBytes);
  } catch (err) {
    lock.close();
    throw err;
  }
  // What the path must still name for this process to be serving that file (see health).
  const openedIdentity = fileIdentity(path);
  const meta = db.prepare<[string], unknown>("SELECT value FROM meta WHERE key = ?").pluck();
  const databaseId = String(meta.get("database_id"));
  const tokenSecret = String(meta.get("token_secret"));
  const tokens = new ResumeTokens(
    databaseId,
    tokenSecret,
    "it refers to the history of another database",
    /^[0-9a-f]{12}\.\d{1,15}$/,
  );
  const cache = new MessageCache(budget.messageCacheBytes);
  // Read side of labels and retention (their writes run in the worker).
  const labelRows = new SqliteLabels(db);
  const ttlRows = new SqliteTtl(db);
  const listeners = new Map<string, Set<(events: MemoryEvent[]) => void>>();
  let closed = false;
  /** Why the worker stopped, once it has (then every write is refused). */
  let broken: Error | undefined;

  const sql = {
    thread: db.prepare<[string, string], ThreadRow>(
      "SELECT * FROM threads WHERE namespace = ? AND thread_id = ?",
    ),
    // An expired thread is gone for every call, though the sweep removes it later.
    listThreads: db
      .prepare<[string, string, number, number], string>(
        `SELECT thread_id FROM threads WHERE namespace = ? AND thread_id > ?
           AND (expire_at IS NULL OR expire_at > ?) ORDER BY thread_id LIMIT ?`,
      )
      .pluck(),
    messages: db
      .prepare<[number], MessageRow>(
        "SELECT seq, role, create_time, content, extra FROM messages WHERE thread = ? ORDER BY seq",
      )
      .raw(),
    messagesFrom: db.prepare<[number, number, number], MessageRow>(MESSAGE_QUERIES.from).raw(),
    oldestSeq: db.prepare<[number], number | null>(MESSAGE_QUERIES.oldestSeq).pluck(),
    eventLog: db.prepare<[string], { last_seq: number; dropped_through: number }>(
      "SELECT last_seq, dropped_through FROM event_logs WHERE namespace = ?",
    ),
    events: db.prepare<[string, number, number], EventRow>(
      "SELECT seq, thread_id, time, type, body FROM events WHERE namespace = ? AND seq > ? ORDER BY seq LIMIT ?",
    ),
  };

  // --- the write worker -------------------------------------------------

  const gate = WriteGate.allocate(maxQueued);
  /** Slots of gate not held by a write; a write takes one, so they bound the queue. */
  const freeSlots = Array.from({ length: maxQueued }, (_, i) => maxQueued - 1 - i);
  const workerData: WriteWorkerData = {
    path,
    busyTimeoutMs,
    pageCacheBytes: budget.pageCacheBytes,
    limits: lim,
    gate: gate.shared,
    gateCapacity: maxQueued,
    ...(options.maxDatabaseBytes === undefined
      ? {}
      : {
          maxPageCount: Math.max(
            1,
            Math.floor(options.maxDatabaseBytes / Number(db.pragma("page_size", { simple: true }))),
          ),
        }),
  };
  const worker = new Worker(file, { workerData });
  // Keeps the process alive only while writes wait for it (see write and settle).
  worker.unref();
  const waiting = new Map<number, Waiting>();
  /** Writes in the worker per thread ("ns\0id") and per namespace ("ns\0*", clearAll). */
  const inFlight = new Map<string, number>();
  let nextId = 1;
  let outbox: QueuedWrite[] = [];
  let workerClosed: Promise<void> | undefined;
  const exited = new Promise<void>((resolve) => worker.once("exit", () => resolve()));

  /**
   * Answers every write still waiting once the worker is gone (or given up
   * on): one it never took was not stored; one it took may have committed
   * just before, so its outcome is unknown (a retry with its request_id is
   * safe).
   */
  function fail(err: Error): void {
    broken ??= err;
    for (const [id, w] of waiting) {
      waiting.delete(id);
      clearTimeout(w.timer);
      if (w.refused === true) continue;
      release(w.key);
      const outcome = gate.cancel(w.slot)
        ? "this write was not stored"
        : "this write's outcome is unknown";
      w.reject(
        new MemoryError("unavailable", `the SQLite store stopped (${broken.message}): ${outcome}`),
      );
    }
  }

  worker.on("message", (m: WorkerMessage) => {
    switch (m.type) {
      case "done":
        for (const outcome of m.outcomes) settle(outcome);
        break;
      case "failed":
        fail(fromWireError(m.error));
        break;
      case "pong":
        answerPing(m.blockedBy);
        break;
      default:
        break;
    }
  });
  worker.on("error", (err) => fail(err));
  worker.on("exit", (code) => fail(new Error(`the write worker exited (code ${code})`)));

  function settle(outcome: WriteOutcome): void {
    const w = waiting.get(outcome.id);
    if (w === undefined) return;
    waiting.delete(outcome.id);
    clearTimeout(w.timer);
    gate.free(w.slot);
    freeSlots.push(w.slot);
    if (waiting.size === 0) worker.unref();
    if (w.refused === true) return;
    if (outcome.ok) {
      applyCommitted(outcome.committed, w.namespace);
      release(w.key);
      w.resolve(outcome.committed);
    } else {
      release(w.key);
      w.reject(fromWireError(outcome.error));
    }
  }

  function hold(key: string): void {
    inFlight.set(key, (inFlight.get(key) ?? 0) + 1);
  }

  function release(key: string): void {
    const n = (inFlight.get(key) ?? 1) - 1;
    if (n <= 0) inFlight.delete(key);
    else inFlight.set(key, n);
  }

  /** Whether a write that may change this thread is still in the worker. */
  function writing(namespace: string, threadId: string): boolean {
    return inFlight.has(`${namespace}\0${threadId}`) || inFlight.has(`${namespace}\0*`);
  }

  /** Posts every write queued since the last post as one message. */
  function post(): void {
    const writes = outbox;
    outbox = [];
    if (writes.length > 0) worker.postMessage({ type: "writes", writes });
  }

  /**
   * Hands `op` to the worker; resolves once the group holding it has
   * committed. With a `deadline`, a write the worker has not taken by then
   * is refused with deadline_exceeded, unstored.
   */
  function write<T>(
    op: WriteOp,
    namespace: string,
    threadId: string,
    deadline?: number,
  ): Promise<Committed<T>> {
    if (closed) return Promise.reject(new MemoryError("unavailable", "the store is closed"));
    if (broken !== undefined) {
      return Promise.reject(
        new MemoryError("unavailable", `the SQLite store stopped: ${broken.message}`),
      );
    }
    if (deadline !== undefined && Date.now() >= deadline) {
      return Promise.reject(queuedPastDeadline());
    }
    const slot = freeSlots.pop();
    if (slot === undefined) {
      return Promise.reject(
        new MemoryError(
          "unavailable",
          `the SQLite write queue is full (${maxQueued} writes waiting for the disk); retry with backoff`,
        ),
      );
    }
    const id = nextId++;
    if (waiting.size === 0) worker.ref();
    const key = `${namespace}\0${threadId}`;
    hold(key);
    gate.queue(slot);
    // After this turn's I/O callbacks: the writes of every call that arrived
    // together cross to the worker in one message.
    if (outbox.length === 0) setImmediate(post);
    outbox.push(deadline === undefined ? { id, slot, op } : { id, slot, op, deadline });
    return new Promise<Committed<T>>((resolve, reject) => {
      const w: Waiting = {
        resolve: resolve as (c: Committed<unknown>) => void,
        reject,
        key,
        namespace,
        slot,
      };
      // Beyond a timer's range the worker's own check at the deadline is enough.
      if (deadline !== undefined && deadline - Date.now() <= MAX_TIMER_DELAY_MS) {
        w.timer = setTimeout(() => refuse(w, queuedPastDeadline()), deadline - Date.now());
        w.timer.unref();
      }
      waiting.set(id, w);
    });
  }

  /** Refuses a write the worker has not taken; it stays in `waiting` until the worker answers. */
  function refuse(w: Waiting, err: MemoryError): void {
    if (w.refused === true || !gate.cancel(w.slot)) return;
    w.refused = true;
    release(w.key);
    w.reject(err);
  }

  // --- health: a ping the worker answers between groups -----------------

  /** The ping in flight (one at a time, shared by concurrent health calls). */
  let ping: Promise<string | undefined> | undefined;
  let answerPing: (error: string | undefined) => void = () => {};

  /** Resolves with the worker's answer: why writes cannot proceed, when its probe failed. */
  function askWorker(probe: boolean): Promise<string | undefined> {
    ping ??= new Promise<string | undefined>((resolve) => {
      answerPing = (error) => {
        ping = undefined;
        answerPing = () => {};
        resolve(error);
      };
      // Behind the writes queued so far: the answer says the worker got through them.
      post();
      worker.postMessage({ type: "ping", probe });
    });
    return ping;
  }

  function activityOf(): string {
    switch (gate.activity) {
      case Activity.waitingForLock:
        return "it is waiting for a lock another process holds on the database";
      case Activity.committing:
        return "it is inside a transaction (a slow or hung disk?)";
      default:
        return "it has no write in progress (its thread is starved, or this one is)";
    }
  }

  /** Brings the cache up to date with a commit and publishes its events. */
  function applyCommitted(c: Committed<unknown>, namespace: string): void {
    const messages = c.messages;
    if (messages !== undefined) {
      // A new thread's messages are all known; an existing one's entry, if
      // any, is brought up to date (or dropped), never left stale.
      const added = messages.added.map((m) => Object.freeze(m));
      if (messages.created) cache.set(messages.incarnation, [], true, 0);
      cache.update(messages.incarnation, messages.lastSeqBefore, added, messages.droppedThrough);
    }
    for (const incarnation of c.ended ?? []) cache.delete(incarnation);
    if (c.events.length > 0)
      publish(
        namespace,
        c.events.map((e) => withCursor(namespace, e)),
      );
  }

  /** A logged event with its cursor made when first read (only Watch reads it). */
  function withCursor(namespace: string, logged: LoggedEvent): MemoryEvent {
    const { position, ...event } = logged;
    let cursor: string | undefined;
    return {
      ...event,
      get cursor() {
        cursor ??= tokens.issue(namespace, position);
        return cursor;
      },
    };
  }

  function publish(namespace: string, events: MemoryEvent[]): void {
    if (events.length === 0) return;
    const set = listeners.get(namespace);
    if (set === undefined) return;
    for (const listener of set) listener(events);
  }

  // --- reads --------------------------------------------------------------

  function toEvent(namespace: string, row: EventRow): MemoryEvent {
    // The body was written by logEvent from an EventBody of this type.
    const body = { type: row.type, ...JSON.parse(row.body) } as MemoryEvent;
    const cursor = tokens.issue(namespace, row.seq);
    return { ...body, cursor, threadId: row.thread_id, time: row.time };
  }

  function loadMessagesFrom(key: number, from: number, limit = -1): StoredMessage[] {
    return sql.messagesFrom.all(key, from, limit).map(toMessage);
  }

  /**
   * The oldest seq a read with `view` returns: the newest recallSize +
   * READ_SLACK messages, and a summary thread's unfolded ones (Store.read).
   * 0 or less: every message.
   */
  function viewFrom(row: ThreadRow, strategy: Strategy, view: ReadView): number {
    const size = recallSize(strategy, view.limit);
    if (size <= 0) return 0;
    const from = row.last_seq - size - READ_SLACK + 1;
    return strategy.kind === "summary" ? Math.min(from, row.summarized_through_seq + 1) : from;
  }

  /** The thread's messages from seq `from` on, from the cache or the file; and whether that is all. */
  function readFrom(
    row: ThreadRow,
    from: number,
    useCache: boolean,
  ): { messages: StoredMessage[]; complete: boolean } {
    const cached = useCache ? cache.get(row.incarnation) : undefined;
    if (cached !== undefined && cached.lastSeq === row.last_seq) {
      const first = cached.messages[0]?.seq ?? row.last_seq + 1;
      if (cached.whole || first <= from) {
        // Seqs are consecutive, so the index of `from` is found without a search.
        const start = Math.max(0, from - first);
        return { messages: cached.messages.slice(start), complete: cached.whole && start === 0 };
      }
    }
    const messages = loadMessagesFrom(row.id, from);
    const oldest = sql.oldestSeq.get(row.id) ?? null;
    const complete = oldest === null || from <= oldest;
    if (useCache) cache.set(row.incarnation, messages, complete, row.last_seq);
    return { messages, complete };
  }

  /** One snapshot of the file for a whole read: the worker may commit between statements. */
  const readTx = db.transaction(
    (namespace: string, threadId: string, view: ReadView | undefined) => {
      const row = sql.thread.get(namespace, threadId);
      if (row === undefined) return undefined;
      const thread = toThread(row);
      // Expired but not swept yet: gone for every call already.
      if (isExpired(thread, Date.now())) return undefined;
      const useCache = !writing(namespace, threadId);
      if (view === undefined) {
        const messages = sql.messages.all(row.id).map(toMessage);
        if (useCache) cache.set(row.incarnation, messages, true, row.last_seq);
        return { thread, messages, complete: true };
      }
      return { thread, ...readFrom(row, viewFrom(row, thread.strategy, view), useCache) };
    },
  );

  const readEventsTx = db.transaction((namespace: string, seq: number, limit: number) => {
    const log = sql.eventLog.get(namespace);
    if (seq > (log?.last_seq ?? 0)) {
      // Signed with this file's key, so the file once reached it: it was put back to an older state.
      throw historyLostError(
        "the database's history no longer reaches it (the file was put back to an older copy)",
      );
    }
    if (seq < (log?.dropped_through ?? 0)) {
      throw new MemoryError(
        "out_of_range",
        "resume_token: the events after it are no longer retained; re-read with Get and watch from now",
        { field: "resume_token" },
      );
    }
    return sql.events.all(namespace, seq, Math.max(0, limit)).map((r) => toEvent(namespace, r));
  });

  function assertOpen(): void {
    if (closed) throw new MemoryError("unavailable", "the store is closed");
  }

  return {
    rewind: rewindPending,
    async append(cmd: AppendCommand): Promise<AppendResult> {
      const c = await write<AppendResult>(
        { kind: "append", cmd },
        cmd.namespace,
        cmd.threadId,
        cmd.deadline,
      );
      return c.value;
    },

    async read(
      namespace: string,
      threadId: string,
      view?: ReadView,
    ): Promise<ThreadSnapshot | undefined> {
      assertOpen();
      return readTx(namespace, threadId, view);
    },

    async getThread(namespace: string, threadId: string): Promise<ThreadState | undefined> {
      assertOpen();
      const row = sql.thread.get(namespace, threadId);
      const thread = row === undefined ? undefined : toThread(row);
      return thread === undefined || isExpired(thread, Date.now()) ? undefined : thread;
    },

    async commitSummary(cmd: CommitSummaryCommand): Promise<ThreadState | undefined> {
      return commitNs({ kind: "commitSummary", cmd }, cmd.namespace, cmd.threadId);
    },

    async recordFoldFailure(cmd: FoldFailureCommand): Promise<void> {
      await commitNs({ kind: "recordFoldFailure", cmd }, cmd.namespace, cmd.threadId);
    },

    async acquireFoldLease(namespace, threadId, ttlMs) {
      return commitNs<number | undefined>(
        { kind: "acquireLease", namespace, threadId, ttlMs },
        namespace,
        threadId,
      );
    },

    async releaseFoldLease(namespace, threadId, token) {
      await commitNs({ kind: "releaseLease", namespace, threadId, token }, namespace, threadId);
    },

    async clear(namespace: string, threadId: string, now: number): Promise<boolean> {
      return commitNs<boolean>({ kind: "clear", namespace, threadId, now }, namespace, threadId);
    },

    async clearAll(namespace: string, now: number): Promise<number> {
      let total = 0;
      for (;;) {
        // Each batch is its own transaction; other calls run in between.
        const n = await commitNs<number>(
          { kind: "clearBatch", namespace, now, limit: CLEAR_BATCH },
          namespace,
          "*",
        );
        total += n;
        if (n < CLEAR_BATCH) return total;
      }
    },

    async listThreads(
      namespace: string,
      after: string,
      limit: number,
      labels?: Labels,
    ): Promise<string[]> {
      assertOpen();
      if (labels !== undefined && Object.keys(labels).length > 0) {
        return labelRows.list(namespace, after, limit, labels, Date.now());
      }
      return sql.listThreads.all(namespace, after, Date.now(), Math.max(0, limit));
    },

    async importThread(cmd: ImportThreadCommand): Promise<boolean> {
      return commitNs<boolean>({ kind: "import", cmd }, cmd.namespace, cmd.threadId);
    },

    async sweepExpired(now: number, limit: number): Promise<number> {
      assertOpen();
      let removed = 0;
      // Each thread is its own write (checked again in the worker), so a large
      // sweep never holds the file long and other writes go in between.
      for (const due of ttlRows.due.all(now, Math.max(0, limit))) {
        const swept = await commitNs<boolean>(
          { kind: "sweepOne", namespace: due.namespace, threadId: due.thread_id, now },
          due.namespace,
          due.thread_id,
        );
        if (swept) removed++;
      }
      return removed;
    },

    async readEvents(namespace: string, cursor: string, limit: number): Promise<MemoryEvent[]> {
      assertOpen();
      return readEventsTx(namespace, tokens.open(namespace, cursor), limit);
    },

    async headCursor(namespace: string): Promise<string> {
      assertOpen();
      return tokens.issue(namespace, sql.eventLog.get(namespace)?.last_seq ?? 0);
    },

    compareCursors(a: string, b: string): number {
      return tokens.positionOf(a) - tokens.positionOf(b);
    },

    subscribe(namespace: string, listener: (events: MemoryEvent[]) => void): () => void {
      let set = listeners.get(namespace);
      if (set === undefined) {
        set = new Set();
        listeners.set(namespace, set);
      }
      const s = set;
      s.add(listener);
      return () => {
        s.delete(listener);
        if (s.size === 0 && listeners.get(namespace) === s) listeners.delete(namespace);
      };
    },

    /**
     * Serving when the write worker answers a ping within `timeoutMs`: not
     * serving once it has stopped, and while it cannot answer (waiting for a
     * lock another process holds, or stuck in a commit), since writes then
     * cannot proceed. A full disk (or the size limit reached) is reported
     * not serving too, naming it, though reads are still served and the
     * store refuses nothing but writes: a server that cannot store an Add
     * cannot do what it is for, and readiness is where an operator looks.
     * While full, each call has the worker try a small write, so health
     * turns serving again by itself once there is room, with no Add needed.
     */
    async health(timeoutMs: number): Promise<StoreHealth> {
      if (closed) return { serving: false, reason: "the SQLite store is closed" };
      if (broken !== undefined) {
        return { serving: false, reason: `the SQLite write worker stopped: ${broken.message}` };
      }
      if (fileIdentity(path) !== openedIdentity) {
        // The process still writes the file it opened, which nobody else will read.
        return {
          serving: false,
          reason:
            "the SQLite database file was replaced or removed while the server ran: restart the server to open the file now there",
        };
      }
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<"late">((resolve) => {
        timer = setTimeout(() => resolve("late"), timeoutMs);
      });
      const answer = await Promise.race([askWorker(gate.diskFull), late]);
      clearTimeout(timer);
      if (answer === "late") {
        return {
          serving: false,
          reason: `the SQLite write worker did not answer within ${timeoutMs} ms: ${activityOf()}`,
        };
      }
      // The worker may have stopped while the ping was out.
      const stopped = broken as Error | undefined;
      if (stopped !== undefined) {
        return { serving: false, reason: `the SQLite write worker stopped: ${stopped.message}` };
      }
      if (answer === undefined) return { serving: true };
      return {
        serving: false,
        reason: `${answer}: writes are refused until it clears; reads are served`,
      };
    },

    /**
     * Lets the worker commit and answer what it was handed within `graceMs`;
     * then it stops waiting for locks (writes it had not taken are refused,
     * unstored), is terminated, and every write still unanswered is refused
     * with unavailable. Resolves within graceMs + 2 × STOP_WAIT_MS, unless
     * the worker's thread is stuck inside SQLite (a hung fsync), which no
     * one can end: then the process is left to exit without it.
     */
    async close(graceMs = DEFAULT_CLOSE_GRACE_MS): Promise<void> {
      if (workerClosed === undefined) {
        closed = true;
        worker.ref();
        // Writes already handed over are committed and answered first.
        post();
        worker.postMessage({ type: "close" });
        workerClosed = (async () => {
          if (!(await exitsWithin(graceMs))) {
            gate.abandon();
            if (!(await exitsWithin(STOP_WAIT_MS))) {
              void worker.terminate();
              await exitsWithin(STOP_WAIT_MS);
            }
          }
          fail(new Error("the store closed"));
          worker.unref();
          listeners.clear();
          cache.clear();
          db.close();
          lock.close();
        })();
      }
      return workerClosed;
    },
  };

  /** Whether the worker exits within `ms`. */
  async function exitsWithin(ms: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    });
    const inTime = await Promise.race([exited.then(() => true), late]);
    clearTimeout(timer);
    return inTime;
  }

  /** Runs a write in the worker; its value once the group holding it has committed. */
  async function commitNs<T>(op: WriteOp, namespace: string, threadId: string): Promise<T> {
    const c = await write<T>(op, namespace, threadId);
    return c.value;
  }
}

type WorkerMessage =
  | { type: "ready" }
  | { type: "closed" }
  | { type: "failed"; error: WireError }
  | { type: "done"; outcomes: WriteOutcome[] }
  | { type: "pong"; blockedBy?: string };
