import { statSync } from "node:fs";
import Database from "better-sqlite3";
import { newStoreId, newTokenSecret } from "../resume-token.js";
import { migrateSchema } from "./schema.js";

/** A lock another connection holds, as the store reports it; any other error as it is. */
function inUseOr(err: unknown): unknown {
  if (!(err instanceof Database.SqliteError) || err.code !== "SQLITE_BUSY") return err;
  return new Error(
    "the database is in use by another process (the SQLite store is one server process per file)",
    { cause: err },
  );
}

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
    throw inUseOr(err);
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

/**
 * Opens (creating if need be) the database file, brings the schema to this
 * version, and returns the connection set up for reading only (the write
 * connection lives in the store's worker). Throws when the file cannot be
 * opened or was written by a newer schema. The caller holds the process lock.
 */
export function openDatabase(
  path: string,
  busyTimeoutMs: number,
  pageCacheBytes: number,
): Database.Database {
  const db = openWriteConnection(path, busyTimeoutMs, pageCacheBytes);
  try {
    db.transaction(() => {
      migrateSchema(db);
      // Leases belong to folds of a process that no longer runs (one process per file).
      db.exec("DELETE FROM fold_leases");
      adoptFileIdentity(db, path);
    }).immediate();
    db.pragma("query_only = ON");
    return db;
  } catch (err) {
    db.close();
    throw inUseOr(err);
  }
}
