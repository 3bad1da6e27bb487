import { MemoryError } from "../../core/errors.js";
import type { RedisConnection } from "./connection.js";
import { fcallGoesByScript, isNoScript } from "./errors.js";

/** How the store sends one command on a given connection (its timeout and closed check). */
export type SendOn = (
  link: RedisConnection,
  args: readonly string[],
  timeoutMs: number,
) => Promise<unknown>;

/** The connection an acknowledged write is sent on, and how to confirm it. */
export interface AcknowledgedWrite {
  readonly link: RedisConnection;
  /** Resolves once enough replicas have every write sent on `link` so far; unavailable otherwise. */
  confirm(): Promise<void>;
}

export interface ReplicaConfirmationOptions {
  /** Replicas that must confirm (WAIT numreplicas), at least 1. */
  replicas: number;
  /** WAIT's timeout. */
  waitMs: number;
  /** Room for the round trips on top of waitMs. */
  commandTimeoutMs: number;
}

/** Where acknowledged writes of one key go: its primary's session (see ReplicaConfirmation). */
export interface PrimarySessions {
  /** A new session to the primary of `key`. */
  open(key: string): RedisConnection;
  /** That primary's name, the same for every key it holds. */
  primaryOf(key: string): string;
  /**
   * A session was told `key`'s slot has moved: learn where it is now.
   * Resolves once the slot map has been asked again (or that failed).
   */
  moved(key: string): Promise<void>;
}

/**
 * How long a write whose first command was answered MOVED waits for the
 * slot map to be asked again before it gives up (unavailable): the new
 * map comes from any live node in one round trip.
 */
const RELOCATE_WAIT_MS = 1000;

/**
 * Acknowledged writes when replicas must confirm them. WAIT blocks the
 * connection it runs on and covers only that connection's writes, so the
 * writes that need it go on a connection of their own (reads never queue
 * behind a WAIT), and one WAIT confirms every write sent before it: an Add
 * finishing while a WAIT is in flight joins the single next one, so at most
 * two WAITs exist at a time however many Adds run.
 *
 * Each WAIT follows an INCR of a fence key on the same connection, so it
 * waits for the primary's replication offset as of now, which is past every
 * write whose reply came before (a replayed Add wrote nothing on this
 * connection, but its first attempt, maybe through another connection or
 * another replica of the service, must be confirmed too). The connection
 * never reconnects by itself: a write and its WAIT that ran on different
 * sessions (a reconnect, a failover in between) would confirm nothing.
 * When the session ends, its writes fail as unavailable and the next write
 * opens a new one.
 *
 * On Redis Cluster there is one session per primary (a WAIT covers only
 * the primary it runs on), and the fence is a key in the slot of the write
 * that opened the session (keys.ts): should that slot move, the INCR
 * answers MOVED, the session ends and the next one goes to the new primary.
 */
export class ReplicaConfirmation {
  readonly #options: ReplicaConfirmationOptions;
  readonly #primaries: PrimarySessions;
  readonly #send: SendOn;
  /** The current session of each primary, and its connecting. */
  readonly #sessions = new Map<string, { session: Session; ready: Promise<Session> }>();
  #closed = false;

  constructor(primaries: PrimarySessions, send: SendOn, options: ReplicaConfirmationOptions) {
    this.#primaries = primaries;
    this.#send = send;
    this.#options = options;
  }

  /**
   * The connection to send an acknowledged write of `key` on (connected),
   * and its confirmation; `fenceKey` must hash to the slot of `key`.
   */
  async begin(key: string, fenceKey: string): Promise<AcknowledgedWrite> {
    let session = await this.#current(key, fenceKey);
    // MOVED refuses a command before it runs. When the write's first
    // command meets it (the service's slot map was stale: a failover or a
    // slot move since), nothing of the write ran anywhere, so it goes once
    // to the slot's primary as the map says after asking again; the caller
    // sees no error. Once a command has run on a session, the write stays
    // there: its WAIT must cover what ran, and a MOVED then is unavailable.
    let movedOnce = false;
    let ran = false;
    const sendCommand = async (args: readonly string[]): Promise<unknown> => {
      try {
        const reply = await session.link.sendCommand(args);
        ran = true;
        return reply;
      } catch (err) {
        if (ran || movedOnce || !isMoved(err)) {
          ran = true;
          throw err;
        }
        movedOnce = true;
        if (!(await this.#relocated(session))) throw err;
        session = await this.#current(key, fenceKey);
        return sendCommand(args);
      }
    };
    // The sessions own their connections: a write's link only sends.
    const link: RedisConnection = {
      get isOpen() {
        return session.link.isOpen;
      },
      sendCommand,
      connect: async () => {},
      close: async () => {},
      destroy: () => {},
      on: () => undefined,
    };
    return { link, confirm: () => this.#confirm(session) };
  }

  /** Whether the slot map was asked again after `session` met MOVED, within RELOCATE_WAIT_MS. */
  async #relocated(session: Session): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), RELOCATE_WAIT_MS);
    });
    try {
      const asked = (session.relocating ?? Promise.resolve()).then(() => true);
      return !this.#closed && (await Promise.race([asked, late]));
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    const open = [...this.#sessions.values()];
    this.#sessions.clear();
    for (const { session } of open) this.#end(session);
  }

  async #current(key: string, fenceKey: string): Promise<Session> {
    if (this.#closed) throw new MemoryError("unavailable", "the store is closed");
    const primary = this.#primaries.primaryOf(key);
    const existing = this.#sessions.get(primary);
    if (existing !== undefined && !existing.session.ended) return existing.ready;
    const opened = this.#primaries.open(key);
    // Any failed command ends the session but NOSCRIPT, and an FCALL run
    // again as a script (commands.ts), both answered on the same session
    // (READONLY still ends it): a READONLY means it reached a demoted
    // primary, and the next session asks where the primary is now.
    const link: RedisConnection = {
      get isOpen() {
        return opened.isOpen;
      },
      sendCommand: (args) =>
        opened.sendCommand(args).catch((err: unknown) => {
          if (!answeredOnTheSameSession(args, err)) this.#end(session);
          // The slot has another primary now: the next session must find it.
          if (isMoved(err) || (err instanceof Error && err.message.startsWith("ASK "))) {
            session.relocating ??= this.#primaries.moved(fenceKey).catch(() => {});
          }
          throw err;
        }),
      connect: () => opened.connect(),
      close: () => opened.close(),
      destroy: () => opened.destroy(),
      on: (event, listener) => opened.on(event, listener),
    };
    const session: Session = {
      primary,
      fenceKey,
      link,
      ended: false,
      relocating: undefined,
      inFlight: undefined,
      next: undefined,
    };
    link.on("error", () => this.#end(session));
    const ready = link.connect().then(
      () => session,
      (err: unknown) => {
        this.#end(session);
        throw err;
      },
    );
    ready.catch(() => {});
    this.#sessions.set(primary, { session, ready });
    return ready;
  }

  #end(session: Session): void {
    if (session.ended) return;
    session.ended = true;
    if (this.#sessions.get(session.primary)?.session === session) {
      this.#sessions.delete(session.primary);
    }
    session.link.destroy();
  }

  async #confirm(session: Session): Promise<void> {
    // A WAIT in flight was sent before this write's reply arrived: it may not cover it.
    let wait: Promise<number>;
    if (session.inFlight === undefined) {
      wait = this.#startWait(session);
    } else {
      session.next ??= session.inFlight
        .catch(() => 0)
        .then(() => {
          session.next = undefined;
          return this.#startWait(session);
        });
      wait = session.next;
    }
    const confirmed = await wait;
    const { replicas, waitMs } = this.#options;
    if (confirmed < replicas) {
      throw new MemoryError(
        "unavailable",
        `${confirmed} of the ${replicas} Redis replicas required (--redis-min-replicas) confirmed the write within ${waitMs} ms; it may have been stored: a retry with the same request_id answers the stored result`,
      );
    }
  }

  #startWait(session: Session): Promise<number> {
    const run = (async () => {
      if (session.ended) throw notConfirmed();
      const { replicas, waitMs, commandTimeoutMs } = this.#options;
      const fence = this.#send(session.link, ["INCR", session.fenceKey], commandTimeoutMs);
      const waited = this.#send(
        session.link,
        ["WAIT", String(replicas), String(waitMs)],
        waitMs + commandTimeoutMs,
      );
      // Both are settled here, whichever fails first.
      fence.catch(() => {});
      waited.catch(() => {});
      try {
        await fence;
        const count = Number(await waited);
        if (session.ended) throw notConfirmed();
        return count;
      } catch (err) {
        // The session is in an unknown state (a timeout, a closed socket): start a new one.
        this.#end(session);
        throw err instanceof MemoryError ? err : notConfirmed(err);
      }
    })();
    session.inFlight = run;
    run
      .catch(() => {})
      .finally(() => {
        if (session.inFlight === run) session.inFlight = undefined;
      });
    return run;
  }
}

interface Session {
  /** Which primary (PrimarySessions.primaryOf). */
  primary: string;
  /** The key the WAIT's INCR goes to, on that primary. */
  fenceKey: string;
  link: RedisConnection;
  ended: boolean;
  /** The slot map being asked again after a MOVED or ASK on this session. */
  relocating: Promise<void> | undefined;
  inFlight: Promise<number> | undefined;
  next: Promise<number> | undefined;
}

function notConfirmed(cause?: unknown): MemoryError {
  return new MemoryError(
    "unavailable",
    "the connection to the Redis primary ended before its replicas confirmed the write; it may have been stored: a retry with the same request_id answers the stored result",
    cause === undefined ? undefined : { cause },
  );
}

function isMoved(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith("MOVED ");
}

/** Whether a failed command is answered again on its session (see #current). */
function answeredOnTheSameSession(args: readonly string[], err: unknown): boolean {
  if (isNoScript(err)) return true;
  return args[0] === "FCALL" && fcallGoesByScript(err) && !isReadOnly(err);
}

function isReadOnly(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith("READONLY");
}
