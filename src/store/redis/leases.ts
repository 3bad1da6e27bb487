import type { ThreadState } from "../../core/types.js";
import type { CommitSummaryCommand, FoldFailureCommand } from "../store.js";
import { decodeThread } from "./codec.js";
import type { RedisContext } from "./context.js";
import { ACQUIRE_LEASE, COMMIT_SUMMARY, RECORD_FOLD_FAILURE, RELEASE_LEASE } from "./lua/folds.js";

/**
 * The Redis store's FoldStore: fold leases (a string with a TTL holding the
 * fencing token, from a per-namespace counter never reset) and the summary
 * commit with its incarnation, coverage and fencing checks, each one
 * script. Summary commits, leases and failure records are not waited for
 * by replicas (options.minReplicas): a summary lost in a failover is folded
 * again from the messages.
 */

export async function commitSummary(
  ctx: RedisContext,
  cmd: CommitSummaryCommand,
): Promise<ThreadState | undefined> {
  const k = ctx.keys.forThread(cmd.namespace, cmd.threadId);
  const id = cmd.threadId;
  const reply = await ctx.io.run(
    COMMIT_SUMMARY,
    [k.thread(id), k.messages(id), k.lease(id), k.events, k.usage],
    [
      cmd.incarnation,
      String(cmd.leaseToken),
      String(cmd.fromSeq),
      String(cmd.throughSeq),
      cmd.summary,
      String(cmd.foldedCount),
      String(cmd.now),
      String(ctx.lim.eventRetention),
      id,
    ],
  );
  return reply === null ? undefined : decodeThread(reply);
}

export async function recordFoldFailure(ctx: RedisContext, cmd: FoldFailureCommand): Promise<void> {
  const k = ctx.keys.forThread(cmd.namespace, cmd.threadId);
  await ctx.io.run(
    RECORD_FOLD_FAILURE,
    [k.thread(cmd.threadId), k.events],
    [
      cmd.incarnation,
      cmd.reason,
      String(cmd.attempt),
      String(cmd.now),
      String(ctx.lim.eventRetention),
      cmd.threadId,
    ],
  );
}

export async function acquireFoldLease(
  ctx: RedisContext,
  namespace: string,
  threadId: string,
  ttlMs: number,
): Promise<number | undefined> {
  const k = ctx.keys.forThread(namespace, threadId);
  const reply = await ctx.io.run(
    ACQUIRE_LEASE,
    [k.lease(threadId), k.leaseSeq],
    [String(Math.max(1, Math.ceil(ttlMs)))],
  );
  return reply === null ? undefined : Number(reply);
}

export async function releaseFoldLease(
  ctx: RedisContext,
  namespace: string,
  threadId: string,
  token: number,
): Promise<void> {
  await ctx.io.run(
    RELEASE_LEASE,
    [ctx.keys.forThread(namespace, threadId).lease(threadId)],
    [String(token)],
  );
}
