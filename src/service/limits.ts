/** Limits and timings of the service; src/config.ts fills them from flags and env. */
export interface ServiceLimits {
  /** Most messages one Add may carry. */
  maxMessagesPerAdd: number;
  /** Upper bound a strategy's max_stored may ask for. */
  maxStoredLimit: number;
  /** Longest a Get waits for a due or running fold, whatever its deadline. */
  getFoldWaitMs: number;
  /** Events a watcher may fall behind before it is ended with RESOURCE_EXHAUSTED. */
  watchBuffer: number;
  /** Idle streams get a Progress event this often. */
  progressIntervalMs: number;
  /**
   * Open Watch streams per namespace; 0: unlimited. Every watcher of a
   * namespace wakes on each of its events (on Redis, with a read of its own),
   * so without a cap one tenant's streams would multiply the cost of its
   * writes for everybody.
   */
  maxWatchersPerNamespace: number;
  maxConcurrentFolds: number;
  maxPendingFolds: number;
  foldLeaseMs: number;
  foldRetryInitialMs: number;
  foldRetryMaxMs: number;
  /** Ttl of threads created without one (AddRequest.ttl), ms; 0: none. */
  defaultTtlMs: number;
  /** How often expired threads are swept (service/ttl-sweeper.ts). */
  ttlSweepIntervalMs: number;
}

export const DEFAULT_SERVICE_LIMITS: ServiceLimits = {
  maxMessagesPerAdd: 1000,
  maxStoredLimit: 100_000,
  getFoldWaitMs: 5000,
  watchBuffer: 1000,
  progressIntervalMs: 30_000,
  maxWatchersPerNamespace: 1000,
  maxConcurrentFolds: 8,
  maxPendingFolds: 10_000,
  foldLeaseMs: 60_000,
  foldRetryInitialMs: 1000,
  foldRetryMaxMs: 60_000,
  defaultTtlMs: 0,
  ttlSweepIntervalMs: 1000,
};
