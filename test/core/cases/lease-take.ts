/**
 * core/fold-commit.ts mayTakeLease and nextLeaseToken: whether a fold
 * lease can be taken, and its fencing token. Run against the core
 * (test/core/decision-cases.test.ts) and against the Redis store's
 * ACQUIRE_LEASE (src/store/redis/lua/folds.ts,
 * test/store/redis-lua-decisions.test.ts), where a lease runs out by its
 * key's TTL: the times are far enough apart for a real clock.
 */
export interface LeaseTakeCase {
  name: string;
  held: { token: number; expiresAt: number } | undefined;
  /** The thread's newest token so far (undefined: it never had a lease). */
  lastToken: number | undefined;
  now: number;
  /** The token taken, or undefined when the lease is held. */
  expected: number | undefined;
}

const now = 1_000_000;

export const LEASE_TAKE_CASES: readonly LeaseTakeCase[] = [
  { name: "the first lease of a thread", held: undefined, lastToken: undefined, now, expected: 1 },
  { name: "a free lease after others", held: undefined, lastToken: 41, now, expected: 42 },
  {
    name: "held for a minute more",
    held: { token: 5, expiresAt: now + 60_000 },
    lastToken: 5,
    now,
    expected: undefined,
  },
  {
    name: "run out a second ago",
    held: { token: 5, expiresAt: now - 1000 },
    lastToken: 5,
    now,
    expected: 6,
  },
  { name: "running out now", held: { token: 9, expiresAt: now }, lastToken: 9, now, expected: 10 },
];
