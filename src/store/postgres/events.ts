import { MemoryError } from "../../core/errors.js";
import type { NamespaceUsage } from "../../core/quota.js";
import type { EventBody, MemoryEvent } from "../../core/types.js";
import { historyLostError, type ResumeTokens } from "../resume-token.js";
import { type EventRow, eventBody, toEvent } from "./codec.js";

/** The channel new events are announced on; the payload is the namespace, never the event. */
export const EVENTS_CHANNEL = "windlass_events";

/**
 * A query on one connection: the rows. `name` makes it a prepared statement
 * of that connection (parsed and planned once per connection); give one only
 * to a constant SQL text with explicit column lists, since a `SELECT *`
 * prepared before a migration adds a column fails after it.
 */
export type Query = <R = Record<string, unknown>>(
  sql: string,
  params?: unknown[],
  name?: string,
) => Promise<R[]>;

/** A namespace's row as a write transaction holds it (locked FOR UPDATE). */
export interface NamespaceRow {
  lastEvent: number;
  droppedThrough: number;
  usage: NamespaceUsage;
}

interface Pending {
  threadId: string;
  time: number;
  body: EventBody;
}

/**
 * One write transaction's view of the namespaces it writes: each one's row
 * is locked before anything else of the namespace (so every write takes its
 * locks in one order: namespaces in the group's order, then rows inside
 * them), and kept here while the transaction runs. Events are numbered in
 * memory and written, with the row, by `flush` at the end of each write:
 * one statement for the log, the counters and the NOTIFY (delivered by
 * Postgres at COMMIT, and dropped with a savepoint rolled back).
 */
export class NamespaceLog {
  readonly #q: Query;
  readonly #retention: number;
  readonly #rows = new Map<string, NamespaceRow>();
  #pending = new Map<string, Pending[]>();

  constructor(q: Query, eventRetention: number) {
    this.#q = q;
    this.#retention = eventRetention;
  }

  /** The namespace's row, locked for the rest of the transaction. */
  async lock(namespace: string): Promise<NamespaceRow> {
    const held = this.#rows.get(namespace);
    if (held !== undefined) return held;
    const select = lockStatement("$1");
    let rows = await this.#q<NsColumns>(select, [namespace], "windlass_lock_namespace");
    if (rows.length === 0) {
      await this.#q(
        `INSERT INTO namespaces (namespace, last_event, dropped_through, threads, messages, bytes)
         VALUES ($1, 0, 0, 0, 0, 0) ON CONFLICT DO NOTHING`,
        [namespace],
      );
      rows = await this.#q<NsColumns>(select, [namespace]);
    }
    const r = rows[0];
    if (r === undefined) throw new Error("postgres store: the namespace row vanished");
    return this.adopt(namespace, r);
  }

  /** Holds the namespace's row as read by `lockStatement` in this transaction. */
  adopt(namespace: string, r: NsColumns): NamespaceRow {
    const row: NamespaceRow = {
      lastEvent: r.last_event,
      droppedThrough: r.dropped_through,
      usage: { threads: r.threads, messages: r.messages, bytes: r.bytes },
    };
    this.#rows.set(namespace, row);
    return row;
  }

  /** The row of a namespace this transaction has locked, if it has. */
  held(namespace: string): NamespaceRow | undefined {
    return this.#rows.get(namespace);
  }

  /** Logs an event of a locked namespace; its position in the namespace's log. */
  log(namespace: string, threadId: string, time: number, body: EventBody): number {
    const row = this.#rows.get(namespace);
    if (row === undefined) throw new Error("postgres store: event logged in an unlocked namespace");
    let list = this.#pending.get(namespace);
    if (list === undefined) {
      list = [];
      this.#pending.set(namespace, list);
    }
    list.push({ threadId, time, body });
    row.lastEvent += 1;
    return row.lastEvent;
  }

  /** Adds `delta` to a locked namespace's usage (written by flush). */
  use(namespace: string, delta: NamespaceUsage): void {
    const row = this.#rows.get(namespace);
    if (row === undefined) throw new Error("postgres store: usage of an unlocked namespace");
    row.usage = {
      threads: row.usage.threads + delta.threads,
      messages: row.usage.messages + delta.messages,
      bytes: row.usage.bytes + delta.bytes,
    };
  }

  /** What a write may be rolled back to (its savepoint): the rows as they are now. */
  snapshot(): Map<string, NamespaceRow> {
    return new Map([...this.#rows].map(([k, v]) => [k, { ...v, usage: { ...v.usage } }]));
  }

  /** Back to a snapshot, after ROLLBACK TO SAVEPOINT; what was pending is gone. */
  restore(saved: Map<string, NamespaceRow>): void {
    this.#rows.clear();
    for (const [k, v] of saved) this.#rows.set(k, v);
    this.#pending = new Map();
  }

  /**
   * Writes the pending events and the rows they changed; for each namespace
   * that logged events, the position of the first.
   */
  async flush(touched: readonly string[]): Promise<LoggedFrom[]> {
    const logged: LoggedFrom[] = [];
    for (const namespace of touched) {
      const taken = await this.take(namespace);
      if (taken === undefined) continue;
      await this.#q(FLUSH, [namespace, ...taken.params], "windlass_flush_log");
      logged.push(...taken.logged);
    }
    return logged;
  }

  /**
   * Takes the namespace's pending events and row, for a statement that
   * writes them with other rows (FLUSH_COLUMNS, after the namespace: $2 on
   * in FLUSH); undefined when the namespace is not locked. Drops the events
   * past retention first, when due.
   */
  async take(namespace: string): Promise<{ params: unknown[]; logged: LoggedFrom[] } | undefined> {
    const row = this.#rows.get(namespace);
    if (row === undefined) return undefined;
    const events = this.#pending.get(namespace) ?? [];
    this.#pending.delete(namespace);
    const first = row.lastEvent - events.length + 1;
    // Retention in chunks, so dropping costs O(1) per event amortised.
    const excess = row.lastEvent - row.droppedThrough - this.#retention;
    if (excess > 0 && (excess >= 64 || excess > this.#retention)) {
      const cut = row.lastEvent - this.#retention;
      await this.#q("DELETE FROM events WHERE namespace = $1 AND seq <= $2", [namespace, cut]);
      row.droppedThrough = cut;
    }
    const params = [
      events.map((_, i) => first + i),
      events.map((e) => e.threadId),
      events.map((e) => e.time),
      events.map((e) => e.body.type),
      events.map((e) => eventBody(e.body)),
      row.lastEvent,
      row.droppedThrough,
      row.usage.threads,
      row.usage.messages,
      row.usage.bytes,
      events.length > 0,
    ];
    return { params, logged: events.length > 0 ? [{ namespace, first }] : [] };
  }
}

/** Where a commit's events of a namespace start. */
export interface LoggedFrom {
  namespace: string;
  first: number;
}

/** The statement that locks a namespace's row (`namespace`: a parameter or a literal). */
export function lockStatement(namespace: string): string {
  return `SELECT last_event, dropped_through, threads, messages, bytes
    FROM namespaces WHERE namespace = ${namespace} FOR UPDATE`;
}

export interface NsColumns {
  last_event: number;
  dropped_through: number;
  threads: number;
  messages: number;
  bytes: number;
}

/**
 * The log's part of a statement ($1 the namespace, then the 11 parameters
 * of NamespaceLog.take from `$from` on): CTEs that insert the events and
 * send the NOTIFY (when there were events), and the UPDATE of the
 * namespace's row that ends the statement.
 */
export function logStatementParts(from: number): { ctes: string; update: string } {
  const p = (i: number) => `$${from + i}`;
  return {
    ctes: `logged AS (
  INSERT INTO events (namespace, seq, thread_id, time, type, body)
  SELECT $1, * FROM unnest(${p(0)}::bigint[], ${p(1)}::text[], ${p(2)}::bigint[], ${p(3)}::text[],
    ${p(4)}::text[])
), notified AS (
  SELECT CASE WHEN ${p(10)}::boolean THEN pg_notify('${EVENTS_CHANNEL}', $1) END AS n
)`,
    update: `UPDATE namespaces SET last_event = ${p(5)}, dropped_through = ${p(6)}, threads = ${p(7)},
  messages = ${p(8)}, bytes = ${p(9)}
FROM notified WHERE namespace = $1`,
  };
}

const LOG = logStatementParts(2);

/** One round trip: the events, the namespace row and (when there were events) the NOTIFY. */
const FLUSH = `WITH ${LOG.ctes}
${LOG.update}`;

/**
 * Events of `namespace` after position `after`, at most `limit`. A position
 * ahead of the namespace's newest event was signed with this database's key
 * yet is not in its history: the database was put back to an older state
 * (a restored backup), so out_of_range, as SQLite and Redis answer.
 */
export async function readEventsAfter(
  q: Query,
  tokens: ResumeTokens,
  namespace: string,
  after: number,
  limit: number,
): Promise<MemoryEvent[]> {
  const rows = await q<EventRow & { last_event: number | null; dropped_through: number | null }>(
    `SELECT n.last_event, n.dropped_through, e.seq, e.thread_id, e.time, e.type, e.body
     FROM (SELECT 1) one
     LEFT JOIN namespaces n ON n.namespace = $1
     LEFT JOIN LATERAL (SELECT * FROM events WHERE namespace = $1 AND seq > $2
       ORDER BY seq LIMIT $3) e ON true`,
    [namespace, after, Math.max(0, limit)],
  );
  const head = rows[0]?.last_event ?? 0;
  const dropped = rows[0]?.dropped_through ?? 0;
  if (after > head) {
    throw historyLostError(
      "the database's history no longer reaches it (it was put back to an older state)",
    );
  }
  if (after < dropped) {
    throw new MemoryError(
      "out_of_range",
      "resume_token: the events after it are no longer retained; re-read with Get and watch from now",
      { field: "resume_token" },
    );
  }
  return rows.filter((r) => r.seq !== null).map((r) => toEvent(r, tokens.issue(namespace, r.seq)));
}

/** The newest event number of a namespace (0 before its first). */
export async function headPosition(q: Query, namespace: string): Promise<number> {
  const rows = await q<{ last_event: number }>(
    "SELECT last_event FROM namespaces WHERE namespace = $1",
    [namespace],
  );
  return rows[0]?.last_event ?? 0;
}
