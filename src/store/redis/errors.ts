import { ErrorReply } from "redis";
import { MemoryError } from "../../core/errors.js";

/**
 * How the Redis store's failures reach callers: an unreachable or hung
 * Redis, or a "not now" reply, is unavailable (the call may be retried); a
 * script or protocol error is a bug, reported as internal. Messages name
 * the target ("host:port"), never the URL (it may carry a password).
 */

/**
 * Server replies that mean "not now" rather than "wrong": the call may be
 * retried. MOVED and ASK reach here only from a WAIT session, which is
 * bound to one primary (the cluster client follows them everywhere else),
 * and one that could not move the write (replica-confirmation.ts begin).
 */
const TRANSIENT_REPLY =
  /^(LOADING|BUSY|MASTERDOWN|READONLY|CLUSTERDOWN|TRYAGAIN|NOREPLICAS|MISCONF|OOM|MOVED|ASK)\b/;

/** A command Redis did not answer in time (commands.ts withTimeout). */
export class CommandTimeout extends Error {
  override readonly name = "CommandTimeout";
}

export function unavailable(target: string, cause: unknown): MemoryError {
  return new MemoryError("unavailable", `the redis store at ${target} is unreachable`, { cause });
}

export function storeClosed(): MemoryError {
  return new MemoryError("unavailable", "the store is closed");
}

/** Maps a client or server failure to the domain's errors. */
export function storeError(err: unknown, target: string): Error {
  if (err instanceof MemoryError) return err;
  if (err instanceof CommandTimeout) {
    return new MemoryError("unavailable", err.message, { cause: err });
  }
  if (err instanceof ErrorReply) {
    const word = TRANSIENT_REPLY.exec(err.message)?.[1];
    if (word !== undefined) {
      return new MemoryError("unavailable", `the redis store cannot serve now (${word})`, {
        cause: err,
      });
    }
    // A script or protocol error: a bug, reported as internal.
    return new Error(`redis store: ${err.message}`, { cause: err });
  }
  return unavailable(target, err);
}

/** Whether Redis answered EVALSHA with NOSCRIPT (its script cache was emptied). */
export function isNoScript(err: unknown): boolean {
  return err instanceof ErrorReply && err.message.startsWith("NOSCRIPT");
}

/** Whether Redis answered FCALL that it has no such function (restarted empty, FUNCTION FLUSH). */
export function isFunctionNotFound(err: unknown): boolean {
  return err instanceof ErrorReply && err.message.startsWith("ERR Function not found");
}

/** Whether Redis answered FCALL that this user may not call functions (its ACL). */
export function isFcallForbidden(err: unknown): boolean {
  return err instanceof ErrorReply && err.message.startsWith("NOPERM");
}

/**
 * Refusals Redis gives a write function before running it, where a script
 * without a shebang runs until its first write: full memory, a failing
 * disk, too few replicas, a read-only replica. A call that writes nothing
 * (an Add's replay, or its refusal) is still answered by the script, as
 * before the Add became a function.
 */
const REFUSED_BEFORE_RUNNING = /^(OOM|MISCONF|NOREPLICAS|READONLY)\b/;

/**
 * Whether an FCALL that failed with `err` is run again as a script
 * (commands.ts Commands.run): the function is missing or may not be called,
 * or Redis refused it before running it (see above).
 */
export function fcallGoesByScript(err: unknown): boolean {
  return (
    isFunctionNotFound(err) ||
    isFcallForbidden(err) ||
    (err instanceof ErrorReply && REFUSED_BEFORE_RUNNING.test(err.message))
  );
}

/** The error of a script reply this version does not know: a bug. */
export function unexpectedReply(what: string, status: unknown): Error {
  return new Error(`redis store: unexpected ${what} reply ${String(status)}`);
}
