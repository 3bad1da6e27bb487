import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import {
  type ForkRequest,
  type ForkResponse,
  ForkResponseSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { invalidArgument } from "../core/errors.js";
import { strategyKey } from "../core/strategy.js";
import type { Labels, Strategy } from "../core/types.js";
import type { CallContext } from "./context.js";
import {
  MAX_REQUEST_ID_BYTES,
  safeNumber,
  strategyDraftFromPb,
  threadIdFrom,
  threadToPb,
  ttlMsFromPb,
} from "./convert.js";
import { assertOpen, maybeKick, resolveAddStrategy, type ServiceDeps } from "./deps.js";
import { labelsFrom } from "./labels.js";

/** A Fork as checked and decoded (docs/forks.md 1.3, in that order). */
interface DecodedFork {
  threadId: string;
  newThreadId: string;
  atSeq: number | undefined;
  expectedLastSeq: number | undefined;
  strategy: Strategy | undefined;
  labels: Labels | undefined;
  ttlMs: number | undefined;
}

function decodeFork(deps: ServiceDeps, req: ForkRequest): DecodedFork {
  const threadId = threadIdFrom(req.threadId);
  // Checked before the empty test so a malformed id gets Add's wording; an
  // empty one must not fall back to "default" as thread_id does.
  const newThreadId = threadIdFrom(req.newThreadId, "new_thread_id");
  if (req.newThreadId === "") throw invalidArgument("new_thread_id", "is required");
  if (newThreadId === threadId) {
    throw invalidArgument("new_thread_id", "must differ from thread_id");
  }
  if (Buffer.byteLength(req.requestId, "utf8") > MAX_REQUEST_ID_BYTES) {
    throw invalidArgument("request_id", `must be at most ${MAX_REQUEST_ID_BYTES} bytes`);
  }
  const atSeq = req.atSeq === undefined ? undefined : safeNumber(req.atSeq, "at_seq");
  const expectedLastSeq =
    req.expectedLastSeq === undefined
      ? undefined
      : safeNumber(req.expectedLastSeq, "expected_last_seq");
  const draft = strategyDraftFromPb(req.strategy);
  const strategy = draft === undefined ? undefined : resolveAddStrategy(deps, draft);
  const labels = labelsFrom(req.labels, "labels");
  const ttlMs = req.ttl === undefined ? undefined : ttlMsFromPb(req.ttl, "ttl");
  return { threadId, newThreadId, atSeq, expectedLastSeq, strategy, labels, ttlMs };
}

/**
 * Digest of what a Fork asks for (docs/forks.md 1.2): everything but
 * request_id and new_thread_id, whose record it is. Unset fields hash as
 * null, so "the parent's" never equals a value given explicitly.
 */
function forkRequestHash(f: DecodedFork): string {
  return createHash("sha256")
    .update(
      JSON.stringify([
        "fork",
        f.threadId,
        f.atSeq ?? null,
        f.expectedLastSeq ?? null,
        f.strategy === undefined ? null : strategyKey(f.strategy),
        f.labels === undefined ? null : Object.entries(f.labels).sort(),
        f.ttlMs ?? null,
      ]),
    )
    .digest("base64url");
}

/**
 * MemoryService.Fork: a new thread holding the parent's messages up to
 * at_seq (the store decides and writes atomically: core/fork.ts,
 * core/lineage.ts). A summary fork whose summary was not inherited has
 * messages to fold anew, so the scheduler is told to look, as after an Add.
 */
export async function fork(
  deps: ServiceDeps,
  req: ForkRequest,
  ctx: CallContext,
): Promise<ForkResponse> {
  assertOpen(deps);
  const f = decodeFork(deps, req);
  const result = await deps.store.fork({
    namespace: ctx.namespace,
    threadId: f.threadId,
    newThreadId: f.newThreadId,
    atSeq: f.atSeq,
    expectedLastSeq: f.expectedLastSeq,
    strategy: f.strategy,
    labels: f.labels,
    ttlMs: f.ttlMs,
    requestId: req.requestId,
    requestHash: req.requestId === "" ? "" : forkRequestHash(f),
    now: deps.now(),
    ...(ctx.deadline === undefined ? {} : { deadline: ctx.deadline }),
  });
  if (!result.replayed) maybeKick(deps, ctx.namespace, result.thread);
  return create(ForkResponseSchema, {
    thread: threadToPb(result.thread),
    sharedCount: result.sharedCount,
    summaryInherited: result.summaryInherited,
  });
}
