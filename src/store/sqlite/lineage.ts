import type Database from "better-sqlite3";
import { type Lineage, rangesFor } from "../../core/lineage.js";
import type { StoredMessage } from "../../core/types.js";
import { entriesOf, headSegmentOf, type MessageRow, type ThreadRow, toMessage } from "./codec.js";
import { MESSAGE_QUERIES } from "./schema.js";

/**
 * A thread's lineage (core/lineage.ts) as its row and the messages table
 * hold it, and the reads of its messages across segments: one range read
 * per segment touched (rangesFor), so a window costs the window.
 */
export class LineageRows {
  readonly #range: Database.Statement<[number, number, number, number], MessageRow>;
  readonly #oldest: Database.Statement<[number], number | null>;

  constructor(db: Database.Database) {
    this.#range = db
      .prepare<[number, number, number, number], MessageRow>(MESSAGE_QUERIES.range)
      .raw();
    this.#oldest = db.prepare<[number], number | null>(MESSAGE_QUERIES.oldestSeq).pluck();
  }

  /**
   * The row's lineage. The head's low is stored nowhere: after entries it is
   * the last one's through + 1 (a head's front is trimmed only once no entry
   * is left), else the head's oldest seq (one search, as before forks).
   */
  of(row: ThreadRow): Lineage {
    const entries = entriesOf(row);
    const segment = headSegmentOf(row);
    if (segment === undefined) return { entries, head: undefined };
    const last = entries[entries.length - 1];
    const low =
      last !== undefined ? last.through + 1 : (this.#oldest.get(segment) ?? row.last_seq + 1);
    return { entries, head: { segment: String(segment), low } };
  }

  /** The thread's messages [from, to], oldest first, at most `limit` (-1: all). */
  read(lineage: Lineage, lastSeq: number, from: number, to: number, limit = -1): StoredMessage[] {
    const out: StoredMessage[] = [];
    for (const r of rangesFor(lineage, lastSeq, from, to)) {
      const left = limit < 0 ? -1 : limit - out.length;
      if (left === 0) break;
      for (const row of this.#range.all(Number(r.segment), r.from, r.to, left)) {
        out.push(toMessage(row));
      }
    }
    return out;
  }
}
