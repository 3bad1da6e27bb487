import type { MemoryEvent } from "../core/types.js";
import type { Store } from "../store/store.js";

type Listener = (events: MemoryEvent[]) => void;

/**
 * Fans the store's events out to the service's listeners (Watch streams and
 * Gets waiting for a fold): one store subscription per namespace however many
 * listeners it has, dropped when the last one leaves.
 */
export class EventHub {
  private readonly namespaces = new Map<
    string,
    { listeners: Set<Listener>; unsubscribe: () => void }
  >();

  constructor(private readonly store: Store) {}

  listen(namespace: string, listener: Listener): () => void {
    let entry = this.namespaces.get(namespace);
    if (entry === undefined) {
      const listeners = new Set<Listener>();
      const unsubscribe = this.store.subscribe(namespace, (events) => {
        for (const l of listeners) l(events);
      });
      entry = { listeners, unsubscribe };
      this.namespaces.set(namespace, entry);
    }
    const e = entry;
    e.listeners.add(listener);
    return () => {
      e.listeners.delete(listener);
      if (e.listeners.size === 0 && this.namespaces.get(namespace) === e) {
        e.unsubscribe();
        this.namespaces.delete(namespace);
      }
    };
  }

  /**
   * Resolves with the first event for `threadId` that `match` accepts, or
   * undefined when `signal` aborts or `timeoutMs` passes. Listening starts
   * before this returns, so an event logged right after cannot be missed.
   */
  waitFor(
    namespace: string,
    threadId: string,
    match: (e: MemoryEvent) => boolean,
    timeoutMs: number,
    signal: AbortSignal,
  ): Promise<MemoryEvent | undefined> {
    return new Promise<MemoryEvent | undefined>((resolve) => {
      const done = (e: MemoryEvent | undefined) => {
        unlisten();
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        resolve(e);
      };
      const unlisten = this.listen(namespace, (events) => {
        const hit = events.find((e) => e.threadId === threadId && match(e));
        if (hit !== undefined) done(hit);
      });
      const timer = setTimeout(() => done(undefined), Math.max(0, timeoutMs));
      const onAbort = () => done(undefined);
      signal.addEventListener("abort", onAbort, { once: true });
      if (signal.aborted) done(undefined);
    });
  }
}
