import { vi } from "vitest";

/** What {@link watchTimersOf} saw: timers armed with the delay, and which were cleared. */
export interface WatchedTimers {
  readonly armed: readonly unknown[];
  readonly cleared: ReadonlySet<unknown>;
  /** How many armed timers are not cleared yet. */
  pending(): number;
  restore(): void;
}

/**
 * Records every `setTimeout` armed with `delayMs` and every `clearTimeout`,
 * passing each call through. A timer the code under test holds is told from
 * the other timers of the process (sockets, servers, the test runner) by its
 * delay, so a test can say "armed and cleared" without counting them all.
 */
export function watchTimersOf(delayMs: number): WatchedTimers {
  const armed: unknown[] = [];
  const cleared = new Set<unknown>();
  const realSetTimeout = globalThis.setTimeout;
  const realClearTimeout = globalThis.clearTimeout;
  const setSpy = vi.spyOn(globalThis, "setTimeout").mockImplementation(((
    fn: () => void,
    ms?: number,
    ...rest: unknown[]
  ) => {
    const timer = realSetTimeout(fn, ms, ...rest);
    if (ms === delayMs) armed.push(timer);
    return timer;
  }) as typeof setTimeout);
  const clearSpy = vi.spyOn(globalThis, "clearTimeout").mockImplementation(((
    timer?: Parameters<typeof clearTimeout>[0],
  ) => {
    cleared.add(timer);
    realClearTimeout(timer);
  }) as typeof clearTimeout);
  return {
    armed,
    cleared,
    pending: () => armed.filter((timer) => !cleared.has(timer)).length,
    restore() {
      setSpy.mockRestore();
      clearSpy.mockRestore();
    },
  };
}
