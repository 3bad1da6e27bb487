import { createHash } from "node:crypto";
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { create } from "@bufbuild/protobuf";
import {
  type AddRequest,
  type AddResponse,
  AddResponseSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { lastSeqMismatchError } from "../core/append.js";
import { invalidArgument, MemoryError } from "../core/errors.js";
import { encodingOf, strategyKey } from "../core/strategy.js";
import { countMessageTokensSliced, DEFAULT_TOKEN_ENCODING } from "../core/tokens.js";
import type { ChatMessage, Labels, Strategy } from "../core/types.js";
import type { AppendResult } from "../store/store.js";
import type { CallContext } from "./context.js";
import {
  MAX_REQUEST_ID_BYTES,
  messageFromPb,
  safeNumber,
  strategyDraftFromPb,
  threadIdFrom,
  threadToPb,
  ttlMsFromPb,
} from "./convert.js";
import { assertOpen, maybeKick, resolveAddStrategy, type ServiceDeps } from "./deps.js";
import { labelsFrom } from "./labels.js";

/** An Add as checked and decoded, before anything is counted or stored. */
interface DecodedAdd {
  threadId: string;
  messages: ChatMessage[];
  labels: Labels | undefined;
  ttlMs: number | undefined;
  strategy: Strategy | undefined;
  expectedLastSeq: number | undefined;
}

/** Checks an AddRequest and decodes it; invalid_argument names the field at fault. */
function decodeAdd(deps: ServiceDeps, req: AddRequest): DecodedAdd {
  const { maxMessagesPerAdd } = deps.limits;
  const threadId = threadIdFrom(req.threadId);
  if (req.messages.length > maxMessagesPerAdd) {
    throw invalidArgument(
      "messages",
      `at most ${maxMessagesPerAdd} messages per Add (got ${req.messages.length})`,
    );
  }
  if (Buffer.byteLength(req.requestId, "utf8") > MAX_REQUEST_ID_BYTES) {
    throw invalidArgument("request_id", `must be at most ${MAX_REQUEST_ID_BYTES} bytes`);
  }
  const messages = req.messages.map((m, i) => messageFromPb(m, () => `messages[${i}]`));
  const labels = labelsFrom(req.labels, "labels");
  const ttlMs = req.ttl === undefined ? undefined : ttlMsFromPb(req.ttl, "ttl");
  const draft = strategyDraftFromPb(req.strategy);
  const strategy = draft === undefined ? undefined : resolveAddStrategy(deps, draft);
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
  return { threadId, messages, labels, ttlMs, strategy, expectedLastSeq };
}

/** MemoryService.Add: checks, counts tokens, appends (the store decides atomically). */
export async function add(
  deps: ServiceDeps,
  req: AddRequest,
  ctx: CallContext,
): Promise<AddResponse> {
  assertOpen(deps);
  const a = decodeAdd(deps, req);
  const asksNothing = a.labels === undefined && a.ttlMs === undefined && a.messages.length === 0;
  if (asksNothing && a.strategy === undefined) {
    return emptyAdd(deps, ctx.namespace, a.threadId, a.expectedLastSeq);
  }
  // Hashed before the counts are added, so a retry's hash matches whatever counted it.
  const hash = req.requestId === "" ? "" : requestHash(a, req.replaceStrategy, req.keepStrategy);
  await countTokens(deps, a.messages, a.strategy ?? deps.defaultStrategy, ctx);
  const append = (given: Strategy | undefined) =>
    deps.store.append({
      namespace: ctx.namespace,
      threadId: a.threadId,
      messages: a.messages,
      strategy: given,
      defaultStrategy: deps.defaultStrategy,
      replaceStrategy: req.replaceStrategy,
      requestId: req.requestId,
      requestHash: hash,
      expectedLastSeq: a.expectedLastSeq,
      now: deps.now(),
      ...(a.labels === undefined ? {} : { labels: a.labels }),
      ...(a.ttlMs === undefined ? {} : { ttlMs: a.ttlMs }),
      defaultTtlMs: deps.limits.defaultTtlMs,
      ...(ctx.deadline === undefined ? {} : { deadline: ctx.deadline }),
    });
  let result: AppendResult;
  try {
    result = await append(a.strategy);
  } catch (err) {
    // keep_strategy: the thread exists with another strategy, so the Add
    // goes in without one. Retried rather than checked first, because the
    // store decides atomically; the refused attempt stored nothing.
    if (!(req.keepStrategy && isStrategyMismatch(err))) throw err;
    // Without its strategy such an Add asks for nothing: answer as an empty
    // Add does, rather than create a thread should it be cleared meanwhile.
    if (asksNothing) return emptyAdd(deps, ctx.namespace, a.threadId, a.expectedLastSeq);
    result = await append(undefined);
  }
  if (!result.replayed) maybeKick(deps, ctx.namespace, result.thread);
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
  deps: ServiceDeps,
  messages: ChatMessage[],
  strategy: Strategy,
  ctx: CallContext,
): Promise<void> {
  const encoding = encodingOf(strategy);
  // Between slices: stop for a cancelled call or a shutdown before storing
  // anything. The call's signal is read only here: making it costs a timer,
  // and most Adds are counted in one slice.
  const pause = async (): Promise<void> => {
    await yieldToEventLoop();
    const { signal } = ctx;
    if (signal.aborted) throw signal.reason;
    assertOpen(deps);
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
  deps: ServiceDeps,
  namespace: string,
  threadId: string,
  expectedLastSeq: number | undefined,
): Promise<AddResponse> {
  const thread = await deps.store.getThread(namespace, threadId);
  const lastSeq = thread?.lastSeq ?? 0;
  if (expectedLastSeq !== undefined && expectedLastSeq !== lastSeq) {
    throw lastSeqMismatchError(lastSeq, expectedLastSeq);
  }
  return create(AddResponseSchema, thread === undefined ? {} : { thread: threadToPb(thread) });
}

/** Digest of what an Add asks for, to tell a retry from another request with the same id. */
function requestHash(a: DecodedAdd, replace: boolean, keepStrategy: boolean): string {
  const canonical = a.messages.map((m) => ({
    ...m,
    metadata: m.metadata === undefined ? undefined : Object.entries(m.metadata).sort(),
  }));
  return createHash("sha256")
    .update(
      JSON.stringify([
        canonical,
        a.strategy === undefined ? null : strategyKey(a.strategy),
        replace,
        a.expectedLastSeq ?? null,
        // Only when given, so the digests of Adds without labels stay as they were.
        ...(a.labels === undefined ? [] : [Object.entries(a.labels).sort()]),
        ...(a.ttlMs === undefined ? [] : [{ ttlMs: a.ttlMs }]),
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
