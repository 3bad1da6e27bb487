import { MemoryError } from "../core/errors.js";

/**
 * Largest message either server reads or writes unless configured: 4 MiB,
 * gRPC's customary default. A request above it is RESOURCE_EXHAUSTED before
 * it reaches the service.
 */
export const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;

/**
 * Calls at once on one HTTP/2 connection, on both ports (Node's default is
 * 2^32 - 1). Beyond it a client queues its calls or opens a connection, which
 * --max-connections bounds in turn.
 */
export const MAX_CONCURRENT_STREAMS = 1000;

/**
 * RESOURCE_EXHAUSTED for a message over the size limit, naming the flag that
 * sets it (the libraries' own wording names their internal option names).
 * `bytes`: the message's size, when known before it is read whole.
 */
export function messageTooLarge(
  which: "request" | "response",
  bytes: number | undefined,
  limit: number,
): MemoryError {
  const size = bytes === undefined ? "" : ` of ${bytes} bytes`;
  const hint = which === "response" ? "; ask for less (a Get's limit or max_tokens)" : "";
  return new MemoryError(
    "resource_exhausted",
    `${which} message${size} is larger than --max-message-bytes (${limit})${hint}`,
  );
}
