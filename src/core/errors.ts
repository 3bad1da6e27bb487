/**
 * The domain's one error type. The core, the stores and the service throw it;
 * the transports map `code` to a gRPC / Connect code through one table
 * (src/transport/error-table.ts) and never send `cause` to a client.
 */

/** Domain error codes; each maps to exactly one gRPC status code. */
export type ErrorCode =
  | "invalid_argument"
  | "not_found"
  | "already_exists"
  | "failed_precondition"
  | "aborted"
  | "out_of_range"
  | "resource_exhausted"
  | "unauthenticated"
  | "unavailable"
  | "deadline_exceeded"
  | "cancelled"
  | "internal";

export class MemoryError extends Error {
  override readonly name = "MemoryError";
  readonly code: ErrorCode;
  /** The request field at fault, for invalid_argument: "messages[2].role". */
  readonly field: string | undefined;
  /** For a resource_exhausted that passes by itself (a rate limit): when to retry, in ms. */
  readonly retryAfterMs: number | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    options?: { field?: string; cause?: unknown; retryAfterMs?: number },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.field = options?.field;
    this.retryAfterMs = options?.retryAfterMs;
  }
}

/** An invalid_argument error whose message starts with the field's name. */
export function invalidArgument(field: string, problem: string): MemoryError {
  return new MemoryError("invalid_argument", `${field}: ${problem}`, { field });
}

export function isMemoryError(err: unknown): err is MemoryError {
  return err instanceof MemoryError;
}
