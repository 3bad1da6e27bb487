import type Database from "better-sqlite3";

/**
 * Thread retention in the SQLite store: `ttl_ms` and `expire_at` columns on
 * threads (NULL: none) and a partial index on expire_at, so a sweep reads the
 * due threads oldest first without a scan. Added on open when missing
 * (idempotent, like sqlite/labels.ts).
 */
export function ensureTtlSchema(db: Database.Database): void {
  const columns = db.prepare("SELECT name FROM pragma_table_info('threads')").pluck().all();
  if (!columns.includes("ttl_ms")) db.exec("ALTER TABLE threads ADD COLUMN ttl_ms INTEGER");
  if (!columns.includes("expire_at")) db.exec("ALTER TABLE threads ADD COLUMN expire_at INTEGER");
  db.exec(
    "CREATE INDEX IF NOT EXISTS threads_by_expiry ON threads (expire_at) WHERE expire_at IS NOT NULL",
  );
}

/** The statements of retention, prepared once per store. */
export class SqliteTtl {
  readonly set: Database.Statement<[number | null, number | null, string, string]>;
  readonly due: Database.Statement<[number, number], { namespace: string; thread_id: string }>;

  constructor(db: Database.Database) {
    this.set = db.prepare(
      "UPDATE threads SET ttl_ms = ?, expire_at = ? WHERE namespace = ? AND thread_id = ?",
    );
    this.due = db.prepare(
      `SELECT namespace, thread_id FROM threads
       WHERE expire_at IS NOT NULL AND expire_at <= ? ORDER BY expire_at LIMIT ?`,
    );
  }
}
