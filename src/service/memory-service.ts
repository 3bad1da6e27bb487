import { MemoryError } from "../core/errors.js";
import type { Strategy } from "../core/types.js";
import type { Logger } from "../logger.js";
import type { ServerMetrics } from "../metrics.js";
import type { Store } from "../store/store.js";
import type { SummarizerRegistry } from "../summarizer/registry.js";
import { add } from "./add.js";
import type { MemoryServiceCore } from "./context.js";
import { assertOpen, type ServiceDeps } from "./deps.js";
import { EventHub } from "./event-hub.js";
import { FoldScheduler } from "./fold-scheduler.js";
import { fork } from "./fork.js";
import { get } from "./get.js";
import { DEFAULT_SERVICE_LIMITS, type ServiceLimits } from "./limits.js";
import { rewind } from "./rewind.js";
import { clear, listThreads } from "./threads.js";
import { startTtlSweeper } from "./ttl-sweeper.js";
import { watchEvents } from "./watch.js";
import { WatcherCounts } from "./watcher-counts.js";

export { DEFAULT_SERVICE_LIMITS, type ServiceLimits } from "./limits.js";

export interface MemoryServiceOptions {
  store: Store;
  summarizers: SummarizerRegistry;
  /** Strategy of threads created without one. */
  defaultStrategy: Strategy;
  limits?: Partial<ServiceLimits>;
  logger: Logger;
  /** Fold outcomes, degraded Gets, open watchers, the fold queue's depth. */
  metrics?: ServerMetrics;
  now?: () => number;
}

export interface MemoryService extends MemoryServiceCore {
  /** Ends Watch streams with UNAVAILABLE and stops background folds. The store stays open. */
  close(): Promise<void>;
}

/**
 * The MemoryService behaviour over a Store and the summarisers: validation,
 * recall, background folds, Watch. Transport-free (see context.ts). Each RPC
 * is a module of its own (add.ts, get.ts, threads.ts, rewind.ts, fork.ts,
 * watch.ts) over the ServiceDeps made here.
 */
export function createMemoryService(opts: MemoryServiceOptions): MemoryService {
  const limits: ServiceLimits = { ...DEFAULT_SERVICE_LIMITS, ...opts.limits };
  const { store, logger, metrics } = opts;
  const now = opts.now ?? Date.now;
  const folds = new FoldScheduler({
    store,
    summarizers: opts.summarizers,
    logger,
    maxConcurrent: limits.maxConcurrentFolds,
    maxPending: limits.maxPendingFolds,
    leaseMs: limits.foldLeaseMs,
    retryInitialMs: limits.foldRetryInitialMs,
    retryMaxMs: limits.foldRetryMaxMs,
    now,
    ...(metrics === undefined ? {} : { metrics }),
  });
  metrics?.collect(
    "windlass_fold_queue_depth",
    "Threads waiting for a fold slot.",
    () => folds.pending,
  );
  const shutdown = new AbortController();
  const sweeper = startTtlSweeper(store, { intervalMs: limits.ttlSweepIntervalMs, logger, now });
  const deps: ServiceDeps = {
    store,
    summarizers: opts.summarizers,
    defaultStrategy: opts.defaultStrategy,
    limits,
    logger,
    metrics,
    now,
    hub: new EventHub(store),
    folds,
    shutdown: shutdown.signal,
  };
  const watchers = new WatcherCounts(limits.maxWatchersPerNamespace);
  return {
    add: (req, ctx) => add(deps, req, ctx),
    get: (req, ctx) => get(deps, req, ctx),
    clear: (req, ctx) => clear(deps, req, ctx),
    listThreads: (req, ctx) => listThreads(deps, req, ctx),
    rewind: (req, ctx) => rewind(deps, req, ctx),
    fork: (req, ctx) => fork(deps, req, ctx),
    watch(req, ctx) {
      assertOpen(deps);
      return watchEvents(req, ctx, {
        ...(metrics === undefined
          ? {}
          : { watchers: metrics.watchers, wakeupsMissed: metrics.watchWakeupsMissed }),
        store,
        hub: deps.hub,
        shutdown: shutdown.signal,
        watchBuffer: limits.watchBuffer,
        progressIntervalMs: limits.progressIntervalMs,
        now,
        admit: (namespace) => watchers.admit(namespace),
      });
    },
    async close() {
      shutdown.abort(new MemoryError("unavailable", "the server is shutting down"));
      await sweeper.stop();
      await folds.close();
    },
  };
}
