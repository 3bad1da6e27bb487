import { MemoryError } from "../core/errors.js";

/**
 * Open Watch streams per namespace, for --max-watchers-per-namespace: every
 * watcher of a namespace wakes on each of its events, so without a cap one
 * tenant's streams would multiply the cost of its writes for everybody.
 */
export class WatcherCounts {
  readonly #open = new Map<string, number>();
  /** 0: unlimited. */
  readonly #cap: number;

  constructor(cap: number) {
    this.#cap = cap;
  }

  /**
   * Counts a stream against the cap from its first step until it ends
   * however it ends (watch.ts calls it, and the returned release, which is
   * safe to call more than once); resource_exhausted when the cap is reached.
   */
  admit(namespace: string): () => void {
    const open = this.#open.get(namespace) ?? 0;
    if (this.#cap > 0 && open >= this.#cap) {
      throw new MemoryError(
        "resource_exhausted",
        `namespace limit max_watchers_per_namespace (${this.#cap}) reached: end a Watch before opening another`,
      );
    }
    this.#open.set(namespace, open + 1);
    let left = false;
    return () => {
      if (left) return;
      left = true;
      const rest = (this.#open.get(namespace) ?? 1) - 1;
      if (rest <= 0) this.#open.delete(namespace);
      else this.#open.set(namespace, rest);
    };
  }
}
