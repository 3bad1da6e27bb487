import type Database from "better-sqlite3";
import type { EventBody } from "../../../core/types.js";
import type { LoggedEvent } from "./outcomes.js";

/**
 * The namespaces' event logs on the write connection: each event goes in
 * the transaction of the change it records, numbered 1, 2, 3 … per
 * namespace, and the oldest beyond `eventRetention` are dropped.
 */
export class EventLogWriter {
  readonly #count: Database.Statement<[string], { last_seq: number; retained: number }>;
  readonly #insert: Database.Statement<[string, number, string, number, string, string]>;
  readonly #dropThrough: Database.Statement<[string, number]>;
  readonly #setDropped: Database.Statement<[number, number, string]>;

  constructor(
    db: Database.Database,
    private readonly eventRetention: number,
  ) {
    this.#count = db.prepare(
      `INSERT INTO event_logs (namespace, last_seq, retained, dropped_through) VALUES (?, 1, 1, 0)
       ON CONFLICT (namespace) DO UPDATE SET last_seq = last_seq + 1, retained = retained + 1
       RETURNING last_seq, retained`,
    );
    this.#insert = db.prepare(
      "INSERT INTO events (namespace, seq, thread_id, time, type, body) VALUES (?, ?, ?, ?, ?, ?)",
    );
    this.#dropThrough = db.prepare("DELETE FROM events WHERE namespace = ? AND seq <= ?");
    this.#setDropped = db.prepare(
      "UPDATE event_logs SET retained = ?, dropped_through = ? WHERE namespace = ?",
    );
  }

  /** Appends an event inside the caller's transaction and drops old ones in chunks. */
  log(namespace: string, threadId: string, time: number, body: EventBody): LoggedEvent {
    const { type, ...fields } = body;
    const log = this.#count.get(namespace);
    if (log === undefined) throw new Error("sqlite store: event_logs upsert returned nothing");
    this.#insert.run(namespace, log.last_seq, threadId, time, type, JSON.stringify(fields));
    // Seqs of a namespace are consecutive, so the cut is found without a scan;
    // chunks keep the delete amortised O(1) per event, as in the memory store.
    const retention = this.eventRetention;
    const excess = log.retained - retention;
    if (excess > 0 && (excess >= 64 || log.retained > retention * 2)) {
      const cut = log.last_seq - retention;
      this.#dropThrough.run(namespace, cut);
      this.#setDropped.run(retention, cut, namespace);
    }
    return { ...body, position: log.last_seq, threadId, time };
  }
}
