import { createHash } from "node:crypto";
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { create } from "@bufbuild/protobuf";
import {
  type AddRequest,
  type AddResponse,
  AddResponseSchema,
  type ClearRequest,
  type ClearResponse,
  ClearResponseSchema,
  type GetRequest,
  type GetResponse,
  GetResponseSchema,
  type ListThreadsRequest,
  type ListThreadsResponse,
  ListThreadsResponseSchema,
  type RewindRequest,
  type RewindResponse,
  RewindResponseSchema,
  type WatchRequest,
  type WatchResponse,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { lastSeqMismatchError } from "../core/append.js";
import { invalidArgument, MemoryError } from "../core/errors.js";
import { planFold, type Recalled, readStrategy, recall, recallSize } from "../core/recall.js";
import {
  encodingOf,
  MAX_TOKENS_LIMIT,
  resolveStrategy,
  type StrategyDraft,
  strategyKey,
} from "../core/strategy.js";
import { countMessageTokensSliced, DEFAULT_TOKEN_ENCODING } from "../core/tokens.js";
import type { ChatMessage, Labels, StoredMessage, Strategy, ThreadState } from "../core/types.js";
import type { Logger } from "../logger.js";
import type { ServerMetrics } from "../metrics.js";
import type { Store, ThreadSnapshot } from "../store/store.js";
import type { SummarizerRegistry } from "../summarizer/registry.js";
import type { CallContext, MemoryServiceCore } from "./context.js";
import {
  MAX_REQUEST_ID_BYTES,
  messageFromPb,
  safeNumber,
  strategyDraftFromPb,
  threadIdFrom,
  threadToPb,
  ttlMsFromPb,
} from "./convert.js";
import { EventHub } from "./event-hub.js";
import { FoldScheduler } from "./fold-scheduler.js";
import { labelsFrom } from "./labels.js";
import { setMessages } from "./pre-encoded.js";
import { startTtlSweeper } from "./ttl-sweeper.js";
import { watchEvents } from "./watch.js";

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

const PAGE_SIZE_DEFAULT = 100;
const PAGE_SIZE_MAX = 1000;

/**
 * The MemoryService behaviour over a Store and the summarisers: validation,
 * recall, background folds, Watch. Transport-free (see context.ts).
 */
export function createMemoryService(opts: MemoryServiceOptions): MemoryService {
  const limits: ServiceLimits = { ...DEFAULT_SERVICE_LIMITS, ...opts.limits };
  const { store, summarizers, logger } = opts;
  const now = opts.now ?? Date.now;
  const hub = new EventHub(store);
  const folds = new FoldScheduler({
    store,
    summarizers,
    logger,
    maxConcurrent: limits.maxConcurrentFolds,
    maxPending: limits.maxPendingFolds,
    leaseMs: limits.foldLeaseMs,
    retryInitialMs: limits.foldRetryInitialMs,
    retryMaxMs: limits.foldRetryMaxMs,
    now,
    ...(opts.metrics === undefined ? {} : { metrics: opts.metrics }),
  });
  opts.metrics?.collect(
    "windlass_fold_queue_depth",
    "Threads waiting for a fold slot.",
    () => folds.pending,
  );
  const shutdown = new AbortController();
  const sweeper = startTtlSweeper(store, { intervalMs: limits.ttlSweepIntervalMs, logger, now });

  const resolve = (draft: StrategyDraft): Strategy =>
    resolveStrategy(draft, {
      defaultStrategy: opts.defaultStrategy,
      defaultModel: summarizers.defaultName,
      hasModel: (name) => summarizers.has(name),
      maxStoredLimit: limits.maxStoredLimit,
      field: "strategy",
    });

  /**
   * GetRequest.recall, validated as an Add's strategy would be. Its model is
   * not looked up: a read never calls a summariser, so naming one this
   * server lacks is no error here.
   */
  function recallFromPb(req: GetRequest): Strategy | undefined {
    const draft = strategyDraftFromPb(req.recall);
    if (draft === undefined) return undefined;
    if (draft.kind === undefined) {
      throw invalidArgument("recall", "must set one of buffer, window or summary");
    }
    return resolveStrategy(
      { ...draft, model: "" },
      {
        defaultStrategy: opts.defaultStrategy,
        defaultModel: "",
        hasModel: () => true,
        maxStoredLimit: limits.maxStoredLimit,
        field: "recall",
      },
    );
  }

  function assertOpen(): void {
    if (shutdown.signal.aborted)
      throw new MemoryError("unavailable", "the server is shutting down");
  }

  /** Starts a fold when one may be due; the cheap count check avoids a read on most Adds. */
  function maybeKick(namespace: string, t: ThreadState): void {
    const s = t.strategy;
    if (s.kind !== "summary") return;
    // A token budget can make a fold due before the count does: let the scheduler plan.
    if (
      (s.maxTokens ?? 0) > 0 ||
      t.lastSeq - t.summarizedThroughSeq - s.window >= s.summarizeEvery
    ) {
      folds.kick(namespace, t.threadId);
    }
  }

  async function add(req: AddRequest, ctx: CallContext): Promise<AddResponse> {
    assertOpen();
    const threadId = threadIdFrom(req.threadId);
    if (req.messages.length > limits.maxMessagesPerAdd) {
      throw invalidArgument(
        "messages",
        `at most ${limits.maxMessagesPerAdd} messages per Add (got ${req.messages.length})`,
      );
    }
    if (Buffer.byteLength(req.requestId, "utf8") > MAX_REQUEST_ID_BYTES) {
      throw invalidArgument("request_id", `must be at most ${MAX_REQUEST_ID_BYTES} bytes`);
    }
    const messages = req.messages.map((m, i) => messageFromPb(m, () => `messages[${i}]`));
    const labels = labelsFrom(req.labels, "labels");
    const ttlMs = req.ttl === undefined ? undefined : ttlMsFromPb(req.ttl, "ttl");
    const draft = strategyDraftFromPb(req.strategy);
    const strategy = draft === undefined ? undefined : resolve(draft);
    if (req.replaceStrategy && strategy === undefined) {
      throw invalidArgument("strategy", "must be set when replace_strategy is");
    }
    if (req.keepStrategy && req.replaceStrategy) {
      throw invalidArgument("keep_strategy", "must not be set with replace_strategy");
    }
    const expectedLastSeq =
      req.expectedLastSeq === undefined
        ? undefined
        : safeNumber(req.expectedLastSeq, "expected_last_seq");
    if (
      messages.length === 0 &&
      strategy === undefined &&
      labels === undefined &&
      ttlMs === undefined
    ) {
      return emptyAdd(ctx.namespace, threadId, expectedLastSeq);
    }
    // Hashed before the counts are added, so a retry's hash matches whatever counted it.
    const hash =
      req.requestId === ""
        ? ""
        : requestHash(
            messages,
            strategy,
            req.replaceStrategy,
            expectedLastSeq,
            labels,
            ttlMs,
            req.keepStrategy,
          );
    await countTokens(messages, strategy ?? opts.defaultStrategy, ctx.signal);
    const append = (given: Strategy | undefined) =>
      store.append({
        namespace: ctx.namespace,
        threadId,
        messages,
        strategy: given,
        defaultStrategy: opts.defaultStrategy,
        replaceStrategy: req.replaceStrategy,
        requestId: req.requestId,
        requestHash: hash,
        expectedLastSeq,
        now: now(),
        ...(labels === undefined ? {} : { labels }),
        ...(ttlMs === undefined ? {} : { ttlMs }),
        defaultTtlMs: limits.defaultTtlMs,
        ...(ctx.deadline === undefined ? {} : { deadline: ctx.deadline }),
      });
    let result: Awaited<ReturnType<typeof append>>;
    try {
      result = await append(strategy);
    } catch (err) {
      // keep_strategy: the thread exists with another strategy, so the Add
      // goes in without one. Retried rather than checked first, because the
      // store decides atomically; the refused attempt stored nothing.
      if (!(req.keepStrategy && isStrategyMismatch(err))) throw err;
      // Without its strategy such an Add asks for nothing: answer as an empty
      // Add does, rather than create a thread should it be cleared meanwhile.
      if (messages.length === 0 && labels === undefined && ttlMs === undefined) {
        return emptyAdd(ctx.namespace, threadId, expectedLastSeq);
      }
      result = await append(undefined);
    }
    if (!result.replayed) maybeKick(ctx.namespace, result.thread);
    return create(AddResponseSchema, {
      thread: threadToPb(result.thread),
      firstSeq: BigInt(result.firstSeq),
      lastSeq: BigInt(result.lastSeq),
    });
  }

  /**
   * Stores each message's token count on it, with the encoding of the
   * strategy the Add names (else the server default's). An Add that names no
   * strategy on a thread whose encoding differs gets the default's counts;
   * Get then counts those messages again on read (README, Token budgets).
   * Sliced with turns of the event loop, so a huge message holds up no one.
   */
  async function countTokens(
    messages: ChatMessage[],
    strategy: Strategy,
    signal: AbortSignal,
  ): Promise<void> {
    const encoding = encodingOf(strategy);
    // Between slices: stop for a cancelled call or a shutdown before storing anything.
    const pause = async (): Promise<void> => {
      await yieldToEventLoop();
      if (signal.aborted) throw signal.reason;
      assertOpen();
    };
    for (const m of messages) {
      m.tokens = await countMessageTokensSliced(m, encoding, pause);
      if (encoding !== DEFAULT_TOKEN_ENCODING) m.tokenEncoding = encoding;
    }
  }

  /**
   * An Add with nothing to store and no strategy to set writes nothing and
   * creates no thread (a client's add([]) is no way to make one); it still
   * answers with the thread, if any, and checks expected_last_seq.
   */
  async function emptyAdd(
    namespace: string,
    threadId: string,
    expectedLastSeq: number | undefined,
  ): Promise<AddResponse> {
    const thread = await store.getThread(namespace, threadId);
    const lastSeq = thread?.lastSeq ?? 0;
    if (expectedLastSeq !== undefined && expectedLastSeq !== lastSeq) {
      throw lastSeqMismatchError(lastSeq, expectedLastSeq);
    }
    return create(AddResponseSchema, thread === undefined ? {} : { thread: threadToPb(thread) });
  }

  async function get(req: GetRequest, ctx: CallContext): Promise<GetResponse> {
    assertOpen();
    const threadId = threadIdFrom(req.threadId);
    const limit = req.limit;
    const maxTokens = req.maxTokens;
    if (maxTokens !== undefined && maxTokens > MAX_TOKENS_LIMIT) {
      throw invalidArgument("max_tokens", `must be at most ${MAX_TOKENS_LIMIT}`);
    }
    const shape: Shape = { limit, maxTokens, recall: recallFromPb(req) };
    const read = await readForGet(ctx.namespace, threadId, shape);
    if (read === undefined) return create(GetResponseSchema, {});
    let snap = read.snap;
    if (readStrategy(snap.thread.strategy, shape.recall).kind !== "summary" || req.allowStale) {
      return respond(snap, shape, "", read.recalled);
    }

    const started = now();
    const waitUntil = Math.min(
      started + limits.getFoldWaitMs,
      ctx.deadline === undefined
        ? Number.POSITIVE_INFINITY
        : ctx.deadline - answerReserveMs(ctx.deadline - started),
    );
    for (;;) {
      const s = snap.thread.strategy;
      const view = readStrategy(s, shape.recall);
      if (s.kind !== "summary" || view.kind !== "summary") return respond(snap, shape);
      // Folds follow the thread's strategy, at the size and budget this Get reads with.
      const size = recallSize(view, limit);
      const budget = maxTokens ?? (shape.recall === undefined ? undefined : (view.maxTokens ?? 0));
      const tokens = { maxTokens: budget, summary: snap.thread.summary };
      if (
        planFold(s, snap.messages, snap.thread.summarizedThroughSeq, size, tokens) === undefined
      ) {
        return respond(snap, shape);
      }
      const failure = folds.failure(ctx.namespace, threadId, snap.thread.incarnation);
      if (failure !== undefined) {
        return respond(
          snap,
          shape,
          `summary fold failed (attempt ${failure.attempt}): ${failure.reason}`,
        );
      }
      if (folds.isSlow(ctx.namespace, threadId)) {
        return respond(snap, shape, "summary fold still running: the summariser is slow");
      }
      const remaining = waitUntil - now();
      if (remaining <= 0) {
        folds.markSlow(ctx.namespace, threadId);
        return respond(snap, shape, "summary fold still running when the wait ended");
      }
      // Listen first, then look again: a fold that finished between the read
      // above and now (on this replica or another) has already sent its event.
      const stopWaiting = new AbortController();
      const settled = hub.waitFor(
        ctx.namespace,
        threadId,
        (e) =>
          e.type === "summary_updated" ||
          e.type === "summary_failed" ||
          e.type === "thread_cleared",
        remaining,
        AbortSignal.any([ctx.signal, shutdown.signal, stopWaiting.signal]),
      );
      const current = await store.getThread(ctx.namespace, threadId);
      const moved =
        current === undefined ||
        current.incarnation !== snap.thread.incarnation ||
        current.summarizedThroughSeq !== snap.thread.summarizedThroughSeq ||
        folds.failure(ctx.namespace, threadId, snap.thread.incarnation) !== undefined;
      if (moved) {
        stopWaiting.abort();
      } else {
        folds.kick(ctx.namespace, threadId, size, budget);
      }
      await settled;
      if (ctx.signal.aborted) throw ctx.signal.reason;
      assertOpen();
      const next = await readForGet(ctx.namespace, threadId, shape);
      if (next === undefined) return create(GetResponseSchema, {});
      snap = next.snap;
    }
  }

  /**
   * The thread as a Get with `limit` needs it: a windowed read (Redis sends
   * only the newest messages), read again in full when the window reached the
   * oldest message read — widening over tool results, or system messages left
   * out, might need older ones. Summary threads always get every unfolded
   * message, which is all their recall and fold planning look at.
   */
  async function readForGet(
    namespace: string,
    threadId: string,
    shape: Shape,
  ): Promise<GetRead | undefined> {
    // With a recall, the store reads what its size needs, not the thread's.
    const readLimit =
      shape.limit ?? (shape.recall === undefined ? undefined : recallSize(shape.recall, undefined));
    const snap = await store.read(namespace, threadId, { limit: readLimit });
    if (snap === undefined) return undefined;
    const view = readStrategy(snap.thread.strategy, shape.recall);
    if (snap.complete || view.kind === "summary") {
      return { snap, recalled: undefined };
    }
    const recalled = recallOf(snap, shape, false);
    const first = recalled.messages[0];
    if (first !== undefined && first !== firstVisible(view, snap.messages)) {
      return { snap, recalled };
    }
    const full = await store.read(namespace, threadId);
    return full === undefined ? undefined : { snap: full, recalled: undefined };
  }

  /** `recalled`: recallOf(snap, shape, false) when readForGet has it already. */
  function respond(
    snap: ThreadSnapshot,
    shape: Shape,
    degradedReason = "",
    recalled?: Recalled,
  ): GetResponse {
    if (degradedReason !== "") opts.metrics?.degradedGets.inc();
    const r = recalled ?? recallOf(snap, shape, degradedReason !== "");
    const res = create(GetResponseSchema, {
      summary: r.summary,
      thread: threadToPb(snap.thread),
      degraded: degradedReason !== "",
      degradedReason,
      tokens: r.tokens,
      maxTokens: r.maxTokens,
      overBudget: r.overBudget,
    });
    return setMessages(res, r.messages);
  }

  async function clear(req: ClearRequest, ctx: CallContext): Promise<ClearResponse> {
    assertOpen();
    if (req.all) {
      if (req.threadId !== "") {
        throw invalidArgument("thread_id", "must be empty when all is set");
      }
      const ids: string[] = [];
      // Collect ids first so their fold state can be dropped after the clear;
      // a page at a time, with a turn of the event loop between pages, so a
      // namespace of many threads does not hold up other calls.
      for (let after = ""; ; ) {
        const page = await store.listThreads(ctx.namespace, after, PAGE_SIZE_MAX);
        for (const id of page) ids.push(id);
        if (page.length < PAGE_SIZE_MAX) break;
        after = page[page.length - 1] ?? "";
        await yieldToEventLoop();
        // Nothing is cleared yet: a cancelled call can still stop here.
        ctx.signal.throwIfAborted();
      }
      const cleared = await store.clearAll(ctx.namespace, now());
      for (let i = 0; i < ids.length; i++) {
        folds.forget(ctx.namespace, ids[i] ?? "");
        if ((i + 1) % PAGE_SIZE_MAX === 0) await yieldToEventLoop();
      }
      return create(ClearResponseSchema, { clearedThreads: cleared });
    }
    const threadId = threadIdFrom(req.threadId);
    const existed = await store.clear(ctx.namespace, threadId, now());
    folds.forget(ctx.namespace, threadId);
    return create(ClearResponseSchema, { clearedThreads: existed ? 1 : 0 });
  }

  /**
   * Drops the thread's messages after to_seq (the store decides and writes
   * atomically: core/rewind.ts). A dropped summary leaves the remaining
   * messages to fold again, so the scheduler is told to look.
   */
  async function rewind(req: RewindRequest, ctx: CallContext): Promise<RewindResponse> {
    assertOpen();
    const threadId = threadIdFrom(req.threadId);
    if (Buffer.byteLength(req.requestId, "utf8") > MAX_REQUEST_ID_BYTES) {
      throw invalidArgument("request_id", `must be at most ${MAX_REQUEST_ID_BYTES} bytes`);
    }
    const toSeq = safeNumber(req.toSeq, "to_seq");
    const expectedLastSeq =
      req.expectedLastSeq === undefined
        ? undefined
        : safeNumber(req.expectedLastSeq, "expected_last_seq");
    const hash =
      req.requestId === ""
        ? ""
        : createHash("sha256")
            .update(JSON.stringify(["rewind", toSeq, expectedLastSeq ?? null]))
            .digest("base64url");
    const result = await store.rewind({
      namespace: ctx.namespace,
      threadId,
      toSeq,
      expectedLastSeq,
      requestId: req.requestId,
      requestHash: hash,
      now: now(),
      ...(ctx.deadline === undefined ? {} : { deadline: ctx.deadline }),
    });
    if (!result.replayed && result.summaryDropped) {
      folds.forget(ctx.namespace, threadId);
      maybeKick(ctx.namespace, result.thread);
    }
    return create(RewindResponseSchema, {
      thread: threadToPb(result.thread),
      removedCount: result.removedCount,
      summaryDropped: result.summaryDropped,
    });
  }

  async function listThreads(
    req: ListThreadsRequest,
    ctx: CallContext,
  ): Promise<ListThreadsResponse> {
    assertOpen();
    const pageSize = req.pageSize === 0 ? PAGE_SIZE_DEFAULT : Math.min(req.pageSize, PAGE_SIZE_MAX);
    const after = decodePageToken(req.pageToken);
    const labels = labelsFrom(req.labels, "labels");
    const ids = await store.listThreads(ctx.namespace, after, pageSize + 1, labels);
    const page = ids.slice(0, pageSize);
    const last = page[page.length - 1];
    return create(ListThreadsResponseSchema, {
      threadIds: page,
      nextPageToken: ids.length > pageSize && last !== undefined ? encodePageToken(last) : "",
    });
  }

  /** Open Watch streams per namespace, for maxWatchersPerNamespace. */
  const watchersByNamespace = new Map<string, number>();

  function watch(req: WatchRequest, ctx: CallContext): AsyncIterable<WatchResponse> {
    assertOpen();
    return watchEvents(req, ctx, {
      ...(opts.metrics === undefined
        ? {}
        : { watchers: opts.metrics.watchers, wakeupsMissed: opts.metrics.watchWakeupsMissed }),
      store,
      hub,
      shutdown: shutdown.signal,
      watchBuffer: limits.watchBuffer,
      progressIntervalMs: limits.progressIntervalMs,
      now,
      admit: admitWatcher,
    });
  }

  /**
   * Counts a stream against maxWatchersPerNamespace from its first step until
   * it ends however it ends (watch.ts calls it, and the returned release).
   */
  function admitWatcher(namespace: string): () => void {
    const cap = limits.maxWatchersPerNamespace;
    const open = watchersByNamespace.get(namespace) ?? 0;
    if (cap > 0 && open >= cap) {
      throw new MemoryError(
        "resource_exhausted",
        `namespace limit max_watchers_per_namespace (${cap}) reached: end a Watch before opening another`,
      );
    }
    watchersByNamespace.set(namespace, open + 1);
    let left = false;
    return () => {
      if (left) return;
      left = true;
      const rest = (watchersByNamespace.get(namespace) ?? 1) - 1;
      if (rest <= 0) watchersByNamespace.delete(namespace);
      else watchersByNamespace.set(namespace, rest);
    };
  }

  return {
    add,
    get,
    clear,
    listThreads,
    rewind,
    watch,
    async close() {
      shutdown.abort(new MemoryError("unavailable", "the server is shutting down"));
      await sweeper.stop();
      await folds.close();
    },
  };
}

/** A snapshot read for a Get, with its recall when working it out needed it. */
interface GetRead {
  snap: ThreadSnapshot;
  recalled: Recalled | undefined;
}

function recallOf(snap: ThreadSnapshot, shape: Shape, degraded: boolean): Recalled {
  const t = snap.thread;
  return recall(
    readStrategy(t.strategy, shape.recall),
    {
      summary: t.summary,
      summarizedThroughSeq: t.summarizedThroughSeq,
      summaryTime: t.summaryTime,
    },
    snap.messages,
    { limit: shape.limit, maxTokens: shape.maxTokens, degraded },
  );
}

/** The first message recall may return: visibleMessages(strategy, messages)[0], without the copy. */
function firstVisible(
  strategy: Strategy,
  messages: readonly StoredMessage[],
): StoredMessage | undefined {
  return strategy.excludeSystem ? messages.find((m) => m.role !== "system") : messages[0];
}

/** What a Get asks for beyond the strategy: its limit, max_tokens and recall overrides. */
interface Shape {
  limit: number | undefined;
  maxTokens: number | undefined;
  /** GetRequest.recall, validated; undefined: the thread's strategy. */
  recall: Strategy | undefined;
}

/** Digest of what an Add asks for, to tell a retry from another request with the same id. */

function requestHash(
  messages: ChatMessage[],
  strategy: Strategy | undefined,
  replace: boolean,
  expectedLastSeq: number | undefined,
  labels: Labels | undefined,
  ttlMs: number | undefined,
  keepStrategy: boolean,
): string {
  const canonical = messages.map((m) => ({
    ...m,
    metadata: m.metadata === undefined ? undefined : Object.entries(m.metadata).sort(),
  }));
  return createHash("sha256")
    .update(
      JSON.stringify([
        canonical,
        strategy === undefined ? null : strategyKey(strategy),
        replace,
        expectedLastSeq ?? null,
        // Only when given, so the digests of Adds without labels stay as they were.
        ...(labels === undefined ? [] : [Object.entries(labels).sort()]),
        ...(ttlMs === undefined ? [] : [{ ttlMs }]),
        ...(keepStrategy ? [{ keepStrategy }] : []),
      ]),
    )
    .digest("base64url");
}

/** The FAILED_PRECONDITION of an Add whose strategy differs from the thread's (core/append.ts). */
function isStrategyMismatch(err: unknown): boolean {
  return (
    err instanceof MemoryError && err.code === "failed_precondition" && err.field === "strategy"
  );
}

function encodePageToken(lastId: string): string {
  return Buffer.from(`p1:${lastId}`, "utf8").toString("base64url");
}

function decodePageToken(token: string): string {
  if (token === "") return "";
  const text = Buffer.from(token, "base64url").toString("utf8");
  if (!text.startsWith("p1:") || Buffer.from(text, "utf8").toString("base64url") !== token) {
    throw invalidArgument("page_token", "is not a token this server issued");
  }
  return text.slice(3);
}

/**
 * How much of a Get's remaining deadline is kept for answering after waiting
 * for a fold: a fifth of it, between 50 ms and 1 s. A fixed 50 ms is too
 * little on a loaded machine, where reading the thread again and sending the
 * response can take longer, and the caller would get DEADLINE_EXCEEDED
 * instead of the degraded answer.
 */
function answerReserveMs(remainingMs: number): number {
  return Math.min(1_000, Math.max(50, remainingMs / 5));
}
