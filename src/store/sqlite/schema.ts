import type Database from "better-sqlite3";
import { messageBytes } from "../../core/quota.js";
import { newStoreId, newTokenSecret } from "../resume-token.js";
import { type MessageRow, toMessage } from "./codec.js";
import { ensureLabelSchema } from "./labels.js";
import { ensureTtlSchema } from "./ttl.js";

/** Version of the schema below; stored in `meta` so later releases can migrate. */
export const SQLITE_SCHEMA_VERSION = 4;

/**
 * The queries that let a Get, a trim and a Rewind cost what they return or
 * drop, not the thread's length: each is one search of the messages table's
 * primary key (thread, seq) (test/store/sqlite-store.test.ts checks their plans).
 */
export const MESSAGE_QUERIES = {
  /** A thread's messages from a seq on, oldest first: a windowed read, a trim's front. */
  from: `SELECT seq, role, create_time, content, extra FROM messages
    WHERE thread = ? AND seq >= ? ORDER BY seq LIMIT ?`,
  oldestSeq: "SELECT min(seq) FROM messages WHERE thread = ?",
  /** One segment's seqs [from, to], oldest first: a read of one part of a lineage. */
  range: `SELECT seq, role, create_time, content, extra FROM messages
    WHERE thread = ? AND seq >= ? AND seq <= ? ORDER BY seq LIMIT ?`,
  deleteThrough: "DELETE FROM messages WHERE thread = ? AND seq <= ?",
  /** What a Rewind drops: the messages after its to_seq. */
  deleteAfter: "DELETE FROM messages WHERE thread = ? AND seq > ?",
} as const;

/**
 * Messages by segment (schema 4 on): `thread` names the segment, which is
 * the thread's key for the head every thread starts with (and every thread
 * of schema 3 has), so rows of older files stay as they are. No foreign key:
 * a frozen segment outlives the thread that froze it (sqlite/writes/segments.ts).
 */
const MESSAGES_SCHEMA = `-- Clustered by (segment, seq): recall reads one segment's messages in one range scan.
CREATE TABLE IF NOT EXISTS messages (
  thread INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  role TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  content TEXT NOT NULL,
  extra TEXT,
  PRIMARY KEY (thread, seq)
) STRICT, WITHOUT ROWID`;

/**
 * Forks (schema 4 on): frozen segments with their reference counts and
 * physical size, and the forks index (parent id -> fork ids, byte order),
 * whose rows go with the fork by cascade.
 */
const SEGMENTS_SCHEMA = `;
CREATE TABLE IF NOT EXISTS segments (
  id INTEGER PRIMARY KEY,
  refs INTEGER NOT NULL,
  count INTEGER NOT NULL,
  bytes INTEGER NOT NULL
) STRICT;

CREATE TABLE IF NOT EXISTS thread_forks (
  namespace TEXT NOT NULL,
  parent_id TEXT NOT NULL,
  thread_id TEXT NOT NULL,
  thread INTEGER NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
  PRIMARY KEY (namespace, parent_id, thread_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS thread_forks_by_thread ON thread_forks (thread);
`;

/**
 * Columns of threads for forks (schema 4 on): `head`, the owned segment
 * (NULL: the thread's own key, as every thread starts; 0: none until the
 * next Add), `lineage`, the JSON of its frozen entries (NULL: none), and
 * `parent`, the JSON of its ForkOrigin (NULL: not a fork). `bytes` counts
 * the owned head's messages only.
 */
const LINEAGE_COLUMNS = ["head INTEGER", "lineage TEXT", "parent TEXT"];

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
  ${LINEAGE_COLUMNS.map((c) => `${c},`).join("\n  ")}
  UNIQUE (namespace, thread_id)
) STRICT;

${MESSAGES_SCHEMA}
${SEGMENTS_SCHEMA}
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

/**
 * Brings the file's schema to this version inside the caller's transaction:
 * creates it in a new file (with the file's id, token secret and lease
 * counter), or runs MIGRATIONS from the version it has. Throws for a file
 * written by a newer schema.
 */
export function migrateSchema(db: Database.Database): void {
  db.exec(
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value ANY NOT NULL) STRICT, WITHOUT ROWID",
  );
  const version = db.prepare("SELECT value FROM meta WHERE key = 'schema_version'").pluck().get();
  if (version === undefined) {
    db.exec(SCHEMA);
    const init = db.prepare("INSERT INTO meta (key, value) VALUES (?, ?)");
    init.run("schema_version", SQLITE_SCHEMA_VERSION);
    init.run("database_id", newStoreId());
    init.run("token_secret", newTokenSecret());
    init.run("lease_counter", 0);
    init.run("segment_counter", 0);
  } else if (typeof version !== "number" || version > SQLITE_SCHEMA_VERSION) {
    throw new Error(
      `schema version ${String(version)} is newer than this server's (${SQLITE_SCHEMA_VERSION})`,
    );
  } else {
    for (let v = version; v < SQLITE_SCHEMA_VERSION; v++) MIGRATIONS[v]?.(db);
    db.prepare("UPDATE meta SET value = ? WHERE key = 'schema_version'").run(SQLITE_SCHEMA_VERSION);
  }
  // Columns and tables added after schema 3, each created when missing.
  ensureLabelSchema(db);
  ensureTtlSchema(db);
}

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
  3: migrateToSegments,
};

/**
 * 3 -> 4: forks. No message row is rewritten: each thread's messages become
 * its owned head, whose segment id is the thread's key (head NULL). The
 * messages table loses its foreign key to threads (a frozen segment outlives
 * its thread) by editing its stored definition, which SQLite documents as
 * safe for dropping a constraint (https://sqlite.org/lang_altertable.html,
 * "otheralter"): the rows on disk do not change, so it costs O(1), not a copy
 * of the table. Thread keys and segment ids are drawn from one counter from
 * here on (`segment_counter`), so a new id never names a live frozen segment.
 */
function migrateToSegments(db: Database.Database): void {
  const version = db.pragma("schema_version", { simple: true }) as number;
  db.unsafeMode(true);
  try {
    db.pragma("writable_schema = ON");
    db.prepare("UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = 'messages'").run(
      MESSAGES_SCHEMA.replace("IF NOT EXISTS ", "").replace(/^--.*\n/, ""),
    );
    db.pragma(`schema_version = ${version + 1}`);
    db.pragma("writable_schema = OFF");
  } finally {
    db.unsafeMode(false);
  }
  for (const c of LINEAGE_COLUMNS) db.exec(`ALTER TABLE threads ADD COLUMN ${c}`);
  db.exec(SEGMENTS_SCHEMA.slice(1));
  db.prepare(
    "INSERT INTO meta (key, value) VALUES ('segment_counter', (SELECT coalesce(max(id), 0) FROM threads))",
  ).run();
}
