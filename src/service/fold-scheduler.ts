import { planFold } from "../core/recall.js";
import type { Strategy } from "../core/types.js";
import type { Logger } from "../logger.js";
import type { ServerMetrics } from "../metrics.js";
import type { Store, ThreadSnapshot } from "../store/store.js";
import type { SummarizerRegistry } from "../summarizer/registry.js";
import { inFoldSpan } from "../tracing.js";
import {
  failureReason,
  foldDeadlineMs,
  retryDelayMs,
  summarizeWithinDeadline,
} from "./fold-call.js";

export { foldDeadlineMs, retryDelayMs } from "./fold-call.js";

export interface FoldSchedulerOptions {
  store: Store;
  summarizers: SummarizerRegistry;
  logger: Logger;
  /** Model calls running at once, across all threads. */
  maxConcurrent: number;
  /** Threads waiting for a fold slot; a kick beyond it is dropped (the next Add or Get kicks again). */
  maxPending: number;
  /** How long a fold may hold a thread's lease; the model call is aborted before it runs out. */
  leaseMs: number;
  /** Backoff after a thread's first failed fold; it doubles with each failure in a row. */
  retryInitialMs: number;
  /** Ceiling on one backoff. */
  retryMaxMs: number;
  /**
   * Threads remembered with a failed fold (its reason for Gets, its retry);
   * beyond it the oldest is forgotten, and a Get on it waits for a fresh fold
   * instead of reporting the failure at once. Default `maxPending`; at least 1.
   */
  maxFailing?: number;
  now: () => number;
  metrics?: ServerMetrics;
  /** Jitter source, uniform in [0, 1); default Math.random. */
  random?: () => number;
  /**
   * Starts the timer of a retry `delayMs` from now; default setTimeout,
   * unref'd. Tests pass one that records the delays and fires at once.
   */
  startRetryTimer?: (retry: () => void, delayMs: number) => NodeJS.Timeout;
}

/** Why a thread's summary cannot be brought up to date. */
export interface FoldFailure {
  incarnation: string;
  reason: string;
  attempt: number;
}

interface FoldState {
  namespace: string;
  threadId: string;
  queued: boolean;
  running: boolean;
  /** Kicked while running: plan again when the current fold ends. */
  again: boolean;
  /** Smallest recall size asked for since the last plan (a Get's limit). */
  requestedSize: number | undefined;
  /** Smallest token budget asked for since the last plan (a Get's max_tokens; 0: none). */
  requestedMaxTokens: number | undefined;
  /** A Get gave up waiting for the running fold: later Gets do not wait for it. */
  slow: boolean;
  /** Set exactly while the state is in `FoldScheduler.failing`. */
  failure: FoldFailure | undefined;
  /** Only with a failure: every failing thread has a retry pending, queued or running. */
  retryTimer: NodeJS.Timeout | undefined;
}

/**
 * Runs summary folds in the background: at most one at a time per thread
 * (a lease in the store makes that hold across replicas too), at most
 * `maxConcurrent` model calls in all, a bounded queue of waiting threads,
 * and retries with exponential backoff after a failure. A fold commits
 * through the store's compare-and-set, so a thread cleared or folded by
 * someone else meanwhile never gets this fold's summary.
 *
 * A thread's state lives only while it is queued, running or failing, so
 * `size` is at most maxConcurrent + maxPending + maxFailing. A failing
 * thread's retry reads it again, so a thread that is gone however it went
 * (a Clear here or on another replica, the TTL sweep, a store that lost it)
 * or that has nothing left to fold is forgotten by its next retry: at most
 * retryMaxMs later, plus its wait for a fold slot.
 */
export class FoldScheduler {
  private readonly states = new Map<string, FoldState>();
  private readonly queue: FoldState[] = [];
  /** The states with a failure, oldest failure first (a Set keeps insertion order). */
  private readonly failing = new Set<FoldState>();
  private readonly maxFailing: number;
  private active = 0;
  private readonly closing = new AbortController();
  private readonly running = new Set<Promise<void>>();

  constructor(private readonly opts: FoldSchedulerOptions) {
    this.maxFailing = Math.max(1, opts.maxFailing ?? opts.maxPending);
    opts.metrics?.collect(
      "windlass_fold_threads",
      "Threads the fold scheduler holds state for: queued, folding, or failing and due a retry.",
      () => this.size,
    );
  }

  /** Threads waiting for a fold slot. */
  get pending(): number {
    return this.queue.length;
  }

  /** Threads with state here: at most maxConcurrent + maxPending + maxFailing. */
  get size(): number {
    return this.states.size;
  }

  /**
   * Plans a fold for the thread soon; `size` and `maxTokens` are a Get's
   * recall size and token budget when they are not the strategy's.
   */
  kick(namespace: string, threadId: string, size?: number, maxTokens?: number): void {
    if (this.closing.signal.aborted) return;
    const st = this.state(namespace, threadId);
    if (size !== undefined) st.requestedSize = Math.min(size, st.requestedSize ?? size);
    // A Get without a budget (0) asks for no less than the strategy; keep the tightest positive one.
    if (maxTokens !== undefined && maxTokens > 0) {
      st.requestedMaxTokens = Math.min(maxTokens, st.requestedMaxTokens ?? maxTokens);
    }
    if (st.running) {
      st.again = true;
      return;
    }
    if (st.queued || st.retryTimer !== undefined) return;
    if (this.queue.length >= this.opts.maxPending) {
      this.opts.logger.warn("fold queue full; fold deferred to the next kick", {
        pending: this.queue.length,
      });
      // A failing thread must come back by itself, or a vanished one would stay.
      if (st.failure !== undefined) this.armRetry(st, st.failure.attempt);
      this.forgetIfIdle(st);
      return;
    }
    st.queued = true;
    this.queue.push(st);
    this.pump();
  }

  /** The current failure of the thread's folds, if it is for this incarnation. */
  failure(namespace: string, threadId: string, incarnation: string): FoldFailure | undefined {
    const f = this.states.get(key(namespace, threadId))?.failure;
    return f?.incarnation === incarnation ? f : undefined;
  }

  isRunning(namespace: string, threadId: string): boolean {
    return this.states.get(key(namespace, threadId))?.running ?? false;
  }

  /** Whether a Get already gave up waiting for the fold now running. */
  isSlow(namespace: string, threadId: string): boolean {
    const st = this.states.get(key(namespace, threadId));
    return st?.running === true && st.slow;
  }

  markSlow(namespace: string, threadId: string): void {
    const st = this.states.get(key(namespace, threadId));
    if (st?.running) st.slow = true;
  }

  /** The thread was cleared: drop its retry and failure (its folds can no longer commit). */
  forget(namespace: string, threadId: string): void {
    const st = this.states.get(key(namespace, threadId));
    if (st !== undefined) this.clearFailure(st);
  }

  /** Aborts running model calls, drops queued work and waits for the folds to settle. */
  async close(): Promise<void> {
    this.closing.abort(new Error("shutting down"));
    for (const st of this.states.values()) clearTimeout(st.retryTimer);
    this.queue.length = 0;
    await Promise.allSettled([...this.running]);
    this.states.clear();
    this.failing.clear();
  }

  private state(namespace: string, threadId: string): FoldState {
    const k = key(namespace, threadId);
    let st = this.states.get(k);
    if (st === undefined) {
      st = {
        namespace,
        threadId,
        queued: false,
        running: false,
        again: false,
        requestedSize: undefined,
        requestedMaxTokens: undefined,
        slow: false,
        failure: undefined,
        retryTimer: undefined,
      };
      this.states.set(k, st);
    }
    return st;
  }

  /** Records the thread's failure, forgetting the oldest failing thread when there are too many. */
  private setFailure(st: FoldState, failure: FoldFailure): void {
    this.failing.delete(st);
    if (this.failing.size >= this.maxFailing) {
      const oldest = this.failing.values().next().value;
      if (oldest !== undefined) this.clearFailure(oldest);
    }
    st.failure = failure;
    this.failing.add(st);
  }

  /** Drops the thread's failure and retry, and the thread itself if nothing else holds it. */
  private clearFailure(st: FoldState): void {
    clearTimeout(st.retryTimer);
    st.retryTimer = undefined;
    st.failure = undefined;
    this.failing.delete(st);
    this.forgetIfIdle(st);
  }

  private forgetIfIdle(st: FoldState): void {
    if (!st.queued && !st.running && st.failure === undefined && st.retryTimer === undefined) {
      this.states.delete(key(st.namespace, st.threadId));
    }
  }

  private pump(): void {
    while (this.active < this.opts.maxConcurrent && this.queue.length > 0) {
      const st = this.queue.shift();
      if (st === undefined) break;
      st.queued = false;
      st.running = true;
      this.active++;
      const run = this.foldAll(st)
        .catch((err: unknown) => this.opts.logger.error("fold crashed", { err }))
        .finally(() => {
          this.active--;
          st.running = false;
          st.slow = false;
          this.running.delete(run);
          if (st.again && !this.closing.signal.aborted) {
            st.again = false;
            this.kick(st.namespace, st.threadId);
          } else {
            // A fold that ended without a verdict (lease held elsewhere, store
            // error) leaves a failing thread due its retry all the same.
            if (st.failure !== undefined && st.retryTimer === undefined) {
              this.armRetry(st, st.failure.attempt);
            }
            this.forgetIfIdle(st);
          }
          this.pump();
        });
      this.running.add(run);
    }
  }

  /** Folds until nothing is due, another holder has the lease, or a fold fails. */
  private async foldAll(st: FoldState): Promise<void> {
    for (;;) {
      if (this.closing.signal.aborted) return;
      const more = await inFoldSpan(st.namespace, st.threadId, () => this.foldOnce(st));
      if (!more) return;
    }
  }

  /** One fold under the lease. Returns whether to plan again. */
  private async foldOnce(st: FoldState): Promise<boolean> {
    const { store, summarizers, logger } = this.opts;
    const token = await store.acquireFoldLease(st.namespace, st.threadId, this.opts.leaseMs);
    // Another replica is folding this thread; its summary_updated event wakes our waiters.
    if (token === undefined) return false;
    let incarnation = "";
    try {
      // Every unfolded message comes with any view of a summary thread.
      const snap = await store.read(st.namespace, st.threadId, { limit: undefined });
      // Gone (however it went) or no longer summarised: nothing left to fail.
      if (snap === undefined || snap.thread.strategy.kind !== "summary") {
        this.clearFailure(st);
        return false;
      }
      const strategy = snap.thread.strategy;
      incarnation = snap.thread.incarnation;
      // Cleared and written again since: the failure was the old thread's.
      if (st.failure !== undefined && st.failure.incarnation !== incarnation) this.clearFailure(st);
      const plan = planRequestedFold(st, strategy, snap);
      // Nothing due (another replica folded it): no failure to report or retry.
      if (plan === undefined) {
        this.clearFailure(st);
        return false;
      }
      const summarizer = summarizers.get(strategy.model);
      const started = this.opts.now();
      const summary = await summarizeWithinDeadline(
        summarizer,
        { previousSummary: snap.thread.summary, messages: plan.messages },
        foldDeadlineMs(this.opts.leaseMs),
        this.closing.signal,
      );
      const committed = await store.commitSummary({
        namespace: st.namespace,
        threadId: st.threadId,
        incarnation,
        leaseToken: token,
        fromSeq: snap.thread.summarizedThroughSeq,
        throughSeq: plan.throughSeq,
        summary,
        foldedCount: plan.messages.length,
        now: this.opts.now(),
      });
      this.clearFailure(st);
      this.opts.metrics?.folds.inc({ result: committed === undefined ? "discarded" : "committed" });
      this.opts.metrics?.foldSeconds.observe((this.opts.now() - started) / 1000);
      logger.debug("fold", {
        namespace: st.namespace,
        folded: plan.messages.length,
        ms: this.opts.now() - started,
        committed: committed !== undefined,
      });
      return committed !== undefined;
    } catch (err) {
      if (this.closing.signal.aborted || incarnation === "") return false;
      await this.recordFailure(st, incarnation, err);
      return false;
    } finally {
      await store.releaseFoldLease(st.namespace, st.threadId, token).catch(() => {});
    }
  }

  private async recordFailure(st: FoldState, incarnation: string, err: unknown): Promise<void> {
    const attempt = (st.failure?.incarnation === incarnation ? st.failure.attempt : 0) + 1;
    const reason = failureReason(err);
    this.setFailure(st, { incarnation, reason, attempt });
    this.opts.metrics?.folds.inc({ result: "failed" });
    this.opts.logger.warn("fold failed; will retry", { namespace: st.namespace, attempt, reason });
    await this.opts.store
      .recordFoldFailure({
        namespace: st.namespace,
        threadId: st.threadId,
        incarnation,
        reason,
        attempt,
        now: this.opts.now(),
      })
      .catch((e: unknown) => this.opts.logger.warn("could not log a fold failure", { err: e }));
    // Forgotten meanwhile (a Clear, or too many failing threads): no retry.
    if (st.failure !== undefined) this.armRetry(st, attempt);
  }

  /** Starts the backoff before retry `attempt` + 1 of a failing thread. */
  private armRetry(st: FoldState, attempt: number): void {
    if (this.closing.signal.aborted) return;
    const delay = retryDelayMs(
      attempt,
      this.opts.retryInitialMs,
      this.opts.retryMaxMs,
      (this.opts.random ?? Math.random)(),
    );
    const retry = (): void => {
      st.retryTimer = undefined;
      this.kick(st.namespace, st.threadId);
    };
    st.retryTimer = this.opts.startRetryTimer?.(retry, delay) ?? setTimeout(retry, delay).unref();
  }
}

/**
 * The fold due for the smallest size and budget asked for since the last
 * plan (which it then forgets), never beyond the strategy's own.
 */
function planRequestedFold(
  st: FoldState,
  strategy: Extract<Strategy, { kind: "summary" }>,
  snap: ThreadSnapshot,
): ReturnType<typeof planFold> {
  const size = Math.min(st.requestedSize ?? strategy.window, strategy.window);
  st.requestedSize = undefined;
  const strategyBudget = strategy.maxTokens ?? 0;
  const requested = st.requestedMaxTokens;
  st.requestedMaxTokens = undefined;
  const maxTokens =
    requested === undefined
      ? undefined
      : strategyBudget > 0
        ? Math.min(requested, strategyBudget)
        : requested;
  return planFold(strategy, snap.messages, snap.thread.summarizedThroughSeq, size, {
    maxTokens,
    summary: snap.thread.summary,
  });
}

function key(namespace: string, threadId: string): string {
  return `${namespace}\u0000${threadId}`;
}
