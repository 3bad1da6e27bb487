import type Database from "better-sqlite3";
import { trimCountOf } from "../../../core/append.js";
import { cutLineage, floorOf, type Lineage, raiseFloor } from "../../../core/lineage.js";
import type { NamespaceUsage } from "../../../core/quota.js";
import type { ChatMessage, StoredMessage, ThreadState } from "../../../core/types.js";
import { bytesOf, droppedDelta, removalDelta } from "../../../core/usage.js";
import type { ImportThreadCommand } from "../../store.js";
import { extraOf, NO_USAGE, type ThreadRow, toMessage } from "../codec.js";
import { LineageRows } from "../lineage.js";
import { MESSAGE_QUERIES } from "../schema.js";
import { Segments } from "./segments.js";

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
 * A thread's messages are its lineage (core/lineage.ts, sqlite/lineage.ts):
 * frozen segments it references, then its owned head, the only one it
 * changes; a thread's `bytes` counts its head.
 */
export class ThreadRows {
  readonly #thread: Database.Statement<[string, string], ThreadRow>;
  readonly #insertThread: Database.Statement<
    [number, string, string, string, string, number, number]
  >;
  readonly #insertImported: Database.Statement<
    [
      number,
      string,
      string,
      string,
      string,
      number,
      number,
      string,
      number,
      number,
      number,
      string | null,
    ]
  >;
  readonly #saveLineage: Database.Statement<[number | null, string | null, number]>;
  readonly #setBytes: Database.Statement<[number, number]>;
  readonly lineages: LineageRows;
  readonly segments: Segments;
  readonly #updateThread: Database.Statement<
    [string, number, number, string, number, number, number]
  >;
  readonly #firstThreads: Database.Statement<[string, number], ThreadRow>;
  readonly #deleteThread: Database.Statement<[number]>;
  readonly #addThreadBytes: Database.Statement<[number, number]>;
  readonly #usage: Database.Statement<[string], NamespaceUsage>;
  readonly #addUsage: Database.Statement<[string, number, number, number]>;
  readonly #insertMessage: Database.Statement<
    [number, number, string, number, string, string | null]
  >;
  readonly #deleteThrough: Database.Statement<[number, number]>;
  readonly #deleteAfter: Database.Statement<[number, number]>;

  constructor(db: Database.Database) {
    this.#thread = db.prepare("SELECT * FROM threads WHERE namespace = ? AND thread_id = ?");
    this.#insertThread = db.prepare(
      `INSERT INTO threads (id, namespace, thread_id, incarnation, strategy, last_seq,
         summarized_through_seq, summary, summary_time, create_time, update_time)
       VALUES (?, ?, ?, ?, ?, 0, 0, '', 0, ?, ?)`,
    );
    // Store.importThread's, apart so the hot path's statement stays as it is.
    this.#insertImported = db.prepare(
      `INSERT INTO threads (id, namespace, thread_id, incarnation, strategy, last_seq,
         summarized_through_seq, summary, summary_time, create_time, update_time, parent)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.#saveLineage = db.prepare("UPDATE threads SET head = ?, lineage = ? WHERE id = ?");
    this.#setBytes = db.prepare("UPDATE threads SET bytes = ? WHERE id = ?");
    this.lineages = new LineageRows(db);
    this.segments = new Segments(db);
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
    this.#insertMessage = db.prepare(
      "INSERT INTO messages (thread, seq, role, create_time, content, extra) VALUES (?, ?, ?, ?, ?, ?)",
    );
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
    const key = this.segments.nextId();
    this.#insertThread.run(
      key,
      namespace,
      state.threadId,
      state.incarnation,
      JSON.stringify(state.strategy),
      state.createTime,
      state.updateTime,
    );
    return key;
  }

  /** Inserts an imported thread as given, under `incarnation`; its key. */
  insertImported(cmd: ImportThreadCommand, incarnation: string): number {
    const key = this.segments.nextId();
    this.#insertImported.run(
      key,
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
      cmd.parent === undefined ? null : JSON.stringify(cmd.parent),
    );
    return key;
  }

  /** Inserts a Fork's new thread as core/fork.ts decideFork made it (labels and ttl apart); its key. */
  insertFork(namespace: string, t: ThreadState): number {
    const key = this.segments.nextId();
    this.#insertImported.run(
      key,
      namespace,
      t.threadId,
      t.incarnation,
      JSON.stringify(t.strategy),
      t.lastSeq,
      t.summarizedThroughSeq,
      t.summary,
      t.summaryTime,
      t.createTime,
      t.updateTime,
      t.parent === undefined ? null : JSON.stringify(t.parent),
    );
    return key;
  }

  /** Writes the thread's head and frozen entries (its head's low is derived, lineage.ts). */
  saveLineage(key: number, lineage: Lineage): void {
    const head = lineage.head === undefined ? 0 : Number(lineage.head.segment);
    this.#saveLineage.run(
      head === key ? null : head,
      lineage.entries.length === 0 ? null : JSON.stringify(lineage.entries),
      key,
    );
  }

  /** Sets the bytes of the thread's owned head. */
  setBytes(key: number, bytes: number): void {
    this.#setBytes.run(bytes, key);
  }

  /** The thread's lineage with an owned head to append to: a new one opened when it has none. */
  headForAdd(key: number, lineage: Lineage, lastSeq: number): Lineage {
    if (lineage.head !== undefined) return lineage;
    const head = { segment: String(this.segments.nextId()), low: lastSeq + 1 };
    const opened = { entries: lineage.entries, head };
    this.saveLineage(key, opened);
    return opened;
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

  /**
   * Deletes a thread (its records, labels and forks-index entry by cascade):
   * its owned head's messages, and one reference less on each frozen
   * segment it names (deleted at none); gives the room freed back.
   */
  delete(namespace: string, row: ThreadRow): void {
    const lineage = this.lineages.of(row);
    const freed = this.segments.release(lineage.entries);
    let messages = freed.count;
    if (lineage.head !== undefined) {
      messages += Math.max(0, row.last_seq - lineage.head.low + 1);
      this.segments.deleteMessages(Number(lineage.head.segment));
    }
    this.#deleteThread.run(row.id);
    this.use(namespace, removalDelta({ messages, bytes: row.bytes + freed.bytes }));
  }

  /** The oldest seq the thread stores; undefined when none. */
  oldestSeq(row: ThreadRow): number | undefined {
    const floor = floorOf(this.lineages.of(row), row.last_seq);
    return floor > row.last_seq ? undefined : floor;
  }

  /** Stores `m` at `seq` in `segment`; the message as a read returns it. */
  insertMessage(segment: number, seq: number, createTime: number, m: ChatMessage): StoredMessage {
    const extra = extraOf(m);
    this.#insertMessage.run(segment, seq, m.role, createTime, m.content, extra);
    return toMessage([seq, m.role, createTime, m.content, extra]);
  }

  /**
   * Trims the thread to its strategy's max_stored (core/append.ts
   * trimCountOf; its stored count is lastSeq - floor + 1, shared messages
   * included), reading only the front that goes, across segments.
   */
  trim(namespace: string, key: number, lineage: Lineage, state: ThreadState): Dropped {
    const floor = floorOf(lineage, state.lastSeq);
    const count = state.lastSeq - floor + 1;
    const excess = count - state.strategy.maxStored;
    if (count <= 0 || excess <= 0) return NOTHING_DROPPED;
    const front: StoredMessage[] = [];
    const at = (i: number): StoredMessage | undefined => {
      while (i >= front.length && front.length < count) {
        // Pages of the excess and a few more (tool results after the cut), then doubling.
        const page = Math.max(excess + 8, front.length);
        const from = floor + front.length;
        const rows = this.lineages.read(lineage, state.lastSeq, from, state.lastSeq, page);
        if (rows.length === 0) break;
        for (const m of rows) front.push(m);
      }
      return front[i];
    };
    const n = trimCountOf(state.strategy, count, at, state.summarizedThroughSeq);
    if (n <= 0 || front[n - 1] === undefined) return NOTHING_DROPPED;
    return this.raise(namespace, key, lineage, floor + n, front);
  }

  /**
   * Drops every seq below `newFloor` (core/lineage.ts raiseFloor): released
   * entries lose a reference (the room of a segment freed leaves the usage
   * here), the head's front goes in place. Returns what the head lost, which
   * the caller takes off the thread's bytes and the usage; `headMessages`
   * holds at least the head's messages below newFloor (for their bytes).
   */
  raise(
    namespace: string,
    key: number,
    lineage: Lineage,
    newFloor: number,
    headMessages: readonly StoredMessage[],
  ): Dropped {
    const plan = raiseFloor(lineage, newFloor);
    this.#release(namespace, plan.released);
    const head = lineage.head;
    let count = 0;
    let bytes = 0;
    if (head !== undefined && plan.headDropThrough !== undefined) {
      this.#deleteThrough.run(Number(head.segment), plan.headDropThrough);
      const dropped = headMessages.filter((m) => m.seq >= head.low && m.seq < newFloor);
      count = plan.headDropThrough - head.low + 1;
      bytes = bytesOf(dropped);
    }
    if (plan.released.length > 0 || plan.lineage.entries[0]?.low !== lineage.entries[0]?.low) {
      this.saveLineage(key, plan.lineage);
    }
    return { count, bytes, through: newFloor - 1 };
  }

  /**
   * Drops the thread's messages after `toSeq` (a Rewind; core/lineage.ts
   * cutLineage): released entries lose a reference, the head is cut in place
   * or deleted whole. Returns the stored messages the thread no longer holds
   * (`removed`) and what its head lost (count, bytes: off its bytes and the usage).
   */
  cut(
    namespace: string,
    row: ThreadRow,
    lineage: Lineage,
    toSeq: number,
  ): { removed: number; count: number; bytes: number } {
    const lastSeq = row.last_seq;
    const floor = floorOf(lineage, lastSeq);
    const removed = Math.max(0, lastSeq - Math.max(toSeq, floor - 1));
    const plan = cutLineage(lineage, lastSeq, toSeq);
    this.#release(namespace, plan.released);
    const head = lineage.head;
    let count = 0;
    let bytes = 0;
    if (head !== undefined && plan.headDropAfter !== undefined) {
      const dropped = this.lineages.read(lineage, lastSeq, plan.headDropAfter + 1, lastSeq);
      this.#deleteAfter.run(Number(head.segment), plan.headDropAfter);
      count = dropped.length;
      bytes = bytesOf(dropped);
    } else if (head !== undefined && plan.headDropped) {
      this.segments.deleteMessages(Number(head.segment));
      count = Math.max(0, lastSeq - head.low + 1);
      bytes = row.bytes;
    }
    if (lineage.entries.length > 0 || plan.headDropped) this.saveLineage(row.id, plan.lineage);
    return { removed, count, bytes };
  }

  /** One reference less on each entry; the room of the segments freed leaves the usage. */
  #release(namespace: string, released: Lineage["entries"]): void {
    if (released.length === 0) return;
    const freed = this.segments.release(released);
    this.use(namespace, droppedDelta(freed.count, freed.bytes));
  }
}
