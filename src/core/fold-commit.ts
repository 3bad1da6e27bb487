/**
 * The checks that keep a fold's work out of a thread it no longer applies
 * to, across server replicas: the fold lease with its fencing token, and the
 * summary commit. Pure, so each store runs the same rules inside its own
 * atomic step.
 */

/** A thread's fold lease as a store keeps it. */
export interface HeldLease {
  token: number;
  /** ms since the epoch; the lease is free from then on. */
  expiresAt: number;
}

/** Whether a lease may be taken at `now`: nobody holds one, or it has run out. */
export function mayTakeLease(held: HeldLease | undefined, now: number): boolean {
  return held === undefined || held.expiresAt <= now;
}

/**
 * The fencing token of the next lease of a thread: strictly above every
 * token the thread had (the store keeps the last one across Clear), so a
 * fold that lost its lease can never commit with the stale token.
 */
export function nextLeaseToken(last: number | undefined): number {
  return (last ?? 0) + 1;
}

/**
 * Whether a summary computed from `fromSeq` through `throughSeq` for thread
 * incarnation `incarnation` under lease `leaseToken` may be written now:
 * the thread still has that incarnation (no Clear, no expiry since), its
 * summarized_through_seq is still `fromSeq` (no other fold committed), the
 * summary moves forward, and the token is the current lease's (fencing).
 */
export function mayCommitSummary(
  thread: { incarnation: string; summarizedThroughSeq: number } | undefined,
  lease: { token: number } | undefined,
  cmd: { incarnation: string; leaseToken: number; fromSeq: number; throughSeq: number },
): boolean {
  return (
    thread !== undefined &&
    thread.incarnation === cmd.incarnation &&
    thread.summarizedThroughSeq === cmd.fromSeq &&
    cmd.throughSeq > cmd.fromSeq &&
    lease !== undefined &&
    lease.token === cmd.leaseToken
  );
}
