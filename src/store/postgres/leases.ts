import type pg from "pg";
import { type HeldLease, mayTakeLease, nextLeaseToken } from "../../core/fold-commit.js";
import type { Query } from "./events.js";

/**
 * Fold leases across replicas, with fencing tokens (core/fold-commit.ts).
 * Each take or release is a small transaction of its own, outside the
 * write groups: it locks one fold_leases row and nothing else, so it never
 * waits on a namespace a group holds (summary commits and rewinds lock the
 * namespace, then the lease row: the one order). Times are the database's
 * clock, so replicas whose clocks disagree still agree on when a lease runs
 * out.
 */
export async function acquireFoldLease(
  pool: pg.Pool,
  namespace: string,
  threadId: string,
  ttlMs: number,
): Promise<number | undefined> {
  const c = await pool.connect();
  const q: Query = async (sql, params) => (await c.query(sql, params)).rows;
  try {
    await q("BEGIN");
    const held = await lockLease(q, namespace, threadId);
    if (!mayTakeLease(held, held.now)) {
      await q("ROLLBACK");
      return undefined;
    }
    const token = nextLeaseToken(held.token);
    await setLease(q, namespace, threadId, { token, expiresAt: held.now + ttlMs });
    await q("COMMIT");
    return token;
  } catch (err) {
    await q("ROLLBACK").catch(() => {});
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

/**
 * Ends the thread's lease, held or not, by moving its token on, inside the
 * caller's write transaction (a Rewind's): a fold running under the old
 * token can no longer commit (core/fold-commit.ts mayCommitSummary), and
 * one taking a lease meanwhile waits for this transaction, then gets a
 * token above this one.
 */
export async function fenceFoldLease(q: Query, namespace: string, threadId: string) {
  const held = await lockLease(q, namespace, threadId);
  await setLease(q, namespace, threadId, { token: nextLeaseToken(held.token), expiresAt: 0 });
}

/**
 * The thread's lease row, locked for the rest of the transaction, with the
 * database's time. The row exists from the first use on (token 0, free);
 * its token survives releases and Clear.
 */
async function lockLease(
  q: Query,
  namespace: string,
  threadId: string,
): Promise<HeldLease & { now: number }> {
  await q(
    `INSERT INTO fold_leases (namespace, thread_id, token, expires_at) VALUES ($1, $2, 0, 0)
     ON CONFLICT DO NOTHING`,
    [namespace, threadId],
  );
  const [held] = await q<HeldLease & { now: number }>(
    `SELECT token, expires_at AS "expiresAt", ${NOW_MS} AS now FROM fold_leases
     WHERE namespace = $1 AND thread_id = $2 FOR UPDATE`,
    [namespace, threadId],
  );
  if (held === undefined) throw new Error("postgres store: the fold lease row vanished");
  return held;
}

async function setLease(q: Query, namespace: string, threadId: string, lease: HeldLease) {
  await q(
    "UPDATE fold_leases SET token = $3, expires_at = $4 WHERE namespace = $1 AND thread_id = $2",
    [namespace, threadId, lease.token, lease.expiresAt],
  );
}

/** The database's clock, in ms since the epoch. */
const NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
