import type Database from "better-sqlite3";
import type { Labels } from "../../core/types.js";

/**
 * Thread labels in the SQLite store: a `labels` column on threads (JSON,
 * NULL for none) that a thread's read returns, and the `thread_labels` index
 * a filtered ListThreads searches, one row per (thread, label), clustered by
 * (namespace, key, value, thread_id) so each label's threads are one range in
 * byte order. Rows go with their thread by cascade. Added on open when
 * missing (idempotent, no schema version of its own): a file of an earlier
 * release gains them on its first open by this one.
 */
export function ensureLabelSchema(db: Database.Database): void {
  const columns = db.prepare("SELECT name FROM pragma_table_info('threads')").pluck().all();
  if (!columns.includes("labels")) db.exec("ALTER TABLE threads ADD COLUMN labels TEXT");
  db.exec(`
    CREATE TABLE IF NOT EXISTS thread_labels (
      namespace TEXT NOT NULL,
      key TEXT NOT NULL,
      value TEXT NOT NULL,
      thread_id TEXT NOT NULL,
      thread INTEGER NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
      PRIMARY KEY (namespace, key, value, thread_id)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS thread_labels_by_thread ON thread_labels (thread);
  `);
}

/** Statements of the labels, prepared once per store. */
export class SqliteLabels {
  readonly #db: Database.Database;
  readonly #setColumn: Database.Statement<[string | null, number]>;
  readonly #deleteRows: Database.Statement<[number]>;
  readonly #insertRow: Database.Statement<[string, string, string, string, number]>;
  /** Filtered listings by number of labels (at most MAX_LABELS of them). */
  readonly #lists = new Map<number, Database.Statement<unknown[], string>>();

  constructor(db: Database.Database) {
    this.#db = db;
    this.#setColumn = db.prepare("UPDATE threads SET labels = ? WHERE id = ?");
    this.#deleteRows = db.prepare("DELETE FROM thread_labels WHERE thread = ?");
    this.#insertRow = db.prepare(
      "INSERT INTO thread_labels (namespace, key, value, thread_id, thread) VALUES (?, ?, ?, ?, ?)",
    );
  }

  /** Sets the thread's labels, inside the caller's transaction. */
  set(namespace: string, threadId: string, key: number, labels: Labels): void {
    this.#setColumn.run(JSON.stringify(labels), key);
    this.#deleteRows.run(key);
    for (const [k, v] of Object.entries(labels))
      this.#insertRow.run(namespace, k, v, threadId, key);
  }

  /**
   * Ids after `after` carrying every label, ascending, at most `limit`: one
   * range of the index for the first label joined by primary-key lookups
   * for the others (SQLite's planner may pick another label to drive).
   */
  list(namespace: string, after: string, limit: number, labels: Labels, now: number): string[] {
    const entries = Object.entries(labels);
    let statement = this.#lists.get(entries.length);
    if (statement === undefined) {
      statement = this.#db.prepare<unknown[], string>(labeledListSql(entries.length)).pluck();
      this.#lists.set(entries.length, statement);
    }
    const [first, ...rest] = entries;
    if (first === undefined) return [];
    return statement.all(
      ...rest.flat(),
      namespace,
      first[0],
      first[1],
      after,
      now,
      Math.max(0, limit),
    );
  }
}

/**
 * The filtered listing for `count` labels. Parameters: key and value of each
 * label after the first, then namespace, the first key and value, after,
 * limit. test/store/sqlite-store.test.ts checks its plan searches the index.
 */
export function labeledListSql(count: number): string {
  const joins: string[] = [];
  for (let i = 1; i < count; i++) {
    joins.push(
      `JOIN thread_labels l${i} ON l${i}.namespace = l0.namespace AND l${i}.key = ? AND l${i}.value = ? AND l${i}.thread_id = l0.thread_id`,
    );
  }
  // Expired threads are left out (gone for every call before the sweep comes).
  return `SELECT l0.thread_id FROM thread_labels l0 ${joins.join(" ")}
    JOIN threads t ON t.id = l0.thread
    WHERE l0.namespace = ? AND l0.key = ? AND l0.value = ? AND l0.thread_id > ?
      AND (t.expire_at IS NULL OR t.expire_at > ?)
    ORDER BY l0.thread_id LIMIT ?`;
}

/**
 * The forks index (schema.ts thread_forks): parent id -> fork ids in byte
 * order, one row per fork, gone with the fork by cascade (a parent's Clear
 * leaves its forks listed under its id). Listed like a label: one range of
 * the index, joined with the label rows for a filter that has both.
 */
export class SqliteForks {
  readonly #db: Database.Database;
  readonly #add: Database.Statement<[string, string, string, number]>;
  /** Listings by number of labels (0 to MAX_LABELS). */
  readonly #lists = new Map<number, Database.Statement<unknown[], string>>();

  constructor(db: Database.Database) {
    this.#db = db;
    this.#add = db.prepare(
      "INSERT INTO thread_forks (namespace, parent_id, thread_id, thread) VALUES (?, ?, ?, ?)",
    );
  }

  /** Indexes `threadId` (key `key`) as a fork of `parentId`, inside the caller's transaction. */
  add(namespace: string, parentId: string, threadId: string, key: number): void {
    this.#add.run(namespace, parentId, threadId, key);
  }

  /** Unexpired forks of `parentId` after `after` carrying every label, ascending, at most `limit`. */
  list(
    namespace: string,
    parentId: string,
    after: string,
    limit: number,
    labels: Labels | undefined,
    now: number,
  ): string[] {
    const entries = Object.entries(labels ?? {});
    let statement = this.#lists.get(entries.length);
    if (statement === undefined) {
      statement = this.#db.prepare<unknown[], string>(forksListSql(entries.length)).pluck();
      this.#lists.set(entries.length, statement);
    }
    return statement.all(...entries.flat(), namespace, parentId, after, now, Math.max(0, limit));
  }
}

/** The listing of a parent's forks with `count` labels (parameters: each label's key and value, then namespace, parent, after, now, limit). */
export function forksListSql(count: number): string {
  const joins: string[] = [];
  for (let i = 0; i < count; i++) {
    joins.push(
      `JOIN thread_labels l${i} ON l${i}.namespace = f.namespace AND l${i}.key = ? AND l${i}.value = ? AND l${i}.thread_id = f.thread_id`,
    );
  }
  return `SELECT f.thread_id FROM thread_forks f ${joins.join(" ")}
    JOIN threads t ON t.id = f.thread
    WHERE f.namespace = ? AND f.parent_id = ? AND f.thread_id > ?
      AND (t.expire_at IS NULL OR t.expire_at > ?)
    ORDER BY f.thread_id LIMIT ?`;
}
