/** How long to wait between attempts: exponential, capped, with jitter. */
export interface BackoffOptions {
  /** Wait before the second attempt, in ms (before jitter). Default 200. */
  initialMs?: number;
  /** Longest wait, in ms (before jitter). Default 5000. */
  maxMs?: number;
}

const DEFAULT_INITIAL_MS = 200;
const DEFAULT_MAX_MS = 5000;

/**
 * The wait after `failures` consecutive failures (1 for the first): the
 * capped exponential delay with "equal jitter", half of it fixed and half
 * random. The fixed half is what keeps a client from spinning while the
 * server is down; the random half keeps many clients from reconnecting in
 * step after a restart.
 */
export function backoffDelay(
  failures: number,
  options: BackoffOptions = {},
  random: () => number = Math.random,
): number {
  const initial = positive(options.initialMs, DEFAULT_INITIAL_MS, "initialMs");
  const max = Math.max(initial, positive(options.maxMs, DEFAULT_MAX_MS, "maxMs"));
  const exponent = Math.min(Math.max(failures - 1, 0), 30);
  const capped = Math.min(max, initial * 2 ** exponent);
  return capped / 2 + (random() * capped) / 2;
}

/** Resolves after `ms`, or at once when `signal` aborts (never rejects). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve();
      return;
    }
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

function positive(value: number | undefined, fallback: number, field: string): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0) {
    throw new RangeError(
      `backoff ${field} must be a positive number of milliseconds, got ${value}`,
    );
  }
  return value;
}
