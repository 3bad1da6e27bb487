import { statSync } from "node:fs";
import Database from "better-sqlite3";
import { messageBytes, type NamespaceUsage } from "../../core/quota.js";
import type {
  ChatMessage,
  EventBody,
  Labels,
  Role,
  StoredMessage,
  ThreadState,
} from "../../core/types.js";
import { newStoreId, newTokenSecret } from "../resume-token.js";
import type { AppendResult } from "../store.js";
import { strategyFromJson } from "../strategy-json.js";
import { ensureLabelSchema } from "./labels.js";
import { ensureTtlSchema } from "./ttl.js";

/** Version of the schema below; stored in `meta` so later releases can migrate. */
export const SQLITE_SCHEMA_VERSION = 3;

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
export const SCHEMA = `
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

export interface ThreadRow {
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
  /** JSON of the labels (sqlite/labels.ts); NULL for none. */
  labels?: string | null;
  /** Retention (sqlite/ttl.ts); NULL for none. */
  ttl_ms?: number | null;
  expire_at?: number | null;
}

/** seq, role, create_time, content, extra: read raw, as arrays, which is faster than objects. */
export type MessageRow = [number, Role, number, string, string | null];

/** The optional fields of a message, stored as JSON in `messages.extra`. */
export type MessageExtra = Omit<ChatMessage, "role" | "content">;

export interface RequestRow {
  hash: string;
  result: string;
  time: number;
}

/** What an idempotency record keeps: the first call's result. */
export type RecordedResult = Omit<AppendResult, "replayed">;

export interface EventRow {
  seq: number;
  thread_id: string;
  time: number;
  type: EventBody["type"];
  body: string;
}

const IN_USE =
  "the database is in use by another process (the SQLite store is one server process per file)";

/**
 * Takes the file's process lock: a small SQLite file beside it (PATH-lock),
 * written once in `locking_mode = EXCLUSIVE`, so its lock is held until the
 * returned connection closes (or the process dies: a restart after a crash
 * opens at once). A second holder, in another process or this one, waits
 * `busyTimeoutMs` and is refused. The database itself is opened in normal
 * locking mode, so this process's read and write connections can share it.
 */
export function lockDatabaseFile(path: string, busyTimeoutMs: number): Database.Database {
  const lock = new Database(`${path}-lock`, { timeout: busyTimeoutMs });
  try {
    lock.pragma("locking_mode = EXCLUSIVE");
    lock.pragma(`user_version = ${process.pid}`);
    return lock;
  } catch (err) {
    lock.close();
    if (err instanceof Database.SqliteError && err.code === "SQLITE_BUSY") {
      throw new Error(IN_USE, { cause: err });
    }
    throw err;
  }
}

/** Page cache of one connection, in bytes (PRAGMA cache_size takes KiB as a negative number). */
function setPageCache(db: Database.Database, bytes: number): void {
  db.pragma(`cache_size = -${Math.max(64, Math.floor(bytes / 1024))}`);
}

/**
 * Opens the write connection: WAL, `synchronous = FULL` (every commit's WAL
 * frames are fsynced before it returns), foreign keys on.
 */
export function openWriteConnection(
  path: string,
  busyTimeoutMs: number,
  pageCacheBytes: number,
): Database.Database {
  const db = new Database(path, { timeout: busyTimeoutMs });
  try {
    const mode = db.pragma("journal_mode = WAL", { simple: true });
    if (mode !== "wal") throw new Error(`journal_mode is ${String(mode)}, not wal`);
    db.pragma("synchronous = FULL");
    db.pragma("foreign_keys = ON");
    // A WAL that once grew large is cut back after checkpoints.
    db.pragma(`journal_size_limit = ${64 * 1024 * 1024}`);
    setPageCache(db, pageCacheBytes);
    return db;
  } catch (err) {
    db.close();
    throw err;
  }
}

/**
 * Opens (creating if need be) the database file, brings the schema to this
 * version, and returns the connection set up for reading only (the write
 * connection lives in the store's worker). Throws when the file cannot be
 * opened or was written by a newer schema. The caller holds the process lock.
 */
/**
 * The file's identity on its filesystem (device and inode): what tells this
 * file from a copy of it.
 */
export function fileIdentity(path: string): string | undefined {
  try {
    const s = statSync(path, { bigint: true });
    return `${s.dev}:${s.ino}`;
  } catch {
    return undefined;
  }
}

/**
 * The file's incarnation is its database_id and token_secret, which sign
 * every resume token. A file that is not the one it was at its last open (a
 * backup put back, a copy, a move to another filesystem) may hold an older
 * history than tokens clients still hold, so it takes a new incarnation:
 * those tokens are out_of_range ("re-read with Get"), never resumed at
 * positions its history reuses. Runs in the open's transaction.
 */
function adoptFileIdentity(db: Database.Database, path: string): void {
  const identity = fileIdentity(path);
  if (identity === undefined) return;
  const recorded = db.prepare("SELECT value FROM meta WHERE key = 'file_identity'").pluck().get();
  if (recorded === identity) return;
  if (recorded !== undefined) {
    const set = db.prepare("UPDATE meta SET value = ? WHERE key = ?");
    set.run(newStoreId(), "database_id");
    set.run(newTokenSecret(), "token_secret");
  }
  db.prepare("INSERT OR REPLACE INTO meta (key, value) VALUES ('file_identity', ?)").run(identity);
}

export function openDatabase(
  path: string,
  busyTimeoutMs: number,
  pageCacheBytes: number,
): Database.Database {
  const db = openWriteConnection(path, busyTimeoutMs, pageCacheBytes);
  try {
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
      // Columns and tables added after schema 3, each created when missing.
      ensureLabelSchema(db);
      ensureTtlSchema(db);
      // Leases belong to folds of a process that no longer runs (one process per file).
      db.exec("DELETE FROM fold_leases");
      adoptFileIdentity(db, path);
    }).immediate();
    db.pragma("query_only = ON");
    return db;
  } catch (err) {
    db.close();
    if (err instanceof Database.SqliteError && err.code === "SQLITE_BUSY") {
      throw new Error(IN_USE, { cause: err });
    }
    throw err;
  }
}

export const NO_USAGE: NamespaceUsage = { threads: 0, messages: 0, bytes: 0 };

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

export function toThread(row: ThreadRow): ThreadState {
  return {
    threadId: row.thread_id,
    incarnation: row.incarnation,
    // Written by saveThread from a Strategy.
    strategy: strategyFromJson(row.strategy),
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
export function toMessage([seq, role, createTime, content, extra]: MessageRow): StoredMessage {
  const m: StoredMessage = { role, content, seq, createTime };
  // Written by extraOf from the optional fields of a ChatMessage.
  if (extra !== null) Object.assign(m, JSON.parse(extra) as MessageExtra);
  return Object.freeze(m);
}

/** The optional fields of `m` as JSON, or null when it has none (the common case). */
export function extraOf(m: ChatMessage): string | null {
  const extra: MessageExtra = {};
  if (m.name !== undefined) extra.name = m.name;
  if (m.toolCalls !== undefined) extra.toolCalls = m.toolCalls;
  if (m.toolCallId !== undefined) extra.toolCallId = m.toolCallId;
  if (m.metadata !== undefined) extra.metadata = m.metadata;
  // The token count travels here too; rows written before it existed have none (counted on read).
  if (m.tokens !== undefined) extra.tokens = m.tokens;
  if (m.tokenEncoding !== undefined) extra.tokenEncoding = m.tokenEncoding;
  return Object.keys(extra).length === 0 ? null : JSON.stringify(extra);
}
