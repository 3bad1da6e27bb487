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
