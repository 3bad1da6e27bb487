/** One scheduled expiry: the thread's incarnation, and the expire time it had when queued. */
export interface ExpiryEntry {
  at: number;
  namespace: string;
  threadId: string;
  incarnation: string;
}

/**
 * The memory store's threads by expire time: a binary min-heap. An Add that
 * moves a thread's expire time later leaves its entry as it is; the sweep
 * queues it again at its new time when the old one comes (so each thread
 * with a ttl has one entry, and an Add costs nothing here). Entries of a
 * cleared incarnation are dropped when they come up.
 */
export class ExpiryQueue {
  readonly #heap: ExpiryEntry[] = [];

  get size(): number {
    return this.#heap.length;
  }

  push(entry: ExpiryEntry): void {
    const h = this.#heap;
    h.push(entry);
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = h[parent] as ExpiryEntry;
      if (p.at <= entry.at) break;
      h[i] = p;
      i = parent;
    }
    h[i] = entry;
  }

  /** The earliest entry if it is due at `now` (removed), else undefined. */
  popDue(now: number): ExpiryEntry | undefined {
    const h = this.#heap;
    const top = h[0];
    if (top === undefined || top.at > now) return undefined;
    const last = h.pop() as ExpiryEntry;
    if (h.length > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        let mAt = last.at;
        const le = h[l];
        const re = h[r];
        if (le !== undefined && le.at < mAt) {
          m = l;
          mAt = le.at;
        }
        if (re !== undefined && re.at < mAt) m = r;
        if (m === i) break;
        h[i] = h[m] as ExpiryEntry;
        i = m;
      }
      h[i] = last;
    }
    return top;
  }
}
