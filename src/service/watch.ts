import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import type { WatchRequest, WatchResponse } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { MemoryError } from "../core/errors.js";
import type { EventType } from "../core/types.js";
import type { Counter, Gauge } from "../metrics.js";
import type { Store } from "../store/store.js";
import type { CallContext } from "./context.js";
import {
  decodeResumeToken,
  encodeResumeToken,
  eventToPb,
  eventTypeFromPb,
  progressToPb,
  threadIdFrom,
} from "./convert.js";
import type { EventHub } from "./event-hub.js";
import { sharedEventToPb } from "./pre-encoded.js";

export interface WatchDeps {
  store: Store;
  hub: EventHub;
  /** Aborts when the server shuts down: streams end with UNAVAILABLE. */
  shutdown: AbortSignal;
  watchBuffer: number;
  progressIntervalMs: number;
  now: () => number;
  /** Counts open streams. */
  watchers?: Gauge;
  /** Counts events found by the read before a Progress that no wake-up announced. */
  wakeupsMissed?: Counter;
  /**
   * Takes one of the namespace's watcher slots, or throws
   * resource_exhausted; returns what gives it back. Called at the stream's
   * first step, in one synchronous step with the check, so concurrent opens
   * cannot pass a cap together.
   */
  admit: (namespace: string) => () => void;
}

const READ_BATCH = 256;
const INITIAL_STATE_PAGE = 500;
/**
 * Threads read for the initial state between two yields to the event loop.
 * A store answering from memory never waits on I/O, so without them one
 * stream over a big namespace would hold the loop for its whole length.
 */
const INITIAL_STATE_SLICE = 100;

/** What a Watch asks for, decoded. */
interface WatchFilter {
  threadIds: Set<string>;
  types: Set<EventType>;
  startCursor: string | undefined;
  sendInitialState: boolean;
}

function decodeFilter(req: WatchRequest): WatchFilter {
  return {
    threadIds: new Set(req.threadIds.map((id, i) => threadIdFrom(id, `thread_ids[${i}]`))),
    types: new Set<EventType>(
      req.eventTypes.map((t, i) => eventTypeFromPb(t, `event_types[${i}]`)),
    ),
    startCursor: req.resumeToken === "" ? undefined : decodeResumeToken(req.resumeToken),
    sendInitialState: req.sendInitialState,
  };
}

/**
 * One Watch stream. It reads the namespace's event log from its own cursor
 * (so resuming and following are the same loop, and a watcher holds no copy
 * of the events), and the hub only wakes it. How far it has fallen behind is
 * counted as events are logged: past `watchBuffer` unread events the stream
 * ends with RESOURCE_EXHAUSTED, so a slow client never holds up others or
 * makes the server buffer for it.
 */
export async function* watchEvents(
  req: WatchRequest,
  ctx: CallContext,
  deps: WatchDeps,
): AsyncGenerator<WatchResponse> {
  const leave = deps.admit(ctx.namespace);
  const stream = new WatchStream(ctx, deps);
  try {
    const filter = decodeFilter(req);
    stream.listen();
    yield* stream.start(filter);
    yield* stream.follow(filter);
  } finally {
    stream.close();
    leave();
  }
}

/** The state of one stream between its steps (watchEvents drives it). */
class WatchStream {
  readonly #ctx: CallContext;
  readonly #deps: WatchDeps;
  // Read on every event: a flag, as `aborted` of a composite signal
  // (AbortSignal.any) re-checks its sources on every read.
  readonly #stop: AbortSignal;
  #stopped: boolean;
  #wake: (() => void) | undefined;
  readonly #onStop = () => {
    this.#stopped = true;
    this.#wake?.();
  };
  #unlisten: (() => void) | undefined;
  /** Events logged since the stream last read past them. */
  #behind = 0;
  /** Set by a wake-up: the log has news. */
  #dirty = true;
  #cursor = "";
  #lastSent: number;
  // Set when the stream has been idle for a progress interval: the log is
  // read once more before Progress vouches for it. The hub's wake-ups ride
  // on the store's subscription, which an outage can break or leave
  // behind; this read is what makes a lost wake-up cost one interval
  // instead of a stream that stays open and silent (and it ends the
  // stream with UNAVAILABLE while the store is unreachable, or
  // OUT_OF_RANGE when its history was lost, so the client resumes).
  #progressDue = false;
  #sent = 0;

  constructor(ctx: CallContext, deps: WatchDeps) {
    this.#ctx = ctx;
    this.#deps = deps;
    this.#stop = AbortSignal.any([ctx.signal, deps.shutdown]);
    this.#stopped = this.#stop.aborted;
    this.#stop.addEventListener("abort", this.#onStop);
    this.#lastSent = deps.now();
    deps.watchers?.add(1);
  }

  listen(): void {
    this.#unlisten = this.#deps.hub.listen(this.#ctx.namespace, (events) => {
      this.#behind += events.length;
      this.#dirty = true;
      this.#wake?.();
    });
  }

  close(): void {
    this.#deps.watchers?.add(-1);
    this.#unlisten?.();
    this.#stop.removeEventListener("abort", this.#onStop);
  }

  /** Sets the cursor (checking a resume token at once) and sends the initial state if asked. */
  async *start(filter: WatchFilter): AsyncGenerator<WatchResponse> {
    const { store } = this.#deps;
    const namespace = this.#ctx.namespace;
    this.#cursor = filter.startCursor ?? (await store.headCursor(namespace));
    if (filter.startCursor !== undefined) {
      // Fail now, not at the first event, when the token is stale or foreign.
      await store.readEvents(namespace, this.#cursor, 1);
    }
    if (!filter.sendInitialState) return;
    const cursor = this.#cursor;
    const token = encodeResumeToken(cursor);
    // Between slices: let other work run, and stop here if the call ended.
    const pause = async () => {
      await yieldToEventLoop();
      this.#throwIfStopped();
    };
    for await (const t of watchedThreads(namespace, filter.threadIds, store, pause)) {
      if (t.summary === "") continue;
      yield eventToPb(
        {
          type: "summary_updated",
          summary: t.summary,
          summarizedThroughSeq: t.summarizedThroughSeq,
          foldedCount: 0,
          cursor,
          threadId: t.threadId,
          time: t.summaryTime,
        },
        token,
      );
    }
  }

  /** Follows the log until the call ends or the stream fails. */
  async *follow(filter: WatchFilter): AsyncGenerator<WatchResponse> {
    const { now, progressIntervalMs } = this.#deps;
    this.#lastSent = now();
    for (;;) {
      this.#throwIfStopped();
      this.#throwIfTooFarBehind();
      if (this.#dirty || this.#progressDue) {
        yield* this.#readLog(filter);
        continue;
      }
      if (now() - this.#lastSent >= progressIntervalMs) {
        this.#progressDue = true;
        continue;
      }
      await this.#idle(progressIntervalMs - (now() - this.#lastSent));
    }
  }

  /** Sends what the log holds after the cursor; Progress when vouching found nothing to send. */
  async *#readLog(filter: WatchFilter): AsyncGenerator<WatchResponse> {
    const { store, now } = this.#deps;
    const vouch = this.#progressDue;
    const announced = this.#dirty;
    this.#dirty = false;
    this.#progressDue = false;
    const sentBefore = this.#sent;
    let logged = 0;
    for (;;) {
      const events = await store.readEvents(this.#ctx.namespace, this.#cursor, READ_BATCH);
      // Counted as found, before the events go out (the client may be slow to read them).
      if (vouch && !announced && logged === 0 && events.length > 0) {
        this.#deps.wakeupsMissed?.inc();
      }
      logged += events.length;
      for (const e of events) {
        this.#cursor = e.cursor;
        this.#behind = Math.max(0, this.#behind - 1);
        if (filter.threadIds.size > 0 && !filter.threadIds.has(e.threadId)) continue;
        if (filter.types.size > 0 && !filter.types.has(e.type)) continue;
        yield sharedEventToPb(e);
        this.#sent += 1;
        this.#lastSent = now();
        this.#throwIfStopped();
        this.#throwIfTooFarBehind();
      }
      if (events.length < READ_BATCH) break;
      // A long backlog is read in batches with a turn of the event loop between them.
      await yieldToEventLoop();
      this.#throwIfStopped();
    }
    if (vouch && this.#sent === sentBefore) {
      yield progressToPb(encodeResumeToken(this.#cursor), now());
      this.#lastSent = now();
    }
  }

  /** Waits `ms`, or less when woken (news, or the call ending). */
  async #idle(ms: number): Promise<void> {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.#wake = () => {
        clearTimeout(timer);
        resolve();
      };
      if (this.#dirty || this.#stopped) this.#wake();
    });
    this.#wake = undefined;
  }

  // Also checked after every event sent: a client that stops reading parks
  // this generator at a yield while events keep coming, and must learn
  // RESOURCE_EXHAUSTED when it reads again, not OUT_OF_RANGE from a cursor
  // the log has trimmed meanwhile.
  #throwIfTooFarBehind(): void {
    const { watchBuffer } = this.#deps;
    if (this.#behind > watchBuffer) {
      throw new MemoryError(
        "resource_exhausted",
        `watch fell more than ${watchBuffer} events behind; resume from the last resume_token`,
      );
    }
  }

  #throwIfStopped(): void {
    throwIfStopped(this.#stopped, this.#ctx, this.#deps.shutdown);
  }
}

function throwIfStopped(stopped: boolean, ctx: CallContext, shutdown: AbortSignal): void {
  if (!stopped) return;
  // The client's own cancel or deadline wins over shutdown: it is what the caller asked for.
  throw ctx.signal.aborted ? ctx.signal.reason : shutdown.reason;
}

/**
 * The threads a Watch names, or every thread of the namespace, that exist
 * now, read a page at a time with `pause` after every INITIAL_STATE_SLICE
 * threads and every page.
 */
async function* watchedThreads(
  namespace: string,
  ids: Set<string>,
  store: Store,
  pause: () => Promise<void>,
) {
  let read = 0;
  const get = async (id: string) => {
    read += 1;
    if (read % INITIAL_STATE_SLICE === 0) await pause();
    return store.getThread(namespace, id);
  };
  if (ids.size > 0) {
    for (const id of ids) {
      const t = await get(id);
      if (t !== undefined) yield t;
    }
    return;
  }
  for (let after = ""; ; ) {
    const page = await store.listThreads(namespace, after, INITIAL_STATE_PAGE);
    for (const id of page) {
      const t = await get(id);
      if (t !== undefined) yield t;
    }
    if (page.length < INITIAL_STATE_PAGE) return;
    after = page[page.length - 1] ?? "";
    await pause();
  }
}
