import { requestIdReusedError } from "../../core/append.js";
import { type ErrorCode, MemoryError } from "../../core/errors.js";
import { requestsToKeep } from "../../core/idempotency.js";
import { decideRewind } from "../../core/rewind.js";
import type { RewindCommand, RewindResult } from "../store.js";
import { asArray, asString, decodeRewindResult, decodeThread } from "./codec.js";
import { beginWrite, type RedisContext, refuseLate } from "./context.js";
import { unexpectedReply } from "./errors.js";
import { REWIND } from "./lua/rewind.js";

/**
 * Store.rewind: one script (lua/rewind.ts) decides as core/rewind.ts
 * decideRewind and applies the plan atomically, sharing the request-id
 * records with Add. With options.minReplicas, acknowledged only once a
 * WAIT confirms it, like an Add.
 */

/** The code of each refusal the script can answer (lua/rewind.ts decide_rewind). */
export const REWIND_REFUSALS: Readonly<Record<string, ErrorCode>> = {
  not_found: "not_found",
  last_seq_mismatch: "aborted",
  out_of_range: "out_of_range",
  trimmed: "failed_precondition",
  summary_holds: "failed_precondition",
};

export async function rewind(ctx: RedisContext, cmd: RewindCommand): Promise<RewindResult> {
  const k = ctx.keys.forThread(cmd.namespace, cmd.threadId);
  const id = cmd.threadId;
  const write = ctx.replicas === undefined ? ctx.unconfirmed : await beginWrite(ctx, k);
  refuseLate(cmd.deadline, "Rewind");
  const keep = requestsToKeep(cmd.now, ctx.lim);
  const reply = await ctx.io.run(
    REWIND,
    [
      k.thread(id),
      k.messages(id),
      k.requests(id),
      k.requestTimes(id),
      k.lease(id),
      k.events,
      k.usage,
    ],
    [
      id,
      String(cmd.now),
      cmd.requestId,
      cmd.requestHash,
      String(cmd.toSeq),
      cmd.expectedLastSeq === undefined ? "" : String(cmd.expectedLastSeq),
      String(ctx.lim.eventRetention),
      String(ctx.lim.idempotencyRetentionMs),
      String(keep.keepNewest),
      String(keep.dropThrough),
    ],
    write.link,
  );
  const [status, value] = asArray(reply);
  switch (status) {
    case "ok":
    case "replayed":
      // A replay too: the first attempt may not have reached the replicas.
      await write.confirm();
      return decodeRewindResult(asString(value), status === "replayed");
    case "request_id_reused":
      throw requestIdReusedError();
    case "refused":
      throw rewindRefusal(cmd, reply);
  }
  throw unexpectedReply("rewind", status);
}

/**
 * The error of a refused Rewind, in the core's words: decideRewind run on
 * the state the script refused on. The script decided; should the core
 * not refuse the same way, that is a bug in one of them, reported as such.
 */
export function rewindRefusal(cmd: RewindCommand, reply: unknown): Error {
  const [, decision, thread, oldest] = asArray(reply);
  const code = REWIND_REFUSALS[asString(decision)];
  const fields = asArray(thread);
  const oldestSeq = Number(asString(oldest));
  try {
    decideRewind(
      fields.length === 0 ? undefined : decodeThread(fields),
      oldestSeq === 0 ? undefined : oldestSeq,
      cmd,
    );
  } catch (err) {
    if (err instanceof MemoryError && err.code === code) return err;
  }
  return new Error(
    `redis store: the rewind script refused (${String(decision)}) where core/rewind.ts does not agree`,
  );
}
