import { requestIdReusedError } from "../../core/append.js";
import { decideReplay, requestsToKeep } from "../../core/idempotency.js";
import { forgetRequest } from "../../core/rewind.js";
import type { ThreadState } from "../../core/types.js";
import type { StoreLimits } from "../store.js";
import { strategyFromJson } from "../strategy-json.js";
import type { Query } from "./events.js";

/**
 * Request-id records (the requests table), inside the caller's write
 * transaction: one per request id of a thread incarnation, an Add's or a
 * Rewind's, holding the first call's result as JSON text. The decisions
 * are the core's (idempotency.ts decideReplay and requestsToKeep,
 * rewind.ts forgetRequest); this file only reads and writes the rows.
 */

/** Which request a record is of: an Add's record keeps its lastSeq, a Rewind's NULL. */
export type RequestKind = "add" | "rewind";

/** What identifies a request and its payload (AppendCommand and RewindCommand have it). */
export interface RequestKey {
  namespace: string;
  threadId: string;
  /** Empty: no idempotency. */
  requestId: string;
  requestHash: string;
  now: number;
}

/**
 * The first result recorded for this request id, to answer a retry with,
 * or undefined when this is a new request (no record, or one past
 * retention). Throws invalid_argument when the id names another request: a
 * record of another payload, or of the other kind (an Add's id reused for a
 * Rewind, or the reverse).
 */
export async function recordedResult<R extends { thread: ThreadState }>(
  q: Query,
  lim: StoreLimits,
  key: RequestKey,
  kind: RequestKind,
): Promise<R | undefined> {
  if (key.requestId === "") return undefined;
  const [seen] = await q<RequestRecord>(
    `SELECT hash, time, result, last_seq FROM requests
     WHERE namespace = $1 AND thread_id = $2 AND request_id = $3`,
    [key.namespace, key.threadId, Buffer.from(key.requestId, "utf8")],
  );
  return replayOf<R>(seen, lim, key, kind);
}

/** A request-id record's columns as the writes read them. */
export interface RequestRecord {
  hash: string;
  time: number;
  /** The first result, JSON text. */
  result: string;
  last_seq: number | null;
}

/**
 * What `recordedResult` answers, from the record already read (undefined:
 * none): the first result to replay, undefined for a new request; throws
 * as recordedResult does.
 */
export function replayOf<R extends { thread: ThreadState }>(
  seen: RequestRecord | undefined,
  lim: StoreLimits,
  key: RequestKey,
  kind: RequestKind,
): R | undefined {
  if (seen === undefined || decideReplay(seen, key, lim) === "new") return undefined;
  if (kindOf(seen.last_seq) !== kind) throw requestIdReusedError();
  const first = JSON.parse(seen.result) as R;
  // The one shared object per strategy that every read of a thread hands the service.
  const strategy = strategyFromJson(JSON.stringify(first.thread.strategy));
  return { ...first, thread: { ...first.thread, strategy } };
}

function kindOf(lastSeq: number | null): RequestKind {
  return lastSeq === null ? "rewind" : "add";
}

/**
 * Records `result` (without `replayed`) as the answer to the request id,
 * then drops the thread's records past retention and beyond the newest
 * idempotencyMaxPerThread (core/idempotency.ts requestsToKeep). `lastSeq`
 * is an Add's AppendResult.lastSeq (what a Rewind forgets it by), or
 * undefined for a Rewind's record.
 */
export async function recordRequest(
  q: Query,
  lim: StoreLimits,
  key: RequestKey,
  result: { replayed: boolean },
  lastSeq: number | undefined,
): Promise<void> {
  const { replayed: _replayed, ...first } = result;
  await q(
    `INSERT INTO requests (namespace, thread_id, request_id, hash, result, time, last_seq)
     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (namespace, thread_id, request_id)
     DO UPDATE SET hash = excluded.hash, result = excluded.result, time = excluded.time,
       last_seq = excluded.last_seq`,
    [
      key.namespace,
      key.threadId,
      Buffer.from(key.requestId, "utf8"),
      key.requestHash,
      JSON.stringify(first),
      key.now,
      lastSeq ?? null,
    ],
  );
  const keep = requestsToKeep(key.now, lim);
  await q(
    `DELETE FROM requests WHERE namespace = $1 AND thread_id = $2 AND (time <= $3 OR request_id IN
       (SELECT request_id FROM requests WHERE namespace = $1 AND thread_id = $2
        ORDER BY time DESC, request_id DESC OFFSET $4))`,
    [key.namespace, key.threadId, keep.dropThrough, keep.keepNewest],
  );
}

/**
 * Forgets the records of the thread's Adds that stored a message after
 * `toSeq` (core/rewind.ts forgetRequest), so a retry of one adds its
 * messages again. Reads the Adds' (request id, lastSeq) pairs only: at most
 * idempotencyMaxPerThread small rows.
 */
export async function forgetRequestsAfter(
  q: Query,
  namespace: string,
  threadId: string,
  toSeq: number,
): Promise<void> {
  const adds = await q<{ request_id: Buffer; last_seq: number }>(
    `SELECT request_id, last_seq FROM requests
     WHERE namespace = $1 AND thread_id = $2 AND last_seq IS NOT NULL`,
    [namespace, threadId],
  );
  const forgotten = adds.filter((r) => forgetRequest(r.last_seq, toSeq)).map((r) => r.request_id);
  if (forgotten.length === 0) return;
  await q(
    "DELETE FROM requests WHERE namespace = $1 AND thread_id = $2 AND request_id = ANY ($3::bytea[])",
    [namespace, threadId, forgotten],
  );
}
