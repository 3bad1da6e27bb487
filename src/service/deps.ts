import { MemoryError } from "../core/errors.js";
import { resolveStrategy, type StrategyDraft } from "../core/strategy.js";
import type { Strategy, ThreadState } from "../core/types.js";
import type { Logger } from "../logger.js";
import type { ServerMetrics } from "../metrics.js";
import type { Store } from "../store/store.js";
import type { SummarizerRegistry } from "../summarizer/registry.js";
import type { EventHub } from "./event-hub.js";
import type { FoldScheduler } from "./fold-scheduler.js";
import type { ServiceLimits } from "./limits.js";

/**
 * What every RPC handler of the service works with (memory-service.ts makes
 * it once): the store, the summarisers, the fold scheduler and the event hub
 * shared by all calls, the limits, the clock and the shutdown signal.
 */
export interface ServiceDeps {
  store: Store;
  summarizers: SummarizerRegistry;
  /** Strategy of threads created without one. */
  defaultStrategy: Strategy;
  limits: ServiceLimits;
  logger: Logger;
  metrics: ServerMetrics | undefined;
  now: () => number;
  hub: EventHub;
  folds: FoldScheduler;
  /** Aborted (with unavailable) when the service shuts down. */
  shutdown: AbortSignal;
}

/** Refuses new calls once the service is shutting down. */
export function assertOpen(deps: Pick<ServiceDeps, "shutdown">): void {
  if (deps.shutdown.aborted) throw new MemoryError("unavailable", "the server is shutting down");
}

/** An Add's strategy, resolved against the server's default and its summarisers. */
export function resolveAddStrategy(deps: ServiceDeps, draft: StrategyDraft): Strategy {
  return resolveStrategy(draft, {
    defaultStrategy: deps.defaultStrategy,
    defaultModel: deps.summarizers.defaultName,
    hasModel: (name) => deps.summarizers.has(name),
    maxStoredLimit: deps.limits.maxStoredLimit,
    field: "strategy",
  });
}

/** Starts a fold when one may be due; the cheap count check avoids a read on most Adds. */
export function maybeKick(
  deps: Pick<ServiceDeps, "folds">,
  namespace: string,
  t: ThreadState,
): void {
  const s = t.strategy;
  if (s.kind !== "summary") return;
  // A token budget can make a fold due before the count does: let the scheduler plan.
  if ((s.maxTokens ?? 0) > 0 || t.lastSeq - t.summarizedThroughSeq - s.window >= s.summarizeEvery) {
    deps.folds.kick(namespace, t.threadId);
  }
}
