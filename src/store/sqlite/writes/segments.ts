import type Database from "better-sqlite3";
import type { LineageEntry } from "../../../core/lineage.js";

/**
 * Segments on the write connection (core/lineage.ts): new ids, frozen
 * segments with their reference counts, and their release. Ids come from
 * `segment_counter` in meta, which thread keys share (a thread's first head
 * is its key), so no new id ever names a frozen segment still referenced,
 * even after the thread that froze it was cleared and its key's row gone.
 */
export class Segments {
  readonly #next: Database.Statement<[], number>;
  readonly #freeze: Database.Statement<[number, number, number]>;
  readonly #addRef: Database.Statement<[number]>;
  readonly #release: Database.Statement<[number], { refs: number; count: number; bytes: number }>;
  readonly #deleteSegment: Database.Statement<[number]>;
  readonly #deleteMessages: Database.Statement<[number]>;

  constructor(db: Database.Database) {
    this.#next = db
      .prepare<[], number>(
        "UPDATE meta SET value = value + 1 WHERE key = 'segment_counter' RETURNING value",
      )
      .pluck();
    this.#freeze = db.prepare("INSERT INTO segments (id, refs, count, bytes) VALUES (?, 0, ?, ?)");
    this.#addRef = db.prepare("UPDATE segments SET refs = refs + 1 WHERE id = ?");
    this.#release = db.prepare(
      "UPDATE segments SET refs = refs - 1 WHERE id = ? RETURNING refs, count, bytes",
    );
    this.#deleteSegment = db.prepare("DELETE FROM segments WHERE id = ?");
    this.#deleteMessages = db.prepare("DELETE FROM messages WHERE thread = ?");
  }

  /** A new id for a thread's key or an owned head. */
  nextId(): number {
    const id = this.#next.get();
    if (id === undefined) throw new Error("sqlite store: no segment_counter in meta");
    return id;
  }

  /** Records an owned head as frozen, with no reference yet (reference adds them). */
  freeze(segment: number, count: number, bytes: number): void {
    this.#freeze.run(segment, count, bytes);
  }

  /** One reference more on each entry's segment. */
  reference(entries: readonly LineageEntry[]): void {
    for (const e of entries) this.#addRef.run(Number(e.segment));
  }

  /**
   * One reference less on each entry's segment; a segment left with none is
   * deleted whole. Returns the messages and bytes freed (to leave the usage).
   * A freed segment's messages go in one statement, as a Clear of a thread
   * of that length did before forks (its cascade).
   */
  release(entries: readonly LineageEntry[]): { count: number; bytes: number } {
    let count = 0;
    let bytes = 0;
    for (const e of entries) {
      const left = this.#release.get(Number(e.segment));
      if (left === undefined || left.refs > 0) continue;
      this.#deleteSegment.run(Number(e.segment));
      this.deleteMessages(Number(e.segment));
      count += left.count;
      bytes += left.bytes;
    }
    return { count, bytes };
  }

  /** Deletes every message of a segment (an owned head that goes). */
  deleteMessages(segment: number): void {
    this.#deleteMessages.run(segment);
  }
}
