import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import {
  type RewindRequest,
  type RewindResponse,
  RewindResponseSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { invalidArgument } from "../core/errors.js";
import type { CallContext } from "./context.js";
import { MAX_REQUEST_ID_BYTES, safeNumber, threadIdFrom, threadToPb } from "./convert.js";
import { assertOpen, maybeKick, type ServiceDeps } from "./deps.js";

/**
 * MemoryService.Rewind: drops the thread's messages after to_seq (the store
 * decides and writes atomically: core/rewind.ts). A dropped summary leaves
 * the remaining messages to fold again, so the scheduler is told to look.
 */
export async function rewind(
  deps: ServiceDeps,
  req: RewindRequest,
  ctx: CallContext,
): Promise<RewindResponse> {
  assertOpen(deps);
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
  const result = await deps.store.rewind({
    namespace: ctx.namespace,
    threadId,
    toSeq,
    expectedLastSeq,
    requestId: req.requestId,
    requestHash: hash,
    now: deps.now(),
    ...(ctx.deadline === undefined ? {} : { deadline: ctx.deadline }),
  });
  if (!result.replayed && result.summaryDropped) {
    deps.folds.forget(ctx.namespace, threadId);
    maybeKick(deps, ctx.namespace, result.thread);
  }
  return create(RewindResponseSchema, {
    thread: threadToPb(result.thread),
    removedCount: result.removedCount,
    summaryDropped: result.summaryDropped,
  });
}
