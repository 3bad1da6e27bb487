/**
 * Requests per second per namespace: one token bucket per namespace. Pure:
 * no timers, the clock is injected, and the map of buckets is bounded.
 *
 * A bucket holds up to `burst` tokens and gains `ratePerSecond` tokens a
 * second; each call takes one. A call that finds less than one token is
 * refused with the time until one is there.
 */
export interface RateLimitOptions {
  /** Tokens a namespace gains per second; 0 turns the limiter off. */
  readonly ratePerSecond: number;
  /** Most tokens a bucket holds: the calls a namespace may make at once after a quiet spell. */
  readonly burst: number;
  /** Most namespaces tracked at once. Default 10,000. */
  readonly maxNamespaces?: number;
  /** Milliseconds, monotonic. Default `performance.now`. */
  readonly now?: () => number;
}

export type RateDecision =
  | { readonly allowed: true }
  | { readonly allowed: false; readonly retryAfterMs: number };

interface Bucket {
  tokens: number;
  /** When `tokens` was last brought up to date. */
  at: number;
}

const ALLOWED: RateDecision = { allowed: true };
const DEFAULT_MAX_NAMESPACES = 10_000;

export class RateLimiter {
  readonly #rate: number;
  readonly #burst: number;
  readonly #maxNamespaces: number;
  readonly #now: () => number;
  /** In order of last use, oldest first (a Map keeps insertion order). */
  readonly #buckets = new Map<string, Bucket>();

  constructor(options: RateLimitOptions) {
    if (!(options.ratePerSecond >= 0) || !(options.burst >= 1)) {
      throw new RangeError("rate limit: ratePerSecond must be >= 0 and burst >= 1");
    }
    this.#rate = options.ratePerSecond;
    this.#burst = options.burst;
    this.#maxNamespaces = Math.max(1, options.maxNamespaces ?? DEFAULT_MAX_NAMESPACES);
    this.#now = options.now ?? (() => performance.now());
  }

  /** Whether the limiter does anything. */
  get enabled(): boolean {
    return this.#rate > 0;
  }

  /** Namespaces tracked now (at most `maxNamespaces`). */
  get size(): number {
    return this.#buckets.size;
  }

  /** Takes one token from the namespace's bucket, or says how long until there is one. */
  take(namespace: string): RateDecision {
    if (this.#rate === 0) return ALLOWED;
    const now = this.#now();
    let bucket = this.#buckets.get(namespace);
    if (bucket === undefined) {
      bucket = { tokens: this.#burst, at: now };
      this.#makeRoom(now);
    } else {
      this.#buckets.delete(namespace);
      bucket.tokens = this.#refilled(bucket, now);
      bucket.at = now;
    }
    // Re-inserted on every use, so the Map's first entries are the least recently used.
    this.#buckets.set(namespace, bucket);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return ALLOWED;
    }
    return {
      allowed: false,
      retryAfterMs: Math.max(1, Math.ceil(((1 - bucket.tokens) * 1000) / this.#rate)),
    };
  }

  #refilled(bucket: Bucket, now: number): number {
    const elapsed = Math.max(0, now - bucket.at);
    return Math.min(this.#burst, bucket.tokens + (elapsed * this.#rate) / 1000);
  }

  /**
   * Before adding a namespace: drops the least recently used buckets that are
   * full again (forgetting them changes nothing), and, if the map is still
   * at its bound, the least recently used one (that namespace then starts
   * again from a full bucket: a bounded map cannot remember everyone).
   */
  #makeRoom(now: number): void {
    for (const [namespace, bucket] of this.#buckets) {
      if (this.#refilled(bucket, now) < this.#burst) break;
      this.#buckets.delete(namespace);
    }
    if (this.#buckets.size < this.#maxNamespaces) return;
    const oldest = this.#buckets.keys().next();
    if (oldest.done !== true) this.#buckets.delete(oldest.value);
  }
}
