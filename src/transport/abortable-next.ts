/**
 * Pulls the next value of an iterator unless the signal aborts first; then it
 * resolves to `undefined` at once.
 *
 * Watch handlers pull events through this, so a core whose generator does
 * not react to the signal still cannot keep a cancelled or shut-down stream
 * open. The pending `next()` keeps running; its late result or rejection is
 * consumed here and dropped.
 */
export function nextUnlessAborted<T>(
  iterator: AsyncIterator<T>,
  signal: AbortSignal,
): Promise<IteratorResult<T> | undefined> {
  if (signal.aborted) return Promise.resolve(undefined);
  return new Promise((resolve, reject) => {
    const onAbort = (): void => resolve(undefined);
    signal.addEventListener("abort", onAbort, { once: true });
    iterator.next().then(
      (result) => {
        signal.removeEventListener("abort", onAbort);
        resolve(result);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
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
