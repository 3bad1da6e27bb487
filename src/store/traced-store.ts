import type { StoreConfig } from "../config.js";
import { inChildSpan, threadAttributes } from "../tracing.js";
import type { Store } from "./store.js";

/**
 * A Store whose calls each run in a child span (`store.append`,
 * `store.read`, …) of the span active at the call: the RPC's, or a fold's.
 * Wired only while tracing is on (app.ts), so the untraced path keeps the
 * store itself. Thread ids go into attributes only as tracing.ts allows.
 */
export function tracedStore(store: Store, kind: StoreConfig["kind"]): Store {
  const base = { "windlass.store": kind };
  const span = <T>(
    name: string,
    namespace: string,
    threadId: string | undefined,
    fn: () => Promise<T>,
  ): Promise<T> =>
    inChildSpan(
      `store.${name}`,
      // Calls to another server are client spans; in-process stores' are internal.
      kind === "redis" || kind === "postgres" ? "client" : "internal",
      threadId === undefined ? base : { ...base, ...threadAttributes(namespace, threadId) },
      fn,
    );
  return {
    append: (cmd) => span("append", cmd.namespace, cmd.threadId, () => store.append(cmd)),
    rewind: (cmd) => span("rewind", cmd.namespace, cmd.threadId, () => store.rewind(cmd)),
    // The span names the new thread: the one the Fork writes.
    fork: (cmd) => span("fork", cmd.namespace, cmd.newThreadId, () => store.fork(cmd)),
    read: (namespace, threadId, view) =>
      span("read", namespace, threadId, () => store.read(namespace, threadId, view)),
    getThread: (namespace, threadId) =>
      span("getThread", namespace, threadId, () => store.getThread(namespace, threadId)),
    commitSummary: (cmd) =>
      span("commitSummary", cmd.namespace, cmd.threadId, () => store.commitSummary(cmd)),
    recordFoldFailure: (cmd) =>
      span("recordFoldFailure", cmd.namespace, cmd.threadId, () => store.recordFoldFailure(cmd)),
    acquireFoldLease: (namespace, threadId, ttlMs) =>
      span("acquireFoldLease", namespace, threadId, () =>
        store.acquireFoldLease(namespace, threadId, ttlMs),
      ),
    releaseFoldLease: (namespace, threadId, token) =>
      span("releaseFoldLease", namespace, threadId, () =>
        store.releaseFoldLease(namespace, threadId, token),
      ),
    clear: (namespace, threadId, now) =>
      span("clear", namespace, threadId, () => store.clear(namespace, threadId, now)),
    clearAll: (namespace, now) =>
      span("clearAll", namespace, undefined, () => store.clearAll(namespace, now)),
    listThreads: (namespace, after, limit, labels, forksOf) =>
      span("listThreads", namespace, undefined, () =>
        store.listThreads(namespace, after, limit, labels, forksOf),
      ),
    readEvents: (namespace, cursor, limit) =>
      span("readEvents", namespace, undefined, () => store.readEvents(namespace, cursor, limit)),
    headCursor: (namespace) =>
      span("headCursor", namespace, undefined, () => store.headCursor(namespace)),
    compareCursors: (a, b) => store.compareCursors(a, b),
    subscribe: (namespace, listener) => store.subscribe(namespace, listener),
    sweepExpired: (now, limit) =>
      span("sweepExpired", "", undefined, () => store.sweepExpired(now, limit)),
    importThread: (cmd) =>
      span("importThread", cmd.namespace, cmd.threadId, () => store.importThread(cmd)),
    health: (timeoutMs) => store.health(timeoutMs),
    close: (graceMs) => store.close(graceMs),
  };
}
