/**
 * Largest message either server reads or writes unless configured: 4 MiB,
 * gRPC's customary default. A request above it is RESOURCE_EXHAUSTED before
 * it reaches the service.
 */
export const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
