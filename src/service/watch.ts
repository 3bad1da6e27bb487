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
  let unlisten: (() => void) | undefined;
  // Read on every event: a flag, as `aborted` of a composite signal
  // (AbortSignal.any) re-checks its sources on every read.
  const stop = AbortSignal.any([ctx.signal, deps.shutdown]);
  let stopped = stop.aborted;
  let wake: (() => void) | undefined;
  const onStop = () => {
    stopped = true;
    wake?.();
  };
  stop.addEventListener("abort", onStop);
  deps.watchers?.add(1);

  try {
    const threadIds = new Set(req.threadIds.map((id, i) => threadIdFrom(id, `thread_ids[${i}]`)));
    const types = new Set<EventType>(
      req.eventTypes.map((t, i) => eventTypeFromPb(t, `event_types[${i}]`)),
    );
    const startCursor = req.resumeToken === "" ? undefined : decodeResumeToken(req.resumeToken);

    let behind = 0;
    let dirty = true;
    unlisten = deps.hub.listen(ctx.namespace, (events) => {
      behind += events.length;
      dirty = true;
      wake?.();
    });

    let cursor = startCursor ?? (await deps.store.headCursor(ctx.namespace));
    if (startCursor !== undefined) {
      // Fail now, not at the first event, when the token is stale or foreign.
      await deps.store.readEvents(ctx.namespace, cursor, 1);
    }

    if (req.sendInitialState) {
      const token = encodeResumeToken(cursor);
      // Between slices: let other work run, and stop here if the call ended.
      const pause = async () => {
        await yieldToEventLoop();
        throwIfStopped(stopped, ctx, deps.shutdown);
      };
      for await (const t of watchedThreads(ctx.namespace, threadIds, deps.store, pause)) {
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

    // Also checked after every event sent: a client that stops reading parks
    // this generator at a yield while events keep coming, and must learn
    // RESOURCE_EXHAUSTED when it reads again, not OUT_OF_RANGE from a cursor
    // the log has trimmed meanwhile.
    const throwIfTooFarBehind = (): void => {
      if (behind > deps.watchBuffer) {
        throw new MemoryError(
          "resource_exhausted",
          `watch fell more than ${deps.watchBuffer} events behind; resume from the last resume_token`,
        );
      }
    };
    let lastSent = deps.now();
    // Set when the stream has been idle for a progress interval: the log is
    // read once more before Progress vouches for it. The hub's wake-ups ride
    // on the store's subscription, which an outage can break or leave
    // behind; this read is what makes a lost wake-up cost one interval
    // instead of a stream that stays open and silent (and it ends the
    // stream with UNAVAILABLE while the store is unreachable, or
    // OUT_OF_RANGE when its history was lost, so the client resumes).
    let progressDue = false;
    let sent = 0;
    for (;;) {
      throwIfStopped(stopped, ctx, deps.shutdown);
      throwIfTooFarBehind();
      if (dirty || progressDue) {
        const vouch = progressDue;
        const announced = dirty;
        dirty = false;
        progressDue = false;
        const sentBefore = sent;
        let logged = 0;
        for (;;) {
          const events = await deps.store.readEvents(ctx.namespace, cursor, READ_BATCH);
          // Counted as found, before the events go out (the client may be slow to read them).
          if (vouch && !announced && logged === 0 && events.length > 0) deps.wakeupsMissed?.inc();
          logged += events.length;
          for (const e of events) {
            cursor = e.cursor;
            behind = Math.max(0, behind - 1);
            if (threadIds.size > 0 && !threadIds.has(e.threadId)) continue;
            if (types.size > 0 && !types.has(e.type)) continue;
            yield sharedEventToPb(e);
            sent += 1;
            lastSent = deps.now();
            throwIfStopped(stopped, ctx, deps.shutdown);
            throwIfTooFarBehind();
          }
          if (events.length < READ_BATCH) break;
          // A long backlog is read in batches with a turn of the event loop between them.
          await yieldToEventLoop();
          throwIfStopped(stopped, ctx, deps.shutdown);
        }
        if (vouch && sent === sentBefore) {
          yield progressToPb(encodeResumeToken(cursor), deps.now());
          lastSent = deps.now();
        }
        continue;
      }
      if (deps.now() - lastSent >= deps.progressIntervalMs) {
        progressDue = true;
        continue;
      }
      const idleFor = deps.now() - lastSent;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, deps.progressIntervalMs - idleFor);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
        if (dirty || stopped) wake();
      });
      wake = undefined;
    }
  } finally {
    deps.watchers?.add(-1);
    unlisten?.();
    stop.removeEventListener("abort", onStop);
    leave();
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
