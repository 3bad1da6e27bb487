import Database from "better-sqlite3";
import { type ErrorCode, MemoryError } from "../../../core/errors.js";
import type { EventBody, StoredMessage } from "../../../core/types.js";

/**
 * What crosses between the store and its write worker: a write's outcome
 * (Committed, or a WireError), and the errors of SQLite faults, each as the
 * store's callers see it.
 */

/** A write transaction's outcome, and what to do once it has committed. */
export interface Committed<T> {
  value: T;
  /** To publish. */
  events: LoggedEvent[];
  /** How the thread's messages changed: to bring its cached tail up to date. */
  messages?: MessagesChange;
  /** A Rewind dropped the thread's messages after a seq: to cut its cached tail. */
  rewound?: RewoundChange;
  /** Incarnations to drop from the cache: ended ones, and a parent whose head a Fork froze. */
  ended?: string[];
}

/**
 * An event as the worker logged it, at `position` in its namespace's log.
 * The store makes its cursor (a MAC, microseconds) on the main thread when
 * something reads it, which only Watch does.
 */
export type LoggedEvent = EventBody & { position: number; threadId: string; time: number };

/** What one commit did to a thread's messages (see MessageCache.update). */
export interface MessagesChange {
  incarnation: string;
  /** The thread was created by this commit: its messages are all known. */
  created: boolean;
  lastSeqBefore: number;
  added: StoredMessage[];
  /** Every message up to this seq was trimmed; 0 when none. */
  droppedThrough: number;
}

/** What a Rewind did to a thread's messages (see MessageCache.rewind). */
export interface RewoundChange {
  incarnation: string;
  lastSeqBefore: number;
  /** Every message after this seq was dropped; the next Add reuses those seqs. */
  toSeq: number;
}

/** An error as it crosses from the worker: a MemoryError keeps its code and field. */
export interface WireError {
  message: string;
  code?: MemoryError["code"];
  field?: string;
  retryAfterMs?: number;
}

export type WriteOutcome =
  | { id: number; ok: true; committed: Committed<unknown> }
  | { id: number; ok: false; error: WireError };

export function toWireError(thrown: unknown): WireError {
  const err = sqliteFault(thrown) ?? thrown;
  if (err instanceof MemoryError) {
    const e: WireError = { message: err.message, code: err.code };
    if (err.field !== undefined) e.field = err.field;
    if (err.retryAfterMs !== undefined) e.retryAfterMs = err.retryAfterMs;
    return e;
  }
  return { message: err instanceof Error ? err.message : String(err) };
}

export function fromWireError(e: WireError): Error {
  if (e.code === undefined) return new Error(`sqlite store: ${e.message}`);
  const options: { field?: string; retryAfterMs?: number } = {};
  if (e.field !== undefined) options.field = e.field;
  if (e.retryAfterMs !== undefined) options.retryAfterMs = e.retryAfterMs;
  return new MemoryError(e.code, e.message, options);
}

/** Why the worker answered a write without running it during close. */
export const CLOSING = "the SQLite store is closing; this write was not stored";

export const DISK_FULL = "the SQLite store's disk is full";

/** A write still queued (not taken by a transaction) at its call's deadline. */
export function queuedPastDeadline(): MemoryError {
  return new MemoryError(
    "deadline_exceeded",
    "the SQLite write was still queued at the call's deadline; it was not stored",
  );
}

/** A SQLite failure of the file or the disk rather than of the write. */
interface SqliteFault {
  code: ErrorCode;
  /** What is wrong, with SQLite's code and message: "the SQLite store's disk is full (…)". */
  cause: string;
  /** What a refused write's caller may do. */
  advice: string;
  /** The write may be stored though it failed (an I/O error at commit). */
  outcomeUnknown?: boolean;
}

function faultOf(err: unknown): SqliteFault | undefined {
  if (!(err instanceof Database.SqliteError)) return undefined;
  const detail = `${err.code}: ${err.message}`;
  if (err.code === "SQLITE_FULL") {
    return {
      code: "resource_exhausted",
      cause: `${DISK_FULL} (${detail})`,
      advice: "; reads are still served, and writes resume once space is freed",
    };
  }
  if (err.code.startsWith("SQLITE_BUSY") || err.code.startsWith("SQLITE_LOCKED")) {
    return {
      code: "unavailable",
      cause: `the SQLite database is locked by another process (${detail})`,
      advice: "; retry with backoff",
    };
  }
  if (err.code.startsWith("SQLITE_READONLY")) {
    return {
      code: "unavailable",
      cause: `the SQLite database cannot be written (${detail})`,
      advice: "",
    };
  }
  if (err.code.startsWith("SQLITE_IOERR")) {
    // A failed fsync may leave the commit's frames in the WAL, where recovery
    // after a crash could still find them: the outcome is not known.
    return {
      code: "unavailable",
      cause: `the SQLite store's disk failed (${detail})`,
      advice: "",
      outcomeUnknown: true,
    };
  }
  return undefined;
}

/** The store's error for a SQLite fault (faultOf); undefined for anything else. */
export function sqliteFault(err: unknown): MemoryError | undefined {
  const fault = faultOf(err);
  if (fault === undefined) return undefined;
  const outcome =
    fault.outcomeUnknown === true
      ? "this write may or may not be stored; retry it with the same request_id"
      : "this write was not stored";
  return new MemoryError(fault.code, `${fault.cause}: ${outcome}${fault.advice}`);
}

/** Why a write could not proceed, for health: the fault's cause, or the error's message. */
export function writeBlockedBy(err: unknown): string {
  return faultOf(err)?.cause ?? `the SQLite write connection failed (${toWireError(err).message})`;
}
