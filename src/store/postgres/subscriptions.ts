import type pg from "pg";
import { MemoryError } from "../../core/errors.js";
import type { MemoryEvent } from "../../core/types.js";
import { EVENTS_CHANNEL, headPosition, type Query } from "./events.js";

type Listener = (events: MemoryEvent[]) => void;

interface Watched {
  listeners: Set<Listener>;
  /** The newest event delivered; undefined until the head is known. */
  position: number | undefined;
  /** The oldest event this store committed while the head was being read. */
  localSince: number | undefined;
  reading: boolean;
  again: boolean;
  /** Moves on when the position is reset (a new incarnation): reads begun before are dropped. */
  generation: number;
}

export interface FeedDeps {
  /** Reads on the pool. */
  q: Query;
  /** A new connection for LISTEN (not from the pool: it is held for good). */
  connect: () => pg.Client;
  /** The events after a position (the store's readEvents, by position). */
  read: (namespace: string, after: number) => Promise<MemoryEvent[]>;
  /**
   * Called on each reconnection, before anything is read: whether the
   * database is still the incarnation the store adopted (a restored or
   * replaced database is not; the store then adopts the new one).
   */
  sameIncarnation: () => Promise<boolean>;
}

/** Events read per query by a subscription catching up. */
const PAGE = 500;
const RECONNECT_MIN_MS = 50;
const RECONNECT_MAX_MS = 2_000;

/**
 * Store.subscribe for the Postgres store. Events are always read from the
 * events table, from the position each namespace's subscription has
 * delivered; what makes it read is a NOTIFY on EVENTS_CHANNEL (payload: the
 * namespace; written by any replica's commit) heard on one LISTEN
 * connection, or a commit of this store. When that connection drops
 * (Postgres restarted, a network cut), it is made again with backoff, and
 * every subscription reads on from its position, after an empty batch to
 * its listeners ("look again": a Watch re-reads from its cursor, so nothing
 * missed while deaf stays missed). A database of another incarnation resets
 * the positions to its head.
 */
export class EventFeed {
  readonly #deps: FeedDeps;
  readonly #watched = new Map<string, Watched>();
  #client: pg.Client | undefined;
  #closed = false;
  #backoff = RECONNECT_MIN_MS;
  #timer: NodeJS.Timeout | undefined;

  constructor(deps: FeedDeps) {
    this.#deps = deps;
  }

  subscribe(namespace: string, listener: Listener): () => void {
    let w = this.#watched.get(namespace);
    if (w === undefined) {
      w = {
        listeners: new Set(),
        position: undefined,
        localSince: undefined,
        reading: false,
        again: false,
        generation: 0,
      };
      this.#watched.set(namespace, w);
      this.#start(namespace, w);
    }
    const watched = w;
    watched.listeners.add(listener);
    if (this.#client === undefined && this.#timer === undefined) this.#listen();
    return () => {
      watched.listeners.delete(listener);
      if (watched.listeners.size === 0 && this.#watched.get(namespace) === watched) {
        this.#watched.delete(namespace);
      }
    };
  }

  /** This store committed events of `namespace`, the oldest at `first` when known. */
  committed(namespace: string, first?: number): void {
    const w = this.#watched.get(namespace);
    if (w === undefined) return;
    if (w.position === undefined && first !== undefined) {
      w.localSince = Math.min(w.localSince ?? first, first);
    }
    this.#read(namespace, w);
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#watched.clear();
    const c = this.#client;
    this.#client = undefined;
    await c?.end().catch(() => {});
  }

  /** Finds where a new subscription starts: the head now (or before this store's commits since). */
  #start(namespace: string, w: Watched): void {
    headPosition(this.#deps.q, namespace).then(
      (head) => {
        w.position = Math.min(head, (w.localSince ?? Number.POSITIVE_INFINITY) - 1);
        w.localSince = undefined;
        if (w.again) this.#read(namespace, w);
      },
      // The database is away: the subscription starts once it answers again.
      () => this.#later(() => this.#start(namespace, w), namespace, w),
    );
  }

  #later(f: () => void, namespace: string, w: Watched): void {
    if (this.#closed || this.#watched.get(namespace) !== w) return;
    setTimeout(() => {
      if (!this.#closed && this.#watched.get(namespace) === w) f();
    }, RECONNECT_MAX_MS).unref();
  }

  /** Reads and delivers the namespace's new events, one read at a time per namespace. */
  #read(namespace: string, w: Watched): void {
    w.again = true;
    if (w.reading || w.position === undefined) return;
    w.reading = true;
    void (async () => {
      try {
        while (w.again && !this.#closed && this.#watched.get(namespace) === w) {
          w.again = false;
          const generation = w.generation;
          const events = await this.#deps.read(namespace, w.position ?? 0);
          if (generation !== w.generation) {
            w.again = true;
            continue;
          }
          if (events.length === 0) break;
          w.position = (w.position ?? 0) + events.length;
          if (events.length >= PAGE) w.again = true;
          for (const listener of [...w.listeners]) listener(events);
        }
      } catch (err) {
        if (err instanceof MemoryError && err.code === "out_of_range") {
          // Fallen behind the retained log (or the history moved): look again, from the head.
          w.position = await headPosition(this.#deps.q, namespace).catch(() => w.position);
          for (const listener of [...w.listeners]) listener([]);
        } else {
          this.#later(() => this.#read(namespace, w), namespace, w);
        }
      } finally {
        w.reading = false;
      }
    })();
  }

  #listen(): void {
    if (this.#closed) return;
    const client = this.#deps.connect();
    this.#client = client;
    const lost = () => {
      if (this.#client !== client) return;
      this.#client = undefined;
      void client.end().catch(() => {});
      if (this.#closed) return;
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        this.#listen();
      }, this.#backoff);
      this.#timer.unref();
      this.#backoff = Math.min(RECONNECT_MAX_MS, this.#backoff * 2);
    };
    client.on("error", lost);
    client.on("end", lost);
    client.on("notification", (n) => {
      const namespace = n.payload ?? "";
      const w = this.#watched.get(namespace);
      if (w !== undefined) this.#read(namespace, w);
    });
    void (async () => {
      try {
        await client.connect();
        await client.query(`LISTEN ${EVENTS_CHANNEL}`);
        this.#backoff = RECONNECT_MIN_MS;
        await this.#listening(this.#connectedBefore);
        this.#connectedBefore = true;
      } catch {
        lost();
      }
    })();
  }

  #connectedBefore = false;

  /**
   * Once LISTEN holds: every subscription reads on from its position (what
   * was committed before LISTEN took hold had no one to hear its NOTIFY).
   * After a reconnection, first "look again" to every listener.
   */
  async #listening(reconnected: boolean): Promise<void> {
    const same = reconnected ? await this.#deps.sameIncarnation() : true;
    this.#lookAgain(reconnected, same);
  }

  /**
   * The store adopted a new incarnation of the database (found by a health
   * check): every subscription starts again at the new history's head, after
   * an empty batch ("look again") to its listeners.
   */
  historyChanged(): void {
    this.#lookAgain(true, false);
  }

  #lookAgain(reconnected: boolean, same: boolean): void {
    for (const [namespace, w] of this.#watched) {
      if (reconnected) for (const listener of [...w.listeners]) listener([]);
      if (!same) {
        // Started again at the new head; no read starts while the position is
        // unknown, and one under way is dropped.
        w.generation += 1;
        w.position = undefined;
        w.localSince = undefined;
        w.again = true;
        this.#start(namespace, w);
      } else if (w.position === undefined) w.again = true;
      else this.#read(namespace, w);
    }
  }
}
