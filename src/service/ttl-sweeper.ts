import type { Logger } from "../logger.js";
import type { Store } from "../store/store.js";

/** Expired threads one sweep step removes before it lets other work in. */
export const TTL_SWEEP_BATCH = 200;

/**
 * Removes expired threads off the hot path (Store.sweepExpired): every
 * `intervalMs`, batches of at most TTL_SWEEP_BATCH with a turn of the event
 * loop between batches, one sweep at a time. Every replica runs one; the
 * stores make a thread's removal atomic, so two replicas never clear it
 * twice. A failed sweep is logged and tried again at the next tick. Stops
 * (and lets a running batch finish) when `stop` is called.
 */
export function startTtlSweeper(
  store: Store,
  opts: { intervalMs: number; logger: Logger; now?: () => number },
): { stop(): Promise<void> } {
  const now = opts.now ?? Date.now;
  let stopped = false;
  let running: Promise<void> | undefined;

  async function sweep(): Promise<void> {
    try {
      for (;;) {
        if (stopped) return;
        const removed = await store.sweepExpired(now(), TTL_SWEEP_BATCH);
        if (removed < TTL_SWEEP_BATCH) return;
        await new Promise((resolve) => setImmediate(resolve));
      }
    } catch (err) {
      if (!stopped) opts.logger.warn("sweeping expired threads failed; will retry", { err });
    }
  }

  const timer = setInterval(() => {
    if (running !== undefined) return;
    running = sweep().finally(() => {
      running = undefined;
    });
  }, opts.intervalMs);
  timer.unref();
  return {
    async stop() {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}
