/**
 * Thread retention (AddRequest.ttl): every Add moves a thread with a ttl to
 * expire at the Add's time plus its ttl; a thread whose expire time has come
 * is gone for every call, whether or not a sweep has removed it yet.
 */

/** Whether the thread has expired at `now`. */
export function isExpired(thread: { expireTime?: number | undefined }, now: number): boolean {
  return thread.expireTime !== undefined && thread.expireTime <= now;
}

/**
 * The thread's ttl after an Add: the Add's when it gives one, else the
 * thread's own, else (a new thread) the server's default; 0: none.
 */
export function ttlAfterAdd(
  requested: number | undefined,
  current: number | undefined,
  created: boolean,
  defaultTtlMs: number | undefined,
): number {
  if (requested !== undefined) return requested;
  if (!created) return current ?? 0;
  return defaultTtlMs ?? 0;
}

/** The ttl fields of a thread after an Add at `now` with `ttlMs` (0: none). */
export function ttlFields(ttlMs: number, now: number): { ttlMs?: number; expireTime?: number } {
  return ttlMs > 0 ? { ttlMs, expireTime: now + ttlMs } : {};
}
