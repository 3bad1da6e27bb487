import type pg from "pg";
import { type HeldLease, mayTakeLease, nextLeaseToken } from "../../core/fold-commit.js";

/**
 * Fold leases across replicas, with fencing tokens (core/fold-commit.ts).
 * Each take or release is a small transaction of its own, outside the
 * write groups: it locks one fold_leases row and nothing else, so it never
 * waits on a namespace a group holds (summary commits lock the namespace,
 * then the lease row: the one order). Times are the database's clock, so
 * replicas whose clocks disagree still agree on when a lease runs out.
 */
export async function acquireFoldLease(
  pool: pg.Pool,
  namespace: string,
  threadId: string,
  ttlMs: number,
): Promise<number | undefined> {
  const c = await pool.connect();
  try {
    await c.query("BEGIN");
    // The row exists from the first take on; its token survives releases and Clear.
    await c.query(
      `INSERT INTO fold_leases (namespace, thread_id, token, expires_at) VALUES ($1, $2, 0, 0)
       ON CONFLICT DO NOTHING`,
      [namespace, threadId],
    );
    const r = await c.query<HeldLease & { now: number }>(
      `SELECT token, expires_at AS "expiresAt", ${NOW_MS} AS now FROM fold_leases
       WHERE namespace = $1 AND thread_id = $2 FOR UPDATE`,
      [namespace, threadId],
    );
    const held = r.rows[0];
    if (held === undefined || !mayTakeLease(held, held.now)) {
      await c.query("ROLLBACK");
      return undefined;
    }
    const token = nextLeaseToken(held.token);
    await c.query(
      "UPDATE fold_leases SET token = $3, expires_at = $4 WHERE namespace = $1 AND thread_id = $2",
      [namespace, threadId, token, held.now + ttlMs],
    );
    await c.query("COMMIT");
    return token;
  } catch (err) {
    await c.query("ROLLBACK").catch(() => {});
    throw err;
  } finally {
    c.release();
  }
}

/** Releases the lease if `token` still holds it; the token stays, for the next one to pass. */
export async function releaseFoldLease(
  pool: pg.Pool,
  namespace: string,
  threadId: string,
  token: number,
): Promise<void> {
  await pool.query(
    "UPDATE fold_leases SET expires_at = 0 WHERE namespace = $1 AND thread_id = $2 AND token = $3",
    [namespace, threadId, token],
  );
}

/** The database's clock, in ms since the epoch. */
const NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
