import pg from "pg";
import { MemoryError } from "../../core/errors.js";

/** The answers of the Postgres store's writes that its transactions give (group-commit.ts). */

export const CLOSED = "the Postgres store is closed; this write was not stored";
/**
 * Whether the connection (and so the transaction) is gone: no answer from
 * the server, or its answer was to end the session (SQLSTATE class 08,
 * connection exception; 57, operator intervention, e.g. a shutdown).
 */
export function connectionLost(err: unknown): boolean {
  if (!(err instanceof pg.DatabaseError)) return !(err instanceof MemoryError);
  return /^(08|57P0)/.test(err.code ?? "");
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function notStored(err: unknown): MemoryError {
  return new MemoryError(
    "unavailable",
    `the Postgres store could not write (${describe(err)}): this write was not stored`,
    { cause: err },
  );
}

export function outcomeUnknown(err: unknown): MemoryError {
  return new MemoryError(
    "unavailable",
    `the connection to Postgres was lost during COMMIT (${describe(err)}): this write may or may not be stored; retry it with the same request_id`,
    { cause: err },
  );
}

/** A write still queued at its call's deadline. */
export function queuedPastDeadline(): MemoryError {
  return new MemoryError(
    "deadline_exceeded",
    "the Postgres write was still queued at the call's deadline; it was not stored",
  );
}
