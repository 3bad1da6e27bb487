import type { MemoryEvent } from "../../core/types.js";
import { asArray, asString, decodeEvent, streamPosition } from "./codec.js";
import { backoffMs, sleep } from "./commands.js";
import type { RedisConnection } from "./connection.js";
import type { RedisContext } from "./context.js";
import { CommandTimeout } from "./errors.js";
import { head } from "./events.js";
import type { NamespaceKeys } from "./keys.js";

/**
 * Store.subscribe: one XREAD BLOCK loop per namespace (per shard of a
 * sharded namespace, keys.ts: a subscription is one to each shard's log),
 * on its own connection, shared by that log's subscribers. Each
 * subscription starts at the head Redis has when the command sent inside
 * subscribe() runs, so it hears every event logged after the call, in
 * order (per shard), once. Events of a sharded namespace come with an empty
 * cursor: a cursor there names every shard's position, which one shard's
 * reader does not know (Watch takes its cursors from readEvents).
 */

type Listener = (events: MemoryEvent[]) => void;

/** An event read from a stream, with its position there (numbered per namespace). */
interface LoggedEvent {
  position: number;
  event: MemoryEvent;
}

interface Subscription {
  listener: Listener;
  /** Deliver only events after this position; undefined until the head read answers. */
  after: number | undefined;
  /** Events read before `after` was known (bounded; see BUFFER_LIMIT). */
  buffered: LoggedEvent[];
  active: boolean;
}

/** One log's reader: a namespace's, or one shard's of a sharded namespace. */
interface StreamReader {
  namespace: string;
  keys: NamespaceKeys;
  subscriptions: Set<Subscription>;
  /** Id of the last entry read; undefined until the first subscriber's head is known. */
  cursor: string | undefined;
  /** The incarnation `cursor` belongs to. */
  incarnation: string;
  /** Set when the reader must find its place again (a reconnect, another incarnation). */
  resync: boolean;
  running: boolean;
  connection: RedisConnection | undefined;
  stopped: boolean;
  lingerTimer: NodeJS.Timeout | undefined;
}

const XREAD_BLOCK_MS = 5000;
const XREAD_COUNT = 512;
/** A reader left without subscribers stays caught up this long, for the next Get that waits. */
const READER_LINGER_MS = 30_000;
/** Events held for a subscription whose start is not known yet (Redis slow or away). */
const BUFFER_LIMIT = 10_000;

function notify(sub: Subscription, events: MemoryEvent[]): void {
  try {
    sub.listener(events);
  } catch {
    // A listener's failure is its own; the others still get the events.
  }
}

function deliver(sub: Subscription, logged: LoggedEvent[]): void {
  if (!sub.active || logged.length === 0) return;
  const last = logged[logged.length - 1];
  if (last !== undefined) sub.after = last.position;
  notify(
    sub,
    logged.map((l) => l.event),
  );
}

function dispatch(reader: StreamReader, logged: LoggedEvent[]): void {
  for (const sub of [...reader.subscriptions]) {
    if (sub.after === undefined) {
      sub.buffered.push(...logged);
      if (sub.buffered.length > BUFFER_LIMIT) {
        sub.buffered.splice(0, sub.buffered.length - BUFFER_LIMIT);
      }
    } else {
      const after = sub.after;
      deliver(
        sub,
        logged.filter((l) => l.position > after),
      );
    }
  }
}

export class StreamReaders {
  readonly #readers = new Map<string, StreamReader>();

  constructor(
    private readonly ctx: RedisContext,
    /** A new connection for one reader (XREAD BLOCK would hold up every other command). */
    private readonly duplicate: () => RedisConnection,
  ) {}

  subscribe(namespace: string, listener: Listener): () => void {
    if (this.ctx.io.closed) return () => {};
    const ends = this.ctx.keys
      .shardsOf(namespace)
      .map((k) => this.#subscribeTo(namespace, k, listener));
    return () => {
      for (const end of ends) end();
    };
  }

  #subscribeTo(namespace: string, keys: NamespaceKeys, listener: Listener): () => void {
    const r = this.#readerOf(namespace, keys);
    clearTimeout(r.lingerTimer);
    r.lingerTimer = undefined;
    const sub: Subscription = { listener, after: undefined, buffered: [], active: true };
    r.subscriptions.add(sub);
    void this.#startSubscription(r, sub);
    return () => {
      if (!sub.active) return;
      sub.active = false;
      sub.buffered = [];
      r.subscriptions.delete(sub);
      if (r.subscriptions.size === 0 && !r.stopped) {
        r.lingerTimer = setTimeout(() => {
          if (r.subscriptions.size === 0) this.#stop(r);
        }, READER_LINGER_MS);
        r.lingerTimer.unref();
      }
    };
  }

  /**
   * The store moved to another incarnation: every reader starts again at
   * the new head, and every subscriber is told to look again (an empty
   * batch), so open Watch streams read, find their cursor refused and end
   * with out_of_range.
   */
  restartAll(): void {
    for (const reader of this.#readers.values()) {
      reader.resync = true;
      // Ends an XREAD blocked on a position of the old history.
      reader.connection?.destroy();
      reader.connection = undefined;
      for (const sub of reader.subscriptions) {
        sub.buffered = [];
        notify(sub, []);
      }
    }
  }

  close(): void {
    for (const reader of [...this.#readers.values()]) {
      for (const sub of reader.subscriptions) sub.active = false;
      this.#stop(reader);
    }
  }

  #readerOf(namespace: string, keys: NamespaceKeys): StreamReader {
    let reader = this.#readers.get(keys.base);
    if (reader === undefined) {
      reader = {
        namespace,
        keys,
        subscriptions: new Set(),
        cursor: undefined,
        incarnation: this.ctx.incarnation.value,
        resync: false,
        running: false,
        connection: undefined,
        stopped: false,
        lingerTimer: undefined,
      };
      this.#readers.set(keys.base, reader);
    }
    return reader;
  }

  /**
   * Learns where a subscription starts: the head as Redis has it when the
   * command sent at subscribe() time runs, so every event logged after that
   * is delivered, and none before. Events the reader meets meanwhile are held
   * and sorted out here. Retried while Redis is away.
   */
  async #startSubscription(reader: StreamReader, sub: Subscription): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        // The first attempt's command is queued synchronously, inside subscribe().
        const position = streamPosition(await head(this.ctx, reader.keys));
        if (!sub.active) return;
        sub.after = position;
        const held = sub.buffered;
        sub.buffered = [];
        deliver(
          sub,
          held.filter((l) => l.position > position),
        );
        if (!reader.running) {
          // The reader starts where this subscriber does, so it misses nothing.
          reader.running = true;
          reader.cursor = `0-${position}`;
          reader.incarnation = this.ctx.incarnation.value;
          void this.#readLoop(reader);
        }
        return;
      } catch {
        if (!sub.active || this.ctx.io.closed) return;
        await sleep(backoffMs(attempt));
      }
    }
  }

  async #connectionOf(reader: StreamReader): Promise<RedisConnection> {
    if (reader.connection !== undefined) return reader.connection;
    const connection = this.duplicate();
    connection.on("error", () => {});
    reader.connection = connection;
    try {
      await connection.connect();
    } catch (err) {
      connection.destroy();
      if (reader.connection === connection) reader.connection = undefined;
      throw err;
    }
    return connection;
  }

  /**
   * Finds the reader's place again after a reconnect or a change of
   * incarnation. In the same incarnation it goes on where it was, unless the
   * head is now behind that: the store lost events, so the incarnation
   * rotates (and subscribers look again).
   */
  async #resync(reader: StreamReader): Promise<void> {
    const incarnation = this.ctx.incarnation;
    const at = await head(this.ctx, reader.keys);
    if (reader.cursor !== undefined && reader.incarnation === incarnation.value) {
      if (streamPosition(at) < streamPosition(reader.cursor)) {
        await incarnation.rotate(incarnation.value);
        return; // restartAll() asked for another resync, at the new incarnation's head
      }
      reader.resync = false;
      return; // the same history: go on from where the reader was
    }
    // Another incarnation: every event in it is new to every subscriber (each
    // was told to look again), so the reader starts at its beginning.
    reader.cursor = "0-0";
    reader.incarnation = incarnation.value;
    reader.resync = false;
    for (const sub of reader.subscriptions) {
      if (sub.after !== undefined) sub.after = 0;
    }
  }

  /** Follows the namespace's stream from `reader.cursor` until the reader is stopped. */
  async #readLoop(reader: StreamReader): Promise<void> {
    for (let failures = 0; !reader.stopped && !this.ctx.io.closed; ) {
      try {
        if (reader.resync) await this.#resync(reader);
        const readingIn = reader.incarnation;
        const reply = await this.#read(reader);
        failures = 0;
        // Read in a history this replica has left since: dropped, resync follows.
        if (
          reply === null ||
          reader.stopped ||
          reader.resync ||
          readingIn !== this.ctx.incarnation.value
        ) {
          continue;
        }
        this.#take(reader, reply);
      } catch (err) {
        if (reader.stopped || this.ctx.io.closed) return;
        if (err instanceof CommandTimeout || reader.connection?.isOpen === false) {
          // The connection stopped answering, or was closed: start over on a fresh one.
          reader.connection?.destroy();
          reader.connection = undefined;
        }
        // After an outage the store may hold another history (or a shorter one).
        reader.resync = true;
        await sleep(backoffMs(failures++));
      }
    }
  }

  /** One XREAD BLOCK from the reader's cursor: null when nothing came within the block time. */
  async #read(reader: StreamReader): Promise<unknown> {
    const stream = reader.keys.events;
    const cursor = reader.cursor ?? "0-0";
    const connection = await this.#connectionOf(reader);
    return this.ctx.io.send(
      connection,
      [
        "XREAD",
        "COUNT",
        String(XREAD_COUNT),
        "BLOCK",
        String(XREAD_BLOCK_MS),
        "STREAMS",
        stream,
        cursor,
      ],
      XREAD_BLOCK_MS + this.ctx.io.timeoutMs,
    );
  }

  /** Hands the entries of an XREAD reply to the subscribers and moves the cursor past them. */
  #take(reader: StreamReader, reply: unknown): void {
    const [entry] = asArray(reply);
    const [, entries] = asArray(entry);
    const raw = asArray(entries);
    const last = raw[raw.length - 1];
    if (last === undefined) return;
    const tokens = this.ctx.incarnation.tokens;
    const sharded = this.ctx.keys.shards > 1;
    const cursorOf = (p: number) => (sharded ? "" : tokens.issue(reader.namespace, p));
    const logged = raw.map((e) => ({
      position: streamPosition(asString(asArray(e)[0])),
      event: decodeEvent(e, cursorOf),
    }));
    reader.cursor = asString(asArray(last)[0]);
    dispatch(reader, logged);
  }

  #stop(reader: StreamReader): void {
    reader.stopped = true;
    clearTimeout(reader.lingerTimer);
    reader.connection?.destroy();
    reader.connection = undefined;
    if (this.#readers.get(reader.keys.base) === reader) this.#readers.delete(reader.keys.base);
  }
}
