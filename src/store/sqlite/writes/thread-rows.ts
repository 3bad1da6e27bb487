import type Database from "better-sqlite3";
import { trimCountOf } from "../../../core/append.js";
import type { NamespaceUsage } from "../../../core/quota.js";
import type { ChatMessage, StoredMessage, ThreadState } from "../../../core/types.js";
import { bytesOf, removalDelta } from "../../../core/usage.js";
import type { ImportThreadCommand } from "../../store.js";
import { extraOf, type MessageRow, NO_USAGE, type ThreadRow, toMessage } from "../codec.js";
import { MESSAGE_QUERIES } from "../schema.js";

/** Stored messages dropped from a thread that stays: how many, their bytes, the newest seq. */
export interface Dropped {
  count: number;
  bytes: number;
  /** The newest dropped seq; 0 when none. */
  through: number;
}

const NOTHING_DROPPED: Dropped = { count: 0, bytes: 0, through: 0 };

/**
 * Threads, their messages and the namespaces' usage on the write connection:
 * the statements every write shares, prepared once, each run inside the
 * caller's transaction. Stored seqs are contiguous (appends add at the end,
 * trims cut at the front, a Rewind at the end), so counts need no scan.
 */
export class ThreadRows {
  readonly #thread: Database.Statement<[string, string], ThreadRow>;
  readonly #insertThread: Database.Statement<[string, string, string, string, number, number]>;
  readonly #insertImported: Database.Statement<
    [string, string, string, string, number, number, string, number, number, number]
  >;
  readonly #updateThread: Database.Statement<
    [string, number, number, string, number, number, number]
  >;
  readonly #firstThreads: Database.Statement<[string, number], ThreadRow>;
  readonly #deleteThread: Database.Statement<[number]>;
  readonly #addThreadBytes: Database.Statement<[number, number]>;
  readonly #usage: Database.Statement<[string], NamespaceUsage>;
  readonly #addUsage: Database.Statement<[string, number, number, number]>;
  readonly #messagesFrom: Database.Statement<[number, number, number], MessageRow>;
  readonly #insertMessage: Database.Statement<
    [number, number, string, number, string, string | null]
  >;
  readonly #oldestSeq: Database.Statement<[number], number | null>;
  readonly #deleteThrough: Database.Statement<[number, number]>;
  readonly #deleteAfter: Database.Statement<[number, number]>;

  constructor(db: Database.Database) {
    this.#thread = db.prepare("SELECT * FROM threads WHERE namespace = ? AND thread_id = ?");
    this.#insertThread = db.prepare(
      `INSERT INTO threads (namespace, thread_id, incarnation, strategy, last_seq,
         summarized_through_seq, summary, summary_time, create_time, update_time)
       VALUES (?, ?, ?, ?, 0, 0, '', 0, ?, ?)`,
    );
    // Store.importThread's, apart so the hot path's statement stays as it is.
    this.#insertImported = db.prepare(
      `INSERT INTO threads (namespace, thread_id, incarnation, strategy, last_seq,
         summarized_through_seq, summary, summary_time, create_time, update_time)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.#updateThread = db.prepare(
      `UPDATE threads SET strategy = ?, last_seq = ?, summarized_through_seq = ?, summary = ?,
         summary_time = ?, update_time = ? WHERE id = ?`,
    );
    this.#firstThreads = db.prepare(
      "SELECT * FROM threads WHERE namespace = ? ORDER BY thread_id LIMIT ?",
    );
    this.#deleteThread = db.prepare("DELETE FROM threads WHERE id = ?");
    this.#addThreadBytes = db.prepare("UPDATE threads SET bytes = bytes + ? WHERE id = ?");
    this.#usage = db.prepare(
      "SELECT threads, messages, bytes FROM namespace_usage WHERE namespace = ?",
    );
    this.#addUsage = db.prepare(
      `INSERT INTO namespace_usage (namespace, threads, messages, bytes) VALUES (?, ?, ?, ?)
       ON CONFLICT (namespace) DO UPDATE SET threads = threads + excluded.threads,
         messages = messages + excluded.messages, bytes = bytes + excluded.bytes`,
    );
    this.#messagesFrom = db
      .prepare<[number, number, number], MessageRow>(MESSAGE_QUERIES.from)
      .raw();
    this.#insertMessage = db.prepare(
      "INSERT INTO messages (thread, seq, role, create_time, content, extra) VALUES (?, ?, ?, ?, ?, ?)",
    );
    this.#oldestSeq = db.prepare<[number], number | null>(MESSAGE_QUERIES.oldestSeq).pluck();
    this.#deleteThrough = db.prepare(MESSAGE_QUERIES.deleteThrough);
    this.#deleteAfter = db.prepare(MESSAGE_QUERIES.deleteAfter);
  }

  get(namespace: string, threadId: string): ThreadRow | undefined {
    return this.#thread.get(namespace, threadId);
  }

  /** The first `limit` threads of the namespace in byte order (SQLite's BINARY collation). */
  first(namespace: string, limit: number): ThreadRow[] {
    return this.#firstThreads.all(namespace, limit);
  }

  /** Inserts a thread as its first Add creates it (core/append.ts newThreadState); its key. */
  insert(namespace: string, state: ThreadState): number {
    const { lastInsertRowid } = this.#insertThread.run(
      namespace,
      state.threadId,
      state.incarnation,
      JSON.stringify(state.strategy),
      state.createTime,
      state.updateTime,
    );
    return Number(lastInsertRowid);
  }

  /** Inserts an imported thread as given, under `incarnation`; its key. */
  insertImported(cmd: ImportThreadCommand, incarnation: string): number {
    const { lastInsertRowid } = this.#insertImported.run(
      cmd.namespace,
      cmd.threadId,
      incarnation,
      JSON.stringify(cmd.strategy),
      cmd.lastSeq,
      cmd.summarizedThroughSeq,
      cmd.summary,
      cmd.summaryTime,
      cmd.createTime,
      cmd.updateTime,
    );
    return Number(lastInsertRowid);
  }

  /** Writes the thread's strategy, last_seq, summary and update time (labels and ttl apart). */
  save(key: number, t: ThreadState): void {
    this.#updateThread.run(
      JSON.stringify(t.strategy),
      t.lastSeq,
      t.summarizedThroughSeq,
      t.summary,
      t.summaryTime,
      t.updateTime,
      key,
    );
  }

  usage(namespace: string): NamespaceUsage {
    return this.#usage.get(namespace) ?? NO_USAGE;
  }

  /** Adds `delta` to the namespace's usage (and the thread's bytes, when `key` is given). */
  use(namespace: string, delta: NamespaceUsage, key?: number): void {
    if (key !== undefined && delta.bytes !== 0) this.#addThreadBytes.run(delta.bytes, key);
    if (delta.threads !== 0 || delta.messages !== 0 || delta.bytes !== 0) {
      this.#addUsage.run(namespace, delta.threads, delta.messages, delta.bytes);
    }
  }

  /** Deletes a thread (its messages, records and labels by cascade) and gives its room back. */
  delete(namespace: string, row: ThreadRow): void {
    const oldest = this.oldestSeq(row.id);
    const messages = oldest === undefined ? 0 : row.last_seq - oldest + 1;
    this.#deleteThread.run(row.id);
    this.use(namespace, removalDelta({ messages, bytes: row.bytes }));
  }

  oldestSeq(key: number): number | undefined {
    return this.#oldestSeq.get(key) ?? undefined;
  }

  /** Stores `m` at `seq`; the message as a read returns it. */
  insertMessage(key: number, seq: number, createTime: number, m: ChatMessage): StoredMessage {
    const extra = extraOf(m);
    this.#insertMessage.run(key, seq, m.role, createTime, m.content, extra);
    return toMessage([seq, m.role, createTime, m.content, extra]);
  }

  /** The thread's messages from seq `from` on (at most `limit`), oldest first. */
  loadFrom(key: number, from: number, limit = -1): StoredMessage[] {
    return this.#messagesFrom.all(key, from, limit).map(toMessage);
  }

  /**
   * Trims the thread to its strategy's max_stored (core/append.ts
   * trimCountOf), reading only the front that goes.
   */
  trim(key: number, state: ThreadState): Dropped {
    const oldest = this.oldestSeq(key);
    const count = oldest === undefined ? 0 : state.lastSeq - oldest + 1;
    const excess = count - state.strategy.maxStored;
    if (oldest === undefined || excess <= 0) return NOTHING_DROPPED;
    const front: StoredMessage[] = [];
    const at = (i: number): StoredMessage | undefined => {
      while (i >= front.length && front.length < count) {
        // Pages of the excess and a few more (tool results after the cut), then doubling.
        const page = Math.max(excess + 8, front.length);
        const rows = this.loadFrom(key, oldest + front.length, page);
        if (rows.length === 0) break;
        for (const m of rows) front.push(m);
      }
      return front[i];
    };
    const n = trimCountOf(state.strategy, count, at, state.summarizedThroughSeq);
    const through = front[n - 1];
    if (through === undefined) return NOTHING_DROPPED;
    this.#deleteThrough.run(key, through.seq);
    return { count: n, bytes: bytesOf(front.slice(0, n)), through: through.seq };
  }

  /** Deletes the thread's messages after `seq` (a Rewind); how many went and their bytes. */
  dropAfter(key: number, seq: number): { count: number; bytes: number } {
    const dropped = this.loadFrom(key, seq + 1);
    if (dropped.length > 0) this.#deleteAfter.run(key, seq);
    return { count: dropped.length, bytes: bytesOf(dropped) };
  }
}
