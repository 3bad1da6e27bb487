import { randomUUID } from "node:crypto";
import Database from "better-sqlite3";
import { decideAppend, keepsSummary, newThreadState, trimCountOf } from "../core/append.js";
import { invalidArgument, MemoryError } from "../core/errors.js";
import { recallSize } from "../core/recall.js";
import { isExpired, ttlAfterAdd, ttlFields } from "../core/ttl.js";
import type {
  ChatMessage,
  EventBody,
  Labels,
  MemoryEvent,
  Role,
  StoredMessage,
  Strategy,
  ThreadState,
} from "../core/types.js";
import { DEFAULT_STORE_LIMITS } from "./memory-store.js";
import { checkQuotas, messageBytes, type NamespaceUsage } from "./quota.js";
import { newStoreId, newTokenSecret, ResumeTokens } from "./resume-token.js";
import { ensureLabelSchema, SqliteLabels } from "./sqlite/labels.js";
import { MessageCache } from "./sqlite/message-cache.js";
import { ensureTtlSchema, SqliteTtl } from "./sqlite/ttl.js";
import {
  type AppendCommand,
  type AppendResult,
  CLEAR_BATCH,
  type CommitSummaryCommand,
  type FoldFailureCommand,
  type ImportThreadCommand,
  READ_SLACK,
  type ReadView,
  type Store,
  type StoreLimits,
  type ThreadSnapshot,
} from "./store.js";

/** Version of the schema below; stored in `meta` so later releases can migrate. */
export const SQLITE_SCHEMA_VERSION = 3;

/** Options of the SQLite store beyond the limits every store shares. */
export interface SqliteStoreOptions {
  /**
   * How long opening waits for another connection to let go of the file (a
   * previous server still shutting down) before refusing. Default 5000.
   */
  busyTimeoutMs?: number;
  /**
   * Approximate size, in characters, of the messages kept in memory for the
   * most recently used threads (see MessageCache). Default 64 Mi; 0: none.
   */
  cacheSize?: number;
}

/**
 * The queries that let a Get and a trim cost what they return or drop, not
 * the thread's length: each is one search of the messages table's primary key
 * (thread, seq) (test/store/sqlite-store.test.ts checks their plans).
 */
export const MESSAGE_QUERIES = {
  /** A thread's messages from a seq on, oldest first: a windowed read, a trim's front. */
  from: `SELECT seq, role, create_time, content, extra FROM messages
    WHERE thread = ? AND seq >= ? ORDER BY seq LIMIT ?`,
  oldestSeq: "SELECT min(seq) FROM messages WHERE thread = ?",
  deleteThrough: "DELETE FROM messages WHERE thread = ? AND seq <= ?",
} as const;

/** The event log's tables (schema 2 on). */
const EVENTS_SCHEMA = `
-- Clustered by (namespace, seq): a resume reads one range.
CREATE TABLE IF NOT EXISTS events (
  namespace TEXT NOT NULL,
  seq INTEGER NOT NULL,
  thread_id TEXT NOT NULL,
  time INTEGER NOT NULL,
  type TEXT NOT NULL,
  body TEXT NOT NULL,
  PRIMARY KEY (namespace, seq)
) STRICT, WITHOUT ROWID;

-- Per namespace: the newest seq issued (never reused, even after the newest
-- rows go), how many events are retained, and the newest seq dropped.
CREATE TABLE IF NOT EXISTS event_logs (
  namespace TEXT PRIMARY KEY,
  last_seq INTEGER NOT NULL,
  retained INTEGER NOT NULL,
  dropped_through INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
`;

/**
 * The schema. Threads have an integer key that messages and idempotency
 * records hang off (deleted with the thread by cascade); events are numbered
 * per namespace (1, 2, 3 …), so a tenant's resume tokens count only its own
 * events. Files of an older version are brought here by MIGRATIONS.
 */
const SCHEMA = `
CREATE TABLE IF NOT EXISTS meta (
  key TEXT PRIMARY KEY,
  value ANY NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS threads (
  id INTEGER PRIMARY KEY,
  namespace TEXT NOT NULL,
  thread_id TEXT NOT NULL,
  incarnation TEXT NOT NULL,
  strategy TEXT NOT NULL,
  last_seq INTEGER NOT NULL,
  summarized_through_seq INTEGER NOT NULL,
  summary TEXT NOT NULL,
  summary_time INTEGER NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  -- Sum of quota.ts messageBytes over the thread's stored messages.
  bytes INTEGER NOT NULL DEFAULT 0,
  UNIQUE (namespace, thread_id)
) STRICT;

-- Clustered by (thread, seq): recall reads one thread's messages in one range scan.
CREATE TABLE IF NOT EXISTS messages (
  thread INTEGER NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  role TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  content TEXT NOT NULL,
  extra TEXT,
  PRIMARY KEY (thread, seq)
) STRICT, WITHOUT ROWID;

-- An index on a rowid table ends with the rowid, so (thread, time) orders a
-- thread's records oldest first, ties in insertion order.
CREATE TABLE IF NOT EXISTS requests (
  no INTEGER PRIMARY KEY,
  thread INTEGER NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
  request_id TEXT NOT NULL,
  hash TEXT NOT NULL,
  result TEXT NOT NULL,
  time INTEGER NOT NULL,
  UNIQUE (thread, request_id)
) STRICT;
CREATE INDEX IF NOT EXISTS requests_by_age ON requests (thread, time);

-- Not tied to threads: the fencing token must keep increasing across Clear.
CREATE TABLE IF NOT EXISTS fold_leases (
  namespace TEXT NOT NULL,
  thread_id TEXT NOT NULL,
  token INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (namespace, thread_id)
) STRICT, WITHOUT ROWID;

${EVENTS_SCHEMA}
-- What the namespace quotas count, updated in the transaction of each change.
CREATE TABLE IF NOT EXISTS namespace_usage (
  namespace TEXT PRIMARY KEY,
  threads INTEGER NOT NULL,
  messages INTEGER NOT NULL,
  bytes INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
`;

interface ThreadRow {
  id: number;
  thread_id: string;
  incarnation: string;
  strategy: string;
  last_seq: number;
  summarized_through_seq: number;
  summary: string;
  summary_time: number;
  create_time: number;
  update_time: number;
  bytes: number;
  /** JSON of the labels; NULL (or absent, before the column exists) for none. */
  labels?: string | null;
  /** Retention (sqlite/ttl.ts); NULL for none. */
  ttl_ms?: number | null;
  expire_at?: number | null;
}

/** seq, role, create_time, content, extra: read raw, as arrays, which is faster than objects. */
type MessageRow = [number, Role, number, string, string | null];

/** The optional fields of a message, stored as JSON in `messages.extra`. */
type MessageExtra = Omit<ChatMessage, "role" | "content">;

interface RequestRow {
  hash: string;
  result: string;
  time: number;
}

/** What an idempotency record keeps: the first call's result. */
type RecordedResult = Omit<AppendResult, "replayed">;

interface EventRow {
  seq: number;
  thread_id: string;
  time: number;
  type: EventBody["type"];
  body: string;
}

/** A transaction's outcome, and what to do once it has committed. */
interface Committed<T> {
  value: T;
  /** To publish. */
  events: MemoryEvent[];
  /** How the thread's messages changed: to bring its cached tail up to date. */
  messages?: MessagesChange;
  /** Incarnations that ended: to drop from the cache. */
  ended?: string[];
}

/** What one commit did to a thread's messages (see MessageCache.update). */
interface MessagesChange {
  incarnation: string;
  /** The thread was created by this commit: its messages are all known. */
  created: boolean;
  lastSeqBefore: number;
  added: StoredMessage[];
  /** Every message up to this seq was trimmed; 0 when none. */
  droppedThrough: number;
}

/**
 * The SQLite store: durable state for one server process, in one file
 * (better-sqlite3, WAL journal).
 *
 * Durability. `synchronous = FULL` in WAL mode: every write (Add, Clear,
 * summary commit, lease) is one transaction whose WAL frames are fsynced
 * before the call returns. So:
 * - process crash (kill -9, OOM kill, a fatal error): every acknowledged write
 *   survives; a write that was not acknowledged is either wholly there or
 *   wholly absent (one Add's messages are never partly stored);
 * - power loss or OS crash: the same, provided the disk honours fsync (a
 *   volatile write cache that ignores flushes, or macOS, where fsync does not
 *   flush the drive, can lose the newest acknowledged writes; the file stays
 *   consistent either way).
 * NORMAL would survive a process crash too, and is an order of magnitude
 * faster per commit, but on power loss it rolls back the newest commits: seqs and event
 * ids already acknowledged would then be handed out again for other messages,
 * and a client's resume token could silently skip events. FULL costs one
 * fsync per write (about 0.3 ms on a virtio SSD), which blocks the event loop
 * for that long: better-sqlite3 is synchronous, which is also what makes each
 * method atomic.
 *
 * One process per file. Two server processes on one file are not supported:
 * subscribers only hear events logged by their own process, and fold leases
 * held by a previous process are dropped on open. The database is opened with
 * `locking_mode = EXCLUSIVE`, so a second process (or a second store in this
 * one) waits `busyTimeoutMs` and is then refused; the lock goes with the
 * process, so a restart after a crash opens the file at once. While a server
 * runs, no other process can open the file, the sqlite3 shell included:
 * inspect or copy it with the server stopped.
 *
 * A Get reads only what it can return (Store.read's view): the newest
 * messages, and a summary thread's unfolded ones, by one range search on the
 * messages table's primary key (thread, seq). Because this process is the
 * file's only user, it also keeps the newest messages of recently used
 * threads in memory (MessageCache), updated by each commit that changes them,
 * so a Get usually reads no message rows at all. Neither a Get nor an Add
 * costs more on a long thread: trimming reads only the messages it drops.
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
  const db = openDatabase(path, options.busyTimeoutMs ?? 5000);
  const meta = db.prepare<[string], unknown>("SELECT value FROM meta WHERE key = ?").pluck();
  const tokens = new ResumeTokens(
    String(meta.get("database_id")),
    String(meta.get("token_secret")),
    "it refers to the history of another database",
    /^[0-9a-f]{12}\.\d{1,15}$/,
  );
  const cache = new MessageCache(options.cacheSize ?? 64 * 1024 * 1024);
  const labelRows = new SqliteLabels(db);
  const ttlRows = new SqliteTtl(db);
  const listeners = new Map<string, Set<(events: MemoryEvent[]) => void>>();
  let closed = false;

  const sql = {
    thread: db.prepare<[string, string], ThreadRow>(
      "SELECT * FROM threads WHERE namespace = ? AND thread_id = ?",
    ),
    insertThread: db.prepare<[string, string, string, string, number, number]>(
      `INSERT INTO threads (namespace, thread_id, incarnation, strategy, last_seq,
         summarized_through_seq, summary, summary_time, create_time, update_time)
       VALUES (?, ?, ?, ?, 0, 0, '', 0, ?, ?)`,
    ),
    updateThread: db.prepare<[string, number, number, string, number, number, number]>(
      `UPDATE threads SET strategy = ?, last_seq = ?, summarized_through_seq = ?, summary = ?,
         summary_time = ?, update_time = ? WHERE id = ?`,
    ),
    firstThreads: db.prepare<[string, number], ThreadRow>(
      "SELECT * FROM threads WHERE namespace = ? ORDER BY thread_id LIMIT ?",
    ),
    addThreadBytes: db.prepare<[number, number]>(
      "UPDATE threads SET bytes = bytes + ? WHERE id = ?",
    ),
    usage: db.prepare<[string], NamespaceUsage>(
      "SELECT threads, messages, bytes FROM namespace_usage WHERE namespace = ?",
    ),
    addUsage: db.prepare<[string, number, number, number]>(
      `INSERT INTO namespace_usage (namespace, threads, messages, bytes) VALUES (?, ?, ?, ?)
       ON CONFLICT (namespace) DO UPDATE SET threads = threads + excluded.threads,
         messages = messages + excluded.messages, bytes = bytes + excluded.bytes`,
    ),
    deleteThreadByKey: db.prepare<[number]>("DELETE FROM threads WHERE id = ?"),
    listThreads: db
      .prepare<[string, string, number], string>(
        "SELECT thread_id FROM threads WHERE namespace = ? AND thread_id > ? ORDER BY thread_id LIMIT ?",
      )
      .pluck(),
    messages: db
      .prepare<[number], MessageRow>(
        "SELECT seq, role, create_time, content, extra FROM messages WHERE thread = ? ORDER BY seq",
      )
      .raw(),
    messagesFrom: db.prepare<[number, number, number], MessageRow>(MESSAGE_QUERIES.from).raw(),
    insertMessage: db.prepare<[number, number, string, number, string, string | null]>(
      "INSERT INTO messages (thread, seq, role, create_time, content, extra) VALUES (?, ?, ?, ?, ?, ?)",
    ),
    oldestSeq: db.prepare<[number], number | null>(MESSAGE_QUERIES.oldestSeq).pluck(),
    deleteMessagesThrough: db.prepare<[number, number]>(MESSAGE_QUERIES.deleteThrough),
    request: db.prepare<[number, string], RequestRow>(
      "SELECT hash, result, time FROM requests WHERE thread = ? AND request_id = ?",
    ),
    recordRequest: db.prepare<[number, string, string, string, number]>(
      "INSERT OR REPLACE INTO requests (thread, request_id, hash, result, time) VALUES (?, ?, ?, ?, ?)",
    ),
    dropRequestsBefore: db.prepare<[number, number]>(
      "DELETE FROM requests WHERE thread = ? AND time <= ?",
    ),
    countRequests: db
      .prepare<[number], number>("SELECT count(*) FROM requests WHERE thread = ?")
      .pluck(),
    dropOldestRequests: db.prepare<[number, number]>(
      `DELETE FROM requests WHERE no IN
         (SELECT no FROM requests WHERE thread = ? ORDER BY time, no LIMIT ?)`,
    ),
    lease: db.prepare<[string, string], { token: number; expires_at: number }>(
      "SELECT token, expires_at FROM fold_leases WHERE namespace = ? AND thread_id = ?",
    ),
    nextLeaseToken: db
      .prepare<[], number>(
        "UPDATE meta SET value = value + 1 WHERE key = 'lease_counter' RETURNING value",
      )
      .pluck(),
    setLease: db.prepare<[string, string, number, number]>(
      "INSERT OR REPLACE INTO fold_leases (namespace, thread_id, token, expires_at) VALUES (?, ?, ?, ?)",
    ),
    releaseLease: db.prepare<[string, string, number]>(
      "DELETE FROM fold_leases WHERE namespace = ? AND thread_id = ? AND token = ?",
    ),
    countEvent: db.prepare<[string], { last_seq: number; retained: number }>(
      `INSERT INTO event_logs (namespace, last_seq, retained, dropped_through) VALUES (?, 1, 1, 0)
       ON CONFLICT (namespace) DO UPDATE SET last_seq = last_seq + 1, retained = retained + 1
       RETURNING last_seq, retained`,
    ),
    insertEvent: db.prepare<[string, number, string, number, string, string]>(
      "INSERT INTO events (namespace, seq, thread_id, time, type, body) VALUES (?, ?, ?, ?, ?, ?)",
    ),
    dropEventsThrough: db.prepare<[string, number]>(
      "DELETE FROM events WHERE namespace = ? AND seq <= ?",
    ),
    setDropped: db.prepare<[number, number, string]>(
      "UPDATE event_logs SET retained = ?, dropped_through = ? WHERE namespace = ?",
    ),
    eventLog: db.prepare<[string], { last_seq: number; dropped_through: number }>(
      "SELECT last_seq, dropped_through FROM event_logs WHERE namespace = ?",
    ),
    events: db.prepare<[string, number, number], EventRow>(
      "SELECT seq, thread_id, time, type, body FROM events WHERE namespace = ? AND seq > ? ORDER BY seq LIMIT ?",
    ),
  };

  function toEvent(namespace: string, row: EventRow): MemoryEvent {
    // The body was written by logEvent from an EventBody of this type.
    const body = { type: row.type, ...JSON.parse(row.body) } as EventBody;
    const cursor = tokens.issue(namespace, row.seq);
    return { ...body, cursor, threadId: row.thread_id, time: row.time };
  }

  /** Appends an event inside the caller's transaction and drops old ones in chunks. */
  function logEvent(
    namespace: string,
    threadId: string,
    time: number,
    body: EventBody,
  ): MemoryEvent {
    const { type, ...fields } = body;
    const log = sql.countEvent.get(namespace);
    if (log === undefined) throw new Error("sqlite store: event_logs upsert returned nothing");
    sql.insertEvent.run(namespace, log.last_seq, threadId, time, type, JSON.stringify(fields));
    // Seqs of a namespace are consecutive, so the cut is found without a scan;
    // chunks keep the delete amortised O(1) per event, as in the memory store.
    const excess = log.retained - lim.eventRetention;
    if (excess > 0 && (excess >= 64 || log.retained > lim.eventRetention * 2)) {
      const cut = log.last_seq - lim.eventRetention;
      sql.dropEventsThrough.run(namespace, cut);
      sql.setDropped.run(lim.eventRetention, cut, namespace);
    }
    return { ...body, cursor: tokens.issue(namespace, log.last_seq), threadId, time };
  }

  function publish(namespace: string, events: MemoryEvent[]): void {
    if (events.length === 0) return;
    const set = listeners.get(namespace);
    if (set === undefined) return;
    for (const listener of set) listener(events);
  }

  function loadMessages(key: number): StoredMessage[] {
    return sql.messages.all(key).map(toMessage);
  }

  /** The thread's messages from seq `from` on (at most `limit`), oldest first. */
  function loadMessagesFrom(key: number, from: number, limit = -1): StoredMessage[] {
    return sql.messagesFrom.all(key, from, limit).map(toMessage);
  }

  /**
   * Trims the thread, inside the caller's transaction, to its strategy's
   * max_stored. Returns what was dropped: how many, their bytes and the
   * newest dropped seq (0: none).
   */
  function trim(
    key: number,
    state: ThreadState,
  ): { count: number; bytes: number; through: number } {
    // Stored seqs are contiguous (appends add at the end, trims cut at the
    // front), so counting needs no scan, and only the front that goes is read.
    const oldest = sql.oldestSeq.get(key) ?? null;
    const count = oldest === null ? 0 : state.lastSeq - oldest + 1;
    const excess = count - state.strategy.maxStored;
    if (oldest === null || excess <= 0) return { count: 0, bytes: 0, through: 0 };
    const front: StoredMessage[] = [];
    const at = (i: number): StoredMessage | undefined => {
      while (i >= front.length && front.length < count) {
        // Pages of the excess and a few more (tool results after the cut), then doubling.
        const page = Math.max(excess + 8, front.length);
        const rows = loadMessagesFrom(key, oldest + front.length, page);
        if (rows.length === 0) break;
        for (const m of rows) front.push(m);
      }
      return front[i];
    };
    const n = trimCountOf(state.strategy, count, at, state.summarizedThroughSeq);
    const through = front[n - 1];
    if (through === undefined) return { count: 0, bytes: 0, through: 0 };
    sql.deleteMessagesThrough.run(key, through.seq);
    let bytes = 0;
    for (let i = 0; i < n; i++) bytes += messageBytes(front[i] as StoredMessage);
    return { count: n, bytes, through: through.seq };
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
    key: number,
    row: ThreadRow,
    from: number,
  ): { messages: StoredMessage[]; complete: boolean } {
    const cached = cache.get(row.incarnation);
    if (cached !== undefined && cached.lastSeq === row.last_seq) {
      const first = cached.messages[0]?.seq ?? row.last_seq + 1;
      if (cached.whole || first <= from) {
        // Seqs are consecutive, so the index of `from` is found without a search.
        const start = Math.max(0, from - first);
        return { messages: cached.messages.slice(start), complete: cached.whole && start === 0 };
      }
    }
    const messages = loadMessagesFrom(key, from);
    const oldest = sql.oldestSeq.get(key) ?? null;
    const complete = oldest === null || from <= oldest;
    cache.set(row.incarnation, messages, complete, row.last_seq);
    return { messages, complete };
  }

  /** Adds `delta` to the namespace's usage (and the thread's bytes, when `key` is given). */
  function use(namespace: string, delta: NamespaceUsage, key?: number): void {
    if (key !== undefined && delta.bytes !== 0) sql.addThreadBytes.run(delta.bytes, key);
    if (delta.threads !== 0 || delta.messages !== 0 || delta.bytes !== 0) {
      sql.addUsage.run(namespace, delta.threads, delta.messages, delta.bytes);
    }
  }

  /** Deletes a thread inside the caller's transaction and gives its room back. */
  function deleteThread(namespace: string, row: ThreadRow): void {
    const oldest = sql.oldestSeq.get(row.id) ?? null;
    const messages = oldest === null ? 0 : row.last_seq - oldest + 1;
    sql.deleteThreadByKey.run(row.id);
    use(namespace, { threads: -1, messages: -messages, bytes: -row.bytes });
  }

  function saveThread(key: number, t: ThreadState): void {
    sql.updateThread.run(
      JSON.stringify(t.strategy),
      t.lastSeq,
      t.summarizedThroughSeq,
      t.summary,
      t.summaryTime,
      t.updateTime,
      key,
    );
  }

  function dropExpiredRequests(key: number, now: number): void {
    sql.dropRequestsBefore.run(key, now - lim.idempotencyRetentionMs);
    const excess = (sql.countRequests.get(key) ?? 0) - lim.idempotencyMaxPerThread;
    if (excess > 0) sql.dropOldestRequests.run(key, excess);
  }

  const appendTx = db.transaction((cmd: AppendCommand): Committed<AppendResult> => {
    const row = sql.thread.get(cmd.namespace, cmd.threadId);
    if (cmd.requestId !== "" && row !== undefined) {
      const seen = sql.request.get(row.id, cmd.requestId);
      if (seen !== undefined && cmd.now - seen.time < lim.idempotencyRetentionMs) {
        if (seen.hash !== cmd.requestHash) {
          throw invalidArgument(
            "request_id",
            "was already used for a different request on this thread",
          );
        }
        const first = JSON.parse(seen.result) as RecordedResult;
        return { value: { ...first, replayed: true }, events: [] };
      }
    }
    const existing = row === undefined ? undefined : toThread(row);
    const strategy = decideAppend(existing, cmd);
    let key: number;
    let state: ThreadState;
    if (row === undefined || existing === undefined) {
      state = newThreadState(cmd.threadId, strategy, randomUUID(), cmd.now);
      key = Number(
        sql.insertThread.run(
          cmd.namespace,
          cmd.threadId,
          state.incarnation,
          JSON.stringify(strategy),
          cmd.now,
          cmd.now,
        ).lastInsertRowid,
      );
    } else {
      key = row.id;
      state = existing;
    }
    if (!keepsSummary(state.strategy, strategy)) {
      state.summary = "";
      state.summaryTime = 0;
      state.summarizedThroughSeq = 0;
    }
    state.strategy = strategy;
    const lastSeqBefore = state.lastSeq;
    const firstSeq = cmd.messages.length > 0 ? state.lastSeq + 1 : 0;
    const added: StoredMessage[] = [];
    let addedBytes = 0;
    for (const m of cmd.messages) {
      const seq = ++state.lastSeq;
      const extra = extraOf(m);
      sql.insertMessage.run(key, seq, m.role, cmd.now, m.content, extra);
      added.push(toMessage([seq, m.role, cmd.now, m.content, extra]));
      addedBytes += messageBytes(m);
    }
    const lastSeq = cmd.messages.length > 0 ? state.lastSeq : 0;
    if (cmd.messages.length > 0) state.updateTime = cmd.now;
    const trimmed = trim(key, state);
    // Checked once the Add and its trim are written: a refusal rolls it all back.
    const delta: NamespaceUsage = {
      threads: row === undefined ? 1 : 0,
      messages: added.length - trimmed.count,
      bytes: addedBytes - trimmed.bytes,
    };
    checkQuotas(lim, sql.usage.get(cmd.namespace) ?? NO_USAGE, delta);
    use(cmd.namespace, delta, key);
    saveThread(key, state);
    if (cmd.labels !== undefined) {
      labelRows.set(cmd.namespace, cmd.threadId, key, cmd.labels);
      state.labels = { ...cmd.labels };
    }
    const result: RecordedResult = { thread: state, firstSeq, lastSeq };
    if (cmd.requestId !== "") {
      sql.recordRequest.run(key, cmd.requestId, cmd.requestHash, JSON.stringify(result), cmd.now);
      dropExpiredRequests(key, cmd.now);
    }
    const events =
      cmd.messages.length > 0
        ? [
            logEvent(cmd.namespace, cmd.threadId, cmd.now, {
              type: "messages_added",
              firstSeq,
              lastSeq,
            }),
          ]
        : [];
    return {
      value: { ...result, thread: { ...state }, replayed: false },
      events,
      messages: {
        incarnation: state.incarnation,
        created: row === undefined,
        lastSeqBefore,
        added,
        droppedThrough: trimmed.through,
      },
    };
  });

  /**
   * Removes the thread if it has expired at `now`, inside the caller's
   * transaction, logging thread_cleared {reason: expired}.
   */
  function expireIfDue(
    namespace: string,
    threadId: string,
    now: number,
    row = sql.thread.get(namespace, threadId),
  ): { event: MemoryEvent; incarnation: string } | undefined {
    if (row === undefined || row.expire_at == null || row.expire_at > now) return undefined;
    deleteThread(namespace, row);
    const event = logEvent(namespace, threadId, now, { type: "thread_cleared", reason: "expired" });
    return { event, incarnation: row.incarnation };
  }

  /** An Add with retention: an expired thread goes first; the Add moves the expiry on. */
  const appendWithTtlTx = db.transaction((cmd: AppendCommand): Committed<AppendResult> => {
    const row = sql.thread.get(cmd.namespace, cmd.threadId);
    const expired = expireIfDue(cmd.namespace, cmd.threadId, cmd.now, row);
    const before = expired === undefined ? row : undefined;
    const done = appendTx(cmd);
    const ttl = ttlAfterAdd(
      cmd.ttlMs,
      before?.ttl_ms ?? undefined,
      before === undefined,
      cmd.defaultTtlMs,
    );
    // A thread without a ttl that keeps none costs no write here (the common Add).
    if (!done.value.replayed && (ttl > 0 || before?.ttl_ms != null)) {
      const fields = ttlFields(ttl, cmd.now);
      ttlRows.set.run(fields.ttlMs ?? null, fields.expireTime ?? null, cmd.namespace, cmd.threadId);
      const thread = { ...done.value.thread };
      delete thread.ttlMs;
      delete thread.expireTime;
      done.value = { ...done.value, thread: { ...thread, ...fields } };
    }
    if (expired === undefined) return done;
    return {
      ...done,
      events: [expired.event, ...done.events],
      ended: [...(done.ended ?? []), expired.incarnation],
    };
  });

  const sweepOneTx = db.transaction(
    (namespace: string, threadId: string, now: number): Committed<boolean> => {
      const expired = expireIfDue(namespace, threadId, now);
      if (expired === undefined) return { value: false, events: [] };
      return { value: true, events: [expired.event], ended: [expired.incarnation] };
    },
  );

  const commitSummaryTx = db.transaction(
    (cmd: CommitSummaryCommand): Committed<ThreadState | undefined> => {
      const row = sql.thread.get(cmd.namespace, cmd.threadId);
      const lease = sql.lease.get(cmd.namespace, cmd.threadId);
      if (
        row === undefined ||
        row.incarnation !== cmd.incarnation ||
        row.summarized_through_seq !== cmd.fromSeq ||
        cmd.throughSeq <= cmd.fromSeq ||
        lease === undefined ||
        lease.token !== cmd.leaseToken
      ) {
        return { value: undefined, events: [] };
      }
      const state = toThread(row);
      state.summary = cmd.summary;
      state.summaryTime = cmd.now;
      state.summarizedThroughSeq = cmd.throughSeq;
      state.updateTime = cmd.now;
      const { count, bytes, through } = trim(row.id, state);
      use(cmd.namespace, { threads: 0, messages: -count, bytes: -bytes }, row.id);
      saveThread(row.id, state);
      const event = logEvent(cmd.namespace, cmd.threadId, cmd.now, {
        type: "summary_updated",
        summary: cmd.summary,
        summarizedThroughSeq: cmd.throughSeq,
        foldedCount: cmd.foldedCount,
      });
      return {
        value: state,
        events: [event],
        messages: {
          incarnation: state.incarnation,
          created: false,
          lastSeqBefore: state.lastSeq,
          added: [],
          droppedThrough: through,
        },
      };
    },
  );

  const recordFoldFailureTx = db.transaction((cmd: FoldFailureCommand): Committed<void> => {
    const row = sql.thread.get(cmd.namespace, cmd.threadId);
    if (row === undefined || row.incarnation !== cmd.incarnation) {
      return { value: undefined, events: [] };
    }
    const event = logEvent(cmd.namespace, cmd.threadId, cmd.now, {
      type: "summary_failed",
      reason: cmd.reason,
      attempt: cmd.attempt,
    });
    return { value: undefined, events: [event] };
  });

  const acquireLeaseTx = db.transaction(
    (namespace: string, threadId: string, ttlMs: number): number | undefined => {
      const now = Date.now();
      const held = sql.lease.get(namespace, threadId);
      if (held !== undefined && held.expires_at > now) return undefined;
      const token = sql.nextLeaseToken.get();
      if (token === undefined) throw new Error("sqlite store: meta.lease_counter is missing");
      sql.setLease.run(namespace, threadId, token, now + ttlMs);
      return token;
    },
  );

  const clearTx = db.transaction(
    (namespace: string, threadId: string, now: number): Committed<boolean> => {
      const row = sql.thread.get(namespace, threadId);
      if (row === undefined) return { value: false, events: [] };
      deleteThread(namespace, row);
      return {
        value: true,
        events: [logEvent(namespace, threadId, now, { type: "thread_cleared" })],
        ended: [row.incarnation],
      };
    },
  );

  /** One batch of clearAll: the first `limit` threads of the namespace in byte order. */
  const clearBatchTx = db.transaction(
    (namespace: string, now: number, limit: number): Committed<number> => {
      // SQLite's BINARY collation compares UTF-8 bytes: the order ListThreads promises.
      const threads = sql.firstThreads.all(namespace, limit);
      for (const t of threads) deleteThread(namespace, t);
      return {
        value: threads.length,
        events: threads.map((t) =>
          logEvent(namespace, t.thread_id, now, { type: "thread_cleared" }),
        ),
        ended: threads.map((t) => t.incarnation),
      };
    },
  );

  /** Store.importThread, in its own statements so the hot path's stay as they are. */
  const insertImportedThread = db.prepare<
    [string, string, string, string, number, number, string, number, number, number]
  >(
    `INSERT INTO threads (namespace, thread_id, incarnation, strategy, last_seq,
       summarized_through_seq, summary, summary_time, create_time, update_time)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const importTx = db.transaction((cmd: ImportThreadCommand): Committed<boolean> => {
    if (sql.thread.get(cmd.namespace, cmd.threadId) !== undefined) {
      return { value: false, events: [] };
    }
    let bytes = 0;
    for (const m of cmd.messages) bytes += messageBytes(m);
    const delta: NamespaceUsage = { threads: 1, messages: cmd.messages.length, bytes };
    checkQuotas(lim, sql.usage.get(cmd.namespace) ?? NO_USAGE, delta);
    const key = Number(
      insertImportedThread.run(
        cmd.namespace,
        cmd.threadId,
        randomUUID(),
        JSON.stringify(cmd.strategy),
        cmd.lastSeq,
        cmd.summarizedThroughSeq,
        cmd.summary,
        cmd.summaryTime,
        cmd.createTime,
        cmd.updateTime,
      ).lastInsertRowid,
    );
    for (const m of cmd.messages) {
      sql.insertMessage.run(key, m.seq, m.role, m.createTime, m.content, extraOf(m));
    }
    use(cmd.namespace, delta, key);
    if (cmd.labels !== undefined) labelRows.set(cmd.namespace, cmd.threadId, key, cmd.labels);
    if (cmd.ttlMs !== undefined && cmd.expireTime !== undefined) {
      ttlRows.set.run(cmd.ttlMs, cmd.expireTime, cmd.namespace, cmd.threadId);
    }
    const first = cmd.messages[0];
    const events =
      first === undefined
        ? []
        : [
            logEvent(cmd.namespace, cmd.threadId, cmd.now, {
              type: "messages_added",
              firstSeq: first.seq,
              lastSeq: cmd.lastSeq,
            }),
          ];
    return { value: true, events };
  });

  function assertOpen(): void {
    if (closed) throw new MemoryError("unavailable", "the store is closed");
  }

  /**
   * Runs a write transaction (BEGIN IMMEDIATE); once it has committed, updates
   * the cache and publishes the events. A transaction that throws has rolled
   * back and touched neither.
   */
  function commit<T>(namespace: string, run: () => Committed<T>): T {
    assertOpen();
    const { value, events, messages, ended } = run();
    if (messages !== undefined) {
      // A new thread's messages are all known; an existing one's entry, if
      // any, is brought up to date (or dropped), never left stale.
      if (messages.created) cache.set(messages.incarnation, [], true, 0);
      cache.update(
        messages.incarnation,
        messages.lastSeqBefore,
        messages.added,
        messages.droppedThrough,
      );
    }
    for (const incarnation of ended ?? []) cache.delete(incarnation);
    publish(namespace, events);
    return value;
  }

  return {
    async append(cmd: AppendCommand): Promise<AppendResult> {
      return commit(cmd.namespace, () => appendWithTtlTx.immediate(cmd));
    },

    async read(
      namespace: string,
      threadId: string,
      view?: ReadView,
    ): Promise<ThreadSnapshot | undefined> {
      assertOpen();
      const row = sql.thread.get(namespace, threadId);
      if (row === undefined) return undefined;
      const thread = toThread(row);
      if (isExpired(thread, Date.now())) return undefined;
      if (view === undefined) {
        const messages = loadMessages(row.id);
        cache.set(row.incarnation, messages, true, row.last_seq);
        return { thread, messages, complete: true };
      }
      return { thread, ...readFrom(row.id, row, viewFrom(row, thread.strategy, view)) };
    },

    async getThread(namespace: string, threadId: string): Promise<ThreadState | undefined> {
      assertOpen();
      const row = sql.thread.get(namespace, threadId);
      const thread = row === undefined ? undefined : toThread(row);
      return thread === undefined || isExpired(thread, Date.now()) ? undefined : thread;
    },

    async commitSummary(cmd: CommitSummaryCommand): Promise<ThreadState | undefined> {
      return commit(cmd.namespace, () => commitSummaryTx.immediate(cmd));
    },

    async recordFoldFailure(cmd: FoldFailureCommand): Promise<void> {
      commit(cmd.namespace, () => recordFoldFailureTx.immediate(cmd));
    },

    async acquireFoldLease(namespace, threadId, ttlMs) {
      assertOpen();
      return acquireLeaseTx.immediate(namespace, threadId, ttlMs);
    },

    async releaseFoldLease(namespace, threadId, token) {
      assertOpen();
      sql.releaseLease.run(namespace, threadId, token);
    },

    async clear(namespace: string, threadId: string, now: number): Promise<boolean> {
      return commit(namespace, () => clearTx.immediate(namespace, threadId, now));
    },

    async clearAll(namespace: string, now: number): Promise<number> {
      let total = 0;
      for (;;) {
        const n = commit(namespace, () => clearBatchTx.immediate(namespace, now, CLEAR_BATCH));
        total += n;
        if (n < CLEAR_BATCH) return total;
        // Let other calls in between: each batch is its own transaction.
        await new Promise((resolve) => setImmediate(resolve));
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
        return labelRows.list(namespace, after, limit, labels);
      }
      return sql.listThreads.all(namespace, after, Math.max(0, limit));
    },

    async readEvents(namespace: string, cursor: string, limit: number): Promise<MemoryEvent[]> {
      assertOpen();
      const seq = tokens.open(namespace, cursor);
      const log = sql.eventLog.get(namespace);
      if (seq > (log?.last_seq ?? 0)) {
        throw invalidArgument("resume_token", "refers to an event this server never logged");
      }
      if (seq < (log?.dropped_through ?? 0)) {
        throw new MemoryError(
          "out_of_range",
          "resume_token: the events after it are no longer retained; re-read with Get and watch from now",
          { field: "resume_token" },
        );
      }
      return sql.events.all(namespace, seq, Math.max(0, limit)).map((r) => toEvent(namespace, r));
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

    async importThread(cmd: ImportThreadCommand): Promise<boolean> {
      return commit(cmd.namespace, () => importTx.immediate(cmd));
    },

    async sweepExpired(now: number, limit: number): Promise<number> {
      assertOpen();
      let removed = 0;
      // Each thread is its own short transaction, so a large sweep never holds the file long.
      for (const due of ttlRows.due.all(now, Math.max(0, limit))) {
        if (commit(due.namespace, () => sweepOneTx.immediate(due.namespace, due.thread_id, now))) {
          removed++;
        }
      }
      return removed;
    },

    async close(): Promise<void> {
      if (closed) return;
      closed = true;
      listeners.clear();
      cache.clear();
      db.close();
    },
  };
}

/**
 * Opens (creating if need be) the database file, sets the connection up and
 * brings the schema to this version. Throws when the file cannot be opened,
 * another process holds it, or it was written by a newer schema.
 */
function openDatabase(path: string, busyTimeoutMs: number): Database.Database {
  const db = new Database(path, { timeout: busyTimeoutMs });
  try {
    // Before WAL is entered, so the WAL index lives in this process's memory
    // (no -shm file) and the lock is held until close: one process per file.
    db.pragma("locking_mode = EXCLUSIVE");
    const mode = db.pragma("journal_mode = WAL", { simple: true });
    if (mode !== "wal") throw new Error(`journal_mode is ${String(mode)}, not wal`);
    db.pragma("synchronous = FULL");
    db.pragma("foreign_keys = ON");
    // A WAL that once grew large is cut back after checkpoints.
    db.pragma(`journal_size_limit = ${64 * 1024 * 1024}`);
    db.transaction(() => {
      db.exec(
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value ANY NOT NULL) STRICT, WITHOUT ROWID",
      );
      const version = db
        .prepare("SELECT value FROM meta WHERE key = 'schema_version'")
        .pluck()
        .get();
      if (version === undefined) {
        db.exec(SCHEMA);
        const init = db.prepare("INSERT INTO meta (key, value) VALUES (?, ?)");
        init.run("schema_version", SQLITE_SCHEMA_VERSION);
        init.run("database_id", newStoreId());
        init.run("token_secret", newTokenSecret());
        init.run("lease_counter", 0);
      } else if (typeof version !== "number" || version > SQLITE_SCHEMA_VERSION) {
        throw new Error(
          `schema version ${String(version)} is newer than this server's (${SQLITE_SCHEMA_VERSION})`,
        );
      } else {
        for (let v = version; v < SQLITE_SCHEMA_VERSION; v++) MIGRATIONS[v]?.(db);
        db.prepare("UPDATE meta SET value = ? WHERE key = 'schema_version'").run(
          SQLITE_SCHEMA_VERSION,
        );
      }
      ensureLabelSchema(db);
      ensureTtlSchema(db);
      // Leases belong to folds of a process that no longer runs (one process per file).
      db.exec("DELETE FROM fold_leases");
    }).immediate();
    return db;
  } catch (err) {
    db.close();
    if (err instanceof Database.SqliteError && err.code === "SQLITE_BUSY") {
      throw new Error(
        "the database is in use by another process (the SQLite store is one server process per file)",
        { cause: err },
      );
    }
    throw err;
  }
}

const NO_USAGE: NamespaceUsage = { threads: 0, messages: 0, bytes: 0 };

/**
 * Schema migrations: MIGRATIONS[v] brings a file from version v to v + 1,
 * inside the opening transaction (all of them commit, or none).
 */
const MIGRATIONS: Record<number, (db: Database.Database) => void> = {
  /**
   * 1 -> 2: events were numbered by one counter across namespaces (a tenant's
   * tokens showed how much others wrote). They are renumbered 1, 2, 3 … per
   * namespace, in their old order, and cursors are signed from now on. Every
   * thread, message and retained event stays; resume tokens issued before the
   * upgrade are answered out_of_range (re-read with Get and watch from now).
   */
  1: (db) => {
    db.exec(`
      DROP INDEX events_by_namespace;
      ALTER TABLE events RENAME TO events_v1;
      ALTER TABLE event_logs RENAME TO event_logs_v1;
      ${EVENTS_SCHEMA}
      INSERT INTO events (namespace, seq, thread_id, time, type, body)
        SELECT namespace, row_number() OVER (PARTITION BY namespace ORDER BY id),
          thread_id, time, type, body
        FROM events_v1;
      INSERT INTO event_logs (namespace, last_seq, retained, dropped_through)
        SELECT namespace, count(*), count(*), 0 FROM events GROUP BY namespace;
      DROP TABLE events_v1;
      DROP TABLE event_logs_v1;
    `);
    db.prepare("INSERT INTO meta (key, value) VALUES ('token_secret', ?)").run(newTokenSecret());
  },
  /**
   * 2 -> 3: namespace quotas. Each thread's bytes (quota.ts messageBytes over
   * its messages) and each namespace's usage are computed from what is
   * stored: one pass over the messages, once.
   */
  2: (db) => {
    db.exec(`
      ALTER TABLE threads ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
      CREATE TABLE namespace_usage (
        namespace TEXT PRIMARY KEY,
        threads INTEGER NOT NULL,
        messages INTEGER NOT NULL,
        bytes INTEGER NOT NULL
      ) STRICT, WITHOUT ROWID;
    `);
    const messages = db
      .prepare<[], [...MessageRow, number]>(
        "SELECT seq, role, create_time, content, extra, thread FROM messages",
      )
      .raw();
    // Summed first: the connection runs no other statement while it iterates.
    const bytes = new Map<number, number>();
    for (const [seq, role, time, content, extra, thread] of messages.iterate()) {
      const m = toMessage([seq, role, time, content, extra]);
      bytes.set(thread, (bytes.get(thread) ?? 0) + messageBytes(m));
    }
    const setBytes = db.prepare<[number, number]>("UPDATE threads SET bytes = ? WHERE id = ?");
    for (const [thread, n] of bytes) setBytes.run(n, thread);
    db.exec(`
      INSERT INTO namespace_usage (namespace, threads, messages, bytes)
        SELECT namespace, count(*),
          sum((SELECT count(*) FROM messages WHERE messages.thread = threads.id)), sum(bytes)
        FROM threads GROUP BY namespace;
    `);
  },
};

function toThread(row: ThreadRow): ThreadState {
  return {
    threadId: row.thread_id,
    incarnation: row.incarnation,
    // Written by saveThread from a Strategy.
    strategy: JSON.parse(row.strategy) as Strategy,
    lastSeq: row.last_seq,
    summarizedThroughSeq: row.summarized_through_seq,
    summary: row.summary,
    summaryTime: row.summary_time,
    createTime: row.create_time,
    updateTime: row.update_time,
    // Written by SqliteLabels.set from Labels.
    ...(row.labels == null ? {} : { labels: JSON.parse(row.labels) as Labels }),
    ...(row.ttl_ms == null || row.expire_at == null
      ? {}
      : { ttlMs: row.ttl_ms, expireTime: row.expire_at }),
  };
}

/** A stored message, frozen: the cache shares it with every caller. */
function toMessage([seq, role, createTime, content, extra]: MessageRow): StoredMessage {
  const m: StoredMessage = { role, content, seq, createTime };
  // Written by extraOf from the optional fields of a ChatMessage.
  if (extra !== null) Object.assign(m, JSON.parse(extra) as MessageExtra);
  return Object.freeze(m);
}

/** The optional fields of `m` as JSON, or null when it has none (the common case). */
function extraOf(m: ChatMessage): string | null {
  const extra: MessageExtra = {};
  if (m.name !== undefined) extra.name = m.name;
  if (m.toolCalls !== undefined) extra.toolCalls = m.toolCalls;
  if (m.toolCallId !== undefined) extra.toolCallId = m.toolCallId;
  if (m.metadata !== undefined) extra.metadata = m.metadata;
  return Object.keys(extra).length === 0 ? null : JSON.stringify(extra);
}
