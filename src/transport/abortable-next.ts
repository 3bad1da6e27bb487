/**
 * Pulls the values of an iterator unless the signal aborts first; then the
 * pull resolves to `undefined` at once.
 *
 * Watch handlers pull events through this, so a core whose generator does
 * not react to the signal still cannot keep a cancelled or shut-down stream
 * open. The pending `next()` keeps running; its late result or rejection is
 * consumed here and dropped. One abort listener serves the stream's whole
 * life: adding and removing one per event was a visible share of a Watch
 * fan-out's cost. `close()` removes it.
 */
export class AbortableIterator<T> {
  readonly #iterator: AsyncIterator<T>;
  readonly #signal: AbortSignal;
  #pending: ((result: undefined) => void) | undefined;
  readonly #onAbort = (): void => {
    const pending = this.#pending;
    this.#pending = undefined;
    pending?.(undefined);
  };

  constructor(iterator: AsyncIterator<T>, signal: AbortSignal) {
    this.#iterator = iterator;
    this.#signal = signal;
    signal.addEventListener("abort", this.#onAbort, { once: true });
  }

  next(): Promise<IteratorResult<T> | undefined> {
    if (this.#signal.aborted) return Promise.resolve(undefined);
    return new Promise((resolve, reject) => {
      this.#pending = resolve;
      const settled = (): void => {
        if (this.#pending === resolve) this.#pending = undefined;
      };
      this.#iterator.next().then(
        (result) => {
          settled();
          resolve(result);
        },
        (err: unknown) => {
          settled();
          reject(err);
        },
      );
    });
  }

  close(): void {
    this.#signal.removeEventListener("abort", this.#onAbort);
    this.#pending = undefined;
  }
}

/**
 * Lets an iterator clean up (its `finally` blocks run) without waiting for
 * it: a generator stuck in an await would otherwise hold the caller.
 * Failures while cleaning up are reported, not thrown.
 */
export function releaseIterator(
  iterator: AsyncIterator<unknown> | undefined,
  onError: (err: unknown) => void,
): void {
  const returned = iterator?.return?.();
  returned?.then(undefined, onError);
}
