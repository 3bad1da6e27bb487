import { requestIdReusedError } from "./append.js";

/**
 * Request-id idempotency (AddRequest.request_id) as decisions over what a
 * store recorded, so every store answers a retry the same way. The stores
 * keep per thread incarnation: request id -> (hash of the request, time,
 * first result); a Clear ends the incarnation and its records with it.
 */

/** What a store kept of an earlier Add with the same request id. */
export interface SeenRequest {
  hash: string;
  time: number;
}

/** The limits idempotency works under (StoreLimits). */
export interface RequestRetention {
  idempotencyRetentionMs: number;
  idempotencyMaxPerThread: number;
}

/**
 * Whether an Add is a retry to answer with the first result ("replay") or a
 * new Add to run ("new"). A record past retention no longer counts; one
 * within it for another payload is refused (invalid_argument, request_id),
 * so a reused id never silently stands for two requests.
 */
export function decideReplay(
  seen: SeenRequest | undefined,
  cmd: { requestId: string; requestHash: string; now: number },
  lim: Pick<RequestRetention, "idempotencyRetentionMs">,
): "replay" | "new" {
  if (cmd.requestId === "" || seen === undefined) return "new";
  if (cmd.now - seen.time >= lim.idempotencyRetentionMs) return "new";
  if (seen.hash !== cmd.requestHash) throw requestIdReusedError();
  return "replay";
}

/**
 * Which of a thread's records to keep once an Add at `now` has recorded its
 * own: none at or before `dropThrough` (past retention), and of the rest
 * only the `keepNewest` newest, so a thread keeps at most
 * idempotencyMaxPerThread records.
 */
export function requestsToKeep(
  now: number,
  lim: RequestRetention,
): { dropThrough: number; keepNewest: number } {
  return {
    dropThrough: now - lim.idempotencyRetentionMs,
    keepNewest: Math.max(1, lim.idempotencyMaxPerThread),
  };
}
