import { create } from "@bufbuild/protobuf";
import {
  type GetRequest,
  type GetResponse,
  GetResponseSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { invalidArgument } from "../core/errors.js";
import { shapeRecalled } from "../core/get-shaping.js";
import { planFold, type Recalled, readStrategy, recall, recallSize } from "../core/recall.js";
import {
  encodingOf,
  MAX_TOKENS_LIMIT,
  resolveStrategy,
  resolveToolClearing,
} from "../core/strategy.js";
import type { Profile, StoredMessage, Strategy, ToolClearing } from "../core/types.js";
import type { ThreadSnapshot } from "../store/store.js";
import type { CallContext } from "./context.js";
import { strategyDraftFromPb, threadIdFrom, threadToPb } from "./convert.js";
import { assertOpen, type ServiceDeps } from "./deps.js";
import { setMessages } from "./pre-encoded.js";
import { clearingDraftFromPb, profileFromPb } from "./shaping-options.js";

/** What a Get asks for beyond the strategy: its limit, max_tokens and recall overrides. */
interface Shape {
  limit: number | undefined;
  maxTokens: number | undefined;
  /** GetRequest.recall, validated; undefined: the thread's strategy. */
  recall: Strategy | undefined;
  /** GetRequest.profile; undefined: none. */
  profile: Profile | undefined;
  /** GetRequest.clear_tool_results, validated; undefined: the strategy's. */
  clearing: ToolClearing | undefined;
}

/** A snapshot read for a Get, with its recall when working it out needed it. */
interface GetRead {
  snap: ThreadSnapshot;
  recalled: Recalled | undefined;
}

/** MemoryService.Get: the thread shaped by its strategy, waiting (bounded) for a due fold. */
export async function get(
  deps: ServiceDeps,
  req: GetRequest,
  ctx: CallContext,
): Promise<GetResponse> {
  assertOpen(deps);
  const threadId = threadIdFrom(req.threadId);
  const maxTokens = req.maxTokens;
  if (maxTokens !== undefined && maxTokens > MAX_TOKENS_LIMIT) {
    throw invalidArgument("max_tokens", `must be at most ${MAX_TOKENS_LIMIT}`);
  }
  const clearingDraft = clearingDraftFromPb(req.clearToolResults);
  const shape: Shape = {
    limit: req.limit,
    maxTokens,
    recall: recallFromPb(deps, req),
    profile: profileFromPb(req.profile),
    clearing:
      clearingDraft === undefined
        ? undefined
        : resolveToolClearing(clearingDraft, "clear_tool_results"),
  };
  const read = await readForGet(deps, ctx.namespace, threadId, shape);
  if (read === undefined) return create(GetResponseSchema, {});
  if (readStrategy(read.snap.thread.strategy, shape.recall).kind !== "summary" || req.allowStale) {
    return respond(deps, read.snap, shape, "", read.recalled);
  }
  return getAfterFolds(deps, ctx, threadId, shape, read.snap);
}

/**
 * A summary Get: answers once no fold is due for what it reads, waiting for
 * a due or running one until --get-fold-wait or the call's deadline (less
 * what answering needs), degraded when the fold failed, is slow, or the
 * wait ran out.
 */
async function getAfterFolds(
  deps: ServiceDeps,
  ctx: CallContext,
  threadId: string,
  shape: Shape,
  first: ThreadSnapshot,
): Promise<GetResponse> {
  const { folds, now } = deps;
  const started = now();
  const waitUntil = Math.min(
    started + deps.limits.getFoldWaitMs,
    ctx.deadline === undefined
      ? Number.POSITIVE_INFINITY
      : ctx.deadline - answerReserveMs(ctx.deadline - started),
  );
  for (let snap = first; ; ) {
    const s = snap.thread.strategy;
    const view = readStrategy(s, shape.recall);
    if (s.kind !== "summary" || view.kind !== "summary") return respond(deps, snap, shape);
    // Folds follow the thread's strategy, at the size and budget this Get reads with.
    const size = recallSize(view, shape.limit);
    const budget =
      shape.maxTokens ?? (shape.recall === undefined ? undefined : (view.maxTokens ?? 0));
    const tokens = { maxTokens: budget, summary: snap.thread.summary };
    if (planFold(s, snap.messages, snap.thread.summarizedThroughSeq, size, tokens) === undefined) {
      return respond(deps, snap, shape);
    }
    const failure = folds.failure(ctx.namespace, threadId, snap.thread.incarnation);
    if (failure !== undefined) {
      const reason = `summary fold failed (attempt ${failure.attempt}): ${failure.reason}`;
      return respond(deps, snap, shape, reason);
    }
    if (folds.isSlow(ctx.namespace, threadId)) {
      return respond(deps, snap, shape, "summary fold still running: the summariser is slow");
    }
    const remaining = waitUntil - now();
    if (remaining <= 0) {
      folds.markSlow(ctx.namespace, threadId);
      return respond(deps, snap, shape, "summary fold still running when the wait ended");
    }
    await waitForFold(deps, ctx, snap, remaining, () =>
      folds.kick(ctx.namespace, threadId, size, budget),
    );
    const next = await readForGet(deps, ctx.namespace, threadId, shape);
    if (next === undefined) return create(GetResponseSchema, {});
    snap = next.snap;
  }
}

/**
 * Waits up to `remainingMs` for the thread's fold to end (summary updated or
 * failed, or the thread cleared), kicking it unless it moved already.
 */
async function waitForFold(
  deps: ServiceDeps,
  ctx: CallContext,
  snap: ThreadSnapshot,
  remainingMs: number,
  kick: () => void,
): Promise<void> {
  const { threadId, incarnation, summarizedThroughSeq } = snap.thread;
  // Listen first, then look again: a fold that finished between the read
  // above and now (on this replica or another) has already sent its event.
  const stopWaiting = new AbortController();
  const settled = deps.hub.waitFor(
    ctx.namespace,
    threadId,
    (e) =>
      e.type === "summary_updated" ||
      e.type === "summary_failed" ||
      e.type === "thread_cleared" ||
      e.type === "thread_rewound",
    remainingMs,
    AbortSignal.any([ctx.signal, deps.shutdown, stopWaiting.signal]),
  );
  const current = await deps.store.getThread(ctx.namespace, threadId);
  const moved =
    current === undefined ||
    current.incarnation !== incarnation ||
    current.summarizedThroughSeq !== summarizedThroughSeq ||
    current.lastSeq < snap.thread.lastSeq ||
    deps.folds.failure(ctx.namespace, threadId, incarnation) !== undefined;
  if (moved) stopWaiting.abort();
  else kick();
  await settled;
  if (ctx.signal.aborted) throw ctx.signal.reason;
  assertOpen(deps);
}

/**
 * GetRequest.recall, validated as an Add's strategy would be. Its model is
 * not looked up: a read never calls a summariser, so naming one this
 * server lacks is no error here.
 */
function recallFromPb(deps: ServiceDeps, req: GetRequest): Strategy | undefined {
  const draft = strategyDraftFromPb(req.recall);
  if (draft === undefined) return undefined;
  if (draft.kind === undefined) {
    throw invalidArgument("recall", "must set one of buffer, window or summary");
  }
  return resolveStrategy(
    { ...draft, model: "" },
    {
      defaultStrategy: deps.defaultStrategy,
      defaultModel: "",
      hasModel: () => true,
      maxStoredLimit: deps.limits.maxStoredLimit,
      field: "recall",
    },
  );
}

/**
 * The thread as a Get with `limit` needs it: a windowed read (Redis sends
 * only the newest messages), read again in full when the window reached the
 * oldest message read — widening over tool results, or system messages left
 * out, might need older ones. Summary threads always get every unfolded
 * message, which is all their recall and fold planning look at.
 */
async function readForGet(
  deps: ServiceDeps,
  namespace: string,
  threadId: string,
  shape: Shape,
): Promise<GetRead | undefined> {
  // With a recall, the store reads what its size needs, not the thread's.
  const readLimit =
    shape.limit ?? (shape.recall === undefined ? undefined : recallSize(shape.recall, undefined));
  const snap = await deps.store.read(namespace, threadId, { limit: readLimit });
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
  const full = await deps.store.read(namespace, threadId);
  return full === undefined ? undefined : { snap: full, recalled: undefined };
}

/** `recalled`: recallOf(snap, shape, false) when readForGet has it already. */
function respond(
  deps: ServiceDeps,
  snap: ThreadSnapshot,
  shape: Shape,
  degradedReason = "",
  recalled?: Recalled,
): GetResponse {
  if (degradedReason !== "") deps.metrics?.degradedGets.inc();
  const view = readStrategy(snap.thread.strategy, shape.recall);
  // Shaped here, not in recallOf: readForGet compares the plain cut's first message with the thread's.
  const r = shapeRecalled(recalled ?? recallOf(snap, shape, degradedReason !== ""), {
    profile: shape.profile,
    clearing: shape.clearing ?? view.clearToolResults,
    encoding: encodingOf(view),
  });
  const res = create(GetResponseSchema, {
    summary: r.summary,
    thread: threadToPb(snap.thread),
    degraded: degradedReason !== "",
    degradedReason,
    tokens: r.tokens,
    maxTokens: r.maxTokens,
    overBudget: r.overBudget,
    clearedToolResults: r.clearedToolResults,
    clearedToolTokens: r.clearedToolTokens,
  });
  return setMessages(res, r.messages);
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
