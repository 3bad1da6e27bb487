import { Code, ConnectError } from "@connectrpc/connect";
import { Metadata, status } from "@grpc/grpc-js";
import { type ErrorCode, isMemoryError } from "../core/errors.js";
import type { Logger } from "../logger.js";
import {
  encodeRetryInfo,
  encodeStatusWithRetryInfo,
  RETRY_INFO_TYPE,
  STATUS_DETAILS_KEY,
} from "./retry-info.js";

/**
 * THE table from domain error codes to wire codes. Both transports map every
 * error through it, so a client sees the same code over gRPC and Connect.
 */
export const errorCodeTable: {
  readonly [C in ErrorCode]: { readonly grpc: status; readonly connect: Code };
} = {
  invalid_argument: { grpc: status.INVALID_ARGUMENT, connect: Code.InvalidArgument },
  not_found: { grpc: status.NOT_FOUND, connect: Code.NotFound },
  already_exists: { grpc: status.ALREADY_EXISTS, connect: Code.AlreadyExists },
  failed_precondition: { grpc: status.FAILED_PRECONDITION, connect: Code.FailedPrecondition },
  aborted: { grpc: status.ABORTED, connect: Code.Aborted },
  out_of_range: { grpc: status.OUT_OF_RANGE, connect: Code.OutOfRange },
  resource_exhausted: { grpc: status.RESOURCE_EXHAUSTED, connect: Code.ResourceExhausted },
  unauthenticated: { grpc: status.UNAUTHENTICATED, connect: Code.Unauthenticated },
  unavailable: { grpc: status.UNAVAILABLE, connect: Code.Unavailable },
  deadline_exceeded: { grpc: status.DEADLINE_EXCEEDED, connect: Code.DeadlineExceeded },
  cancelled: { grpc: status.CANCELLED, connect: Code.Canceled },
  internal: { grpc: status.INTERNAL, connect: Code.Internal },
};

/** What a client may learn about a failed call: a code and a safe message. */
export interface ClientError {
  readonly code: ErrorCode;
  readonly message: string;
  /** When the client may retry (rate limits): sent as a google.rpc.RetryInfo detail. */
  readonly retryAfterMs?: number;
}

/** Where an error happened, for the log line of an internal error. */
export interface ErrorScope {
  /** Fully qualified method, e.g. "windlass.memory.v1.MemoryService/Add". */
  readonly method: string;
  /** The call's signal; its reason explains abort errors thrown by the core. */
  readonly signal?: AbortSignal;
  readonly logger: Logger;
}

/** The message clients get for anything that is not a domain error. */
export const INTERNAL_ERROR_MESSAGE = "internal error";

/**
 * Turns anything a handler caught into what the client may see.
 *
 * - MemoryError: its code and message (an invalid_argument message names the
 *   field). Domain "internal" errors are treated like unknown ones.
 * - An abort error (AbortError, TimeoutError, or the signal's reason itself)
 *   while the call's signal is aborted: the abort reason's code, i.e.
 *   CANCELLED, DEADLINE_EXCEEDED or UNAVAILABLE.
 * - Anything else: INTERNAL with a generic message; the error itself, with
 *   its stack and cause, goes to the log only.
 */
export function toClientError(thrown: unknown, scope: ErrorScope): ClientError {
  if (isMemoryError(thrown) && thrown.code !== "internal") {
    const field = thrown.field;
    const message =
      field !== undefined && !thrown.message.startsWith(field)
        ? `${field}: ${thrown.message}`
        : thrown.message;
    return thrown.retryAfterMs === undefined
      ? { code: thrown.code, message }
      : { code: thrown.code, message, retryAfterMs: thrown.retryAfterMs };
  }
  const signal = scope.signal;
  if (signal?.aborted === true && isAbortError(thrown, signal.reason)) {
    const reason: unknown = signal.reason;
    if (isMemoryError(reason) && reason.code !== "internal") {
      return { code: reason.code, message: reason.message };
    }
    return { code: "cancelled", message: "call cancelled" };
  }
  scope.logger.error("internal error in handler", { method: scope.method, err: thrown });
  return { code: "internal", message: INTERNAL_ERROR_MESSAGE };
}

/** A grpc-js status object for `callback(err)` or `call.emit("error", err)`. */
export function toGrpcStatus(err: ClientError): {
  code: status;
  details: string;
  metadata?: Metadata;
} {
  const code = errorCodeTable[err.code].grpc;
  if (err.retryAfterMs === undefined) return { code, details: err.message };
  const metadata = new Metadata();
  metadata.set(
    STATUS_DETAILS_KEY,
    Buffer.from(encodeStatusWithRetryInfo(code, err.message, err.retryAfterMs)),
  );
  return { code, details: err.message, metadata };
}

/** A ConnectError carrying only the code and the safe message. */
export function toConnectError(err: ClientError): ConnectError {
  const error = new ConnectError(err.message, errorCodeTable[err.code].connect);
  if (err.retryAfterMs !== undefined) {
    // Already encoded: connect-node sends it as it is (JSON details, or grpc-status-details-bin).
    error.details.push({
      type: RETRY_INFO_TYPE,
      value: encodeRetryInfo(err.retryAfterMs),
      debug: { retryDelay: `${err.retryAfterMs / 1000}s` },
    });
  }
  return error;
}

function isAbortError(thrown: unknown, reason: unknown): boolean {
  if (thrown === reason) return true;
  if (typeof thrown !== "object" || thrown === null) return false;
  const name: unknown = "name" in thrown ? thrown.name : undefined;
  const cause: unknown = "cause" in thrown ? thrown.cause : undefined;
  return name === "AbortError" || name === "TimeoutError" || cause === reason;
}
