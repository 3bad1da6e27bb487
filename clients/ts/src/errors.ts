import { Code, ConnectError } from "@connectrpc/connect";

/**
 * A failed call: `code` is the gRPC status code (the same numbers over gRPC
 * and Connect), `codeName` its name as the server's documentation spells it
 * ("FAILED_PRECONDITION"), `details` the server's message (it names the bad
 * field for INVALID_ARGUMENT).
 */
export class MemoryError extends Error {
  override readonly name: string = "MemoryError";
  readonly code: Code;
  readonly codeName: string;
  readonly details: string;

  constructor(code: Code, details: string, options?: { cause?: unknown }) {
    super(`${codeNameOf(code)}: ${details}`, options);
    this.code = code;
    this.codeName = codeNameOf(code);
    this.details = details;
  }
}

/**
 * Watch could not resume: the server no longer holds the events after the
 * last resume token (OUT_OF_RANGE: they aged out of its retention, or the
 * token belongs to another database). Events were missed, so re-read the
 * threads you care about with get() and start a new watch() without a token.
 */
export class ResyncRequiredError extends MemoryError {
  override readonly name: string = "ResyncRequiredError";
  /** The token the server refused (empty if the watch started from now). */
  readonly resumeToken: string;

  constructor(details: string, resumeToken: string, options?: { cause?: unknown }) {
    super(Code.OutOfRange, details, options);
    this.resumeToken = resumeToken;
  }
}

/** "OutOfRange" (Connect's enum key) to "OUT_OF_RANGE" (the gRPC spelling). */
function codeNameOf(code: Code): string {
  const key = Code[code] ?? `CODE_${code}`;
  return key.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

/**
 * Any rejection of a call as a MemoryError. A connection that broke or could
 * not be made reads as UNAVAILABLE whatever code the HTTP stack gave it
 * (connect-node says CANCELED for the streams of an HTTP/2 session whose
 * socket closed, ABORTED for ECONNRESET): for the caller it means the same
 * thing, "try again". Only errors raised on this side count; a code the
 * server sent (ABORTED for a wrong expected_last_seq) is kept, and so is
 * CANCELED when the caller's own `signal` aborted.
 */
export function toMemoryError(err: unknown, signal?: AbortSignal): MemoryError {
  if (err instanceof MemoryError) return err;
  const ce = ConnectError.from(err);
  const lostConnection = !ce.isWireError && !signal?.aborted && isConnectionFailure(ce);
  return new MemoryError(lostConnection ? Code.Unavailable : ce.code, ce.rawMessage, {
    cause: err,
  });
}

/** True for a client-side error that says the connection failed. */
function isConnectionFailure(err: ConnectError): boolean {
  if (err.code === Code.Unavailable || err.code === Code.Canceled) return true;
  if (err.code === Code.DeadlineExceeded) return false;
  let cause: unknown = err.cause;
  for (let depth = 0; depth < 8 && cause instanceof Error; depth++) {
    const nodeCode = (cause as { code?: unknown }).code;
    if (typeof nodeCode === "string" && CONNECTION_ERROR_CODES.has(nodeCode)) return true;
    if (cause.message === "socket hang up") return true;
    cause = cause.cause;
  }
  return false;
}

/** Node.js error codes of sockets and HTTP/2 sessions, not of the call itself. */
const CONNECTION_ERROR_CODES = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ERR_HTTP2_GOAWAY_SESSION",
  "ERR_HTTP2_SESSION_ERROR",
  "ERR_HTTP2_INVALID_SESSION",
  "ERR_HTTP2_STREAM_CANCEL",
  "ERR_HTTP2_STREAM_ERROR",
  "ERR_HTTP2_ERROR",
  "ERR_STREAM_PREMATURE_CLOSE",
]);
