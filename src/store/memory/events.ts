import { invalidArgument, MemoryError } from "../../core/errors.js";
import type { EventBody, MemoryEvent } from "../../core/types.js";
import { newStoreId, newTokenSecret, ResumeTokens } from "../resume-token.js";

/** Cursors of the newest events kept for IssuedCursors. */
const ISSUED_CURSORS_KEPT = 4096;

/**
 * The memory store's event cursors (resume-token.ts): the event's number in
 * its namespace and a MAC under a key random per process; the store id is
 * random per process too, so a cursor from before a restart refers to
 * history this process never had: out_of_range, never silently resumed from
 * somewhere else.
 */
export class EventCursors {
  readonly tokens = new ResumeTokens(
    newStoreId(),
    newTokenSecret(),
    "the history it refers to is no longer retained (the server restarted)",
    /^[0-9a-f]{8}\.\d{1,15}$/,
  );
  readonly #issued = new IssuedCursors(ISSUED_CURSORS_KEPT);

  /** The cursor of event `no` of `namespace`, remembered for a cheap open. */
  issueForWatch(namespace: string, no: number): string {
    const cursor = this.tokens.issue(namespace, no);
    this.#issued.remember(cursor, namespace, no);
    return cursor;
  }

  /** The event number `cursor` names in `namespace` (resume-token.ts ResumeTokens.open). */
  open(namespace: string, cursor: string): number {
    // Every watcher of a namespace reads on from the cursor of the event it
    // sent last, which this process issued: checked by equality, not a MAC.
    return this.#issued.positionOf(cursor, namespace) ?? this.tokens.open(namespace, cursor);
  }
}

/**
 * One namespace's retained events and subscribers. Events are numbered 1,
 * 2, 3 … in the namespace; events[i] has number first + i.
 */
export class NamespaceLog {
  readonly #name: string;
  readonly #cursors: EventCursors;
  readonly #retention: number;
  #events: MemoryEvent[] = [];
  #first = 1;
  #next = 1;
  readonly #listeners = new Set<(events: MemoryEvent[]) => void>();

  constructor(name: string, cursors: EventCursors, retention: number) {
    this.#name = name;
    this.#cursors = cursors;
    this.#retention = retention;
  }

  /** The number of the newest event; 0 before the first. */
  get head(): number {
    return this.#next - 1;
  }

  /** Appends an event; the caller publishes it (alone or with its batch). */
  log(threadId: string, time: number, body: EventBody): MemoryEvent {
    const no = this.#next++;
    const name = this.#name;
    const cursors = this.#cursors;
    let cursor: string | undefined;
    // The cursor's MAC costs microseconds and only Watch reads it: made on first read.
    const event: MemoryEvent = {
      ...body,
      get cursor() {
        if (cursor === undefined) cursor = cursors.issueForWatch(name, no);
        return cursor;
      },
      threadId,
      time,
    };
    this.#events.push(event);
    // Drop a whole retention's worth at once, so trimming costs O(1) per event
    // amortised; the log keeps between 1x and 2x eventRetention events.
    if (this.#events.length >= this.#retention * 2) {
      const excess = this.#events.length - this.#retention;
      this.#events.splice(0, excess);
      this.#first += excess;
    }
    return event;
  }

  /** Hands `events` to every subscriber. */
  publish(events: MemoryEvent[]): void {
    if (events.length === 0) return;
    for (const listener of this.#listeners) listener(events);
  }

  /** Logs one event and publishes it. */
  emit(threadId: string, time: number, body: EventBody): void {
    this.publish([this.log(threadId, time, body)]);
  }

  /** At most `limit` events after number `no`, oldest first (Store.readEvents). */
  after(no: number, limit: number): MemoryEvent[] {
    if (no >= this.#next) {
      throw invalidArgument("resume_token", "refers to an event this server never logged");
    }
    if (no + 1 < this.#first) {
      throw new MemoryError(
        "out_of_range",
        "resume_token: the events after it are no longer retained; re-read with Get and watch from now",
        { field: "resume_token" },
      );
    }
    const from = no + 1 - this.#first;
    return this.#events.slice(from, from + limit);
  }

  subscribe(listener: (events: MemoryEvent[]) => void): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  /** Drops every subscriber (Store.close). */
  close(): void {
    this.#listeners.clear();
  }
}

/**
 * Cursors this store issued lately, with their namespace and position: a
 * cursor given back exactly as issued, for the namespace it was issued for,
 * needs no MAC check (Watch reads on from its last event's cursor once per
 * event and watcher). Bounded; oldest out.
 */
class IssuedCursors {
  readonly #byCursor = new Map<string, { namespace: string; position: number }>();
  constructor(readonly max: number) {}

  remember(cursor: string, namespace: string, position: number): void {
    if (this.#byCursor.size >= this.max) {
      const oldest = this.#byCursor.keys().next();
      if (oldest.done !== true) this.#byCursor.delete(oldest.value);
    }
    this.#byCursor.set(cursor, { namespace, position });
  }

  positionOf(cursor: string, namespace: string): number | undefined {
    const known = this.#byCursor.get(cursor);
    return known !== undefined && known.namespace === namespace ? known.position : undefined;
  }
}
