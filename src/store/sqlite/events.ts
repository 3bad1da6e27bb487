import type Database from "better-sqlite3";
import { MemoryError } from "../../core/errors.js";
import type { MemoryEvent } from "../../core/types.js";
import { historyLostError, ResumeTokens } from "../resume-token.js";
import type { EventRow } from "./codec.js";
import type { LoggedEvent } from "./writes/outcomes.js";

/**
 * The event log's read side (what Watch reads and waits on): the log by
 * cursor on the read connection, and the events of each commit published
 * to this process's subscribers as the worker's answer arrives, in commit
 * order (a subscriber may also hear events committed just before it
 * subscribed; Watch reads the log by cursor, so it sees each once).
 *
 * Cursors (resume-token.ts) carry the random id of the database file, the
 * event's seq in its namespace and a MAC under a secret kept in `meta`, so a
 * token from another file (or from the memory store) is out_of_range instead
 * of resuming at an unrelated position, and tokens stay valid across restarts
 * of the same file.
 */
export class SqliteEvents {
  readonly #tokens: ResumeTokens;
  readonly #log: Database.Statement<[string], { last_seq: number; dropped_through: number }>;
  readonly #events: Database.Statement<[string, number, number], EventRow>;
  readonly #readTx: (namespace: string, seq: number, limit: number) => MemoryEvent[];
  readonly #listeners = new Map<string, Set<(events: MemoryEvent[]) => void>>();

  constructor(db: Database.Database) {
    const meta = db.prepare<[string], unknown>("SELECT value FROM meta WHERE key = ?").pluck();
    this.#tokens = new ResumeTokens(
      String(meta.get("database_id")),
      String(meta.get("token_secret")),
      "it refers to the history of another database",
      /^[0-9a-f]{12}\.\d{1,15}$/,
    );
    this.#log = db.prepare("SELECT last_seq, dropped_through FROM event_logs WHERE namespace = ?");
    this.#events = db.prepare(
      "SELECT seq, thread_id, time, type, body FROM events WHERE namespace = ? AND seq > ? ORDER BY seq LIMIT ?",
    );
    this.#readTx = db.transaction((namespace: string, seq: number, limit: number) =>
      this.#read(namespace, seq, limit),
    );
  }

  readEvents(namespace: string, cursor: string, limit: number): MemoryEvent[] {
    return this.#readTx(namespace, this.#tokens.open(namespace, cursor), limit);
  }

  headCursor(namespace: string): string {
    return this.#tokens.issue(namespace, this.#log.get(namespace)?.last_seq ?? 0);
  }

  compareCursors(a: string, b: string): number {
    return this.#tokens.positionOf(a) - this.#tokens.positionOf(b);
  }

  subscribe(namespace: string, listener: (events: MemoryEvent[]) => void): () => void {
    let set = this.#listeners.get(namespace);
    if (set === undefined) {
      set = new Set();
      this.#listeners.set(namespace, set);
    }
    const s = set;
    s.add(listener);
    return () => {
      s.delete(listener);
      if (s.size === 0 && this.#listeners.get(namespace) === s) this.#listeners.delete(namespace);
    };
  }

  /** Hands a commit's events to the namespace's subscribers. */
  publish(namespace: string, logged: readonly LoggedEvent[]): void {
    if (logged.length === 0) return;
    const set = this.#listeners.get(namespace);
    if (set === undefined) return;
    const events = logged.map((e) => this.#withCursor(namespace, e));
    for (const listener of set) listener(events);
  }

  /** Drops every subscriber (close). */
  clear(): void {
    this.#listeners.clear();
  }

  /** A logged event with its cursor made when first read (only Watch reads it). */
  #withCursor(namespace: string, logged: LoggedEvent): MemoryEvent {
    const { position, ...event } = logged;
    const tokens = this.#tokens;
    let cursor: string | undefined;
    return {
      ...event,
      get cursor() {
        cursor ??= tokens.issue(namespace, position);
        return cursor;
      },
    };
  }

  #read(namespace: string, seq: number, limit: number): MemoryEvent[] {
    const log = this.#log.get(namespace);
    if (seq > (log?.last_seq ?? 0)) {
      // Signed with this file's key, so the file once reached it: it was put back to an older state.
      throw historyLostError(
        "the database's history no longer reaches it (the file was put back to an older copy)",
      );
    }
    if (seq < (log?.dropped_through ?? 0)) {
      throw new MemoryError(
        "out_of_range",
        "resume_token: the events after it are no longer retained; re-read with Get and watch from now",
        { field: "resume_token" },
      );
    }
    return this.#events.all(namespace, seq, Math.max(0, limit)).map((row) => {
      // The body was written by EventLogWriter.log from an EventBody of this type.
      const body = { type: row.type, ...JSON.parse(row.body) } as MemoryEvent;
      const cursor = this.#tokens.issue(namespace, row.seq);
      return { ...body, cursor, threadId: row.thread_id, time: row.time };
    });
  }
}
