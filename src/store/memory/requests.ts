import { requestIdReusedError } from "../../core/append.js";
import { decideReplay, type RequestRetention, requestsToKeep } from "../../core/idempotency.js";
import { forgetRequest } from "../../core/rewind.js";
import type { AppendResult, ForkResult, RewindResult } from "../store.js";
import { copyThread, type ThreadRecord } from "./thread-record.js";

/**
 * Request-id idempotency over a thread's records (core/idempotency.ts
 * decides): one id names one request of the thread's incarnation, an Add or
 * a Rewind, and a retry gets that request's first result.
 */

/** What each kind of request returns. */
interface ResultByKind {
  append: AppendResult;
  rewind: RewindResult;
  fork: ForkResult;
}

/** The first result a request id got. */
export type FirstResult = {
  [K in keyof ResultByKind]: { kind: K; result: ResultByKind[K] };
}[keyof ResultByKind];

export interface RequestRecord {
  hash: string;
  time: number;
  first: FirstResult;
}

/** What identifies a request and its payload. */
export interface RequestKey {
  requestId: string;
  requestHash: string;
  now: number;
}

/**
 * The first result to answer a retry with (a copy, replayed), or undefined
 * when the request is new. Throws requestIdReusedError for an id recorded
 * for another payload, or for a request of the other kind.
 */
export function replayOf<K extends keyof ResultByKind>(
  kind: K,
  rec: ThreadRecord | undefined,
  cmd: RequestKey,
  lim: RequestRetention,
): ResultByKind[K] | undefined {
  if (rec === undefined || cmd.requestId === "") return undefined;
  const seen = rec.requests.get(cmd.requestId);
  if (seen === undefined || decideReplay(seen, cmd, lim) === "new") return undefined;
  // The service's digests of an Add and of a Rewind never match, so this
  // holds already; checked so an Add is never answered with a Rewind's result.
  if (seen.first.kind !== kind) throw requestIdReusedError();
  return replayed(seen.first.result as ResultByKind[K]);
}

/** A copy of a recorded result, for a caller, marked as a replay. */
function replayed<T extends AppendResult | RewindResult | ForkResult>(first: T): T {
  return { ...first, thread: copyThread(first.thread), replayed: true };
}

/**
 * Records the first result of `cmd`'s request id (the store's own object:
 * callers get copies) and drops what core/idempotency.ts requestsToKeep
 * leaves out, oldest first.
 */
export function recordRequest(
  rec: ThreadRecord,
  cmd: RequestKey,
  first: FirstResult,
  lim: RequestRetention,
): void {
  // Deleted first, so an id used again after its retention moves to the newest end.
  rec.requests.delete(cmd.requestId);
  rec.requests.set(cmd.requestId, { hash: cmd.requestHash, time: cmd.now, first });
  const keep = requestsToKeep(cmd.now, lim);
  for (const [id, r] of rec.requests) {
    if (rec.requests.size <= keep.keepNewest && r.time > keep.dropThrough) break;
    rec.requests.delete(id);
  }
}

/** Forgets the Adds a Rewind to `toSeq` undid part of (core/rewind.ts forgetRequest). */
export function forgetRewound(rec: ThreadRecord, toSeq: number): void {
  for (const [id, r] of rec.requests) {
    if (r.first.kind === "append" && forgetRequest(r.first.result.lastSeq, toSeq)) {
      rec.requests.delete(id);
    }
  }
}
