import { requestIdReusedError } from "../../core/append.js";
import { MemoryError } from "../../core/errors.js";
import { type ForkPlan, forkTargetExistsError } from "../../core/fork.js";
import { requestsToKeep } from "../../core/idempotency.js";
import { strategyKey } from "../../core/strategy.js";
import type { ForkCommand, ForkResult } from "../store.js";
import { asString, decodeThread, newThreadIncarnation } from "./codec.js";
import { quotaArgs, quotaRefusal, type RedisContext } from "./context.js";
import { unexpectedReply } from "./errors.js";
import type { NamespaceKeys } from "./keys.js";
import { EXPIRE_THREAD } from "./lua/clears.js";
import type { AcknowledgedWrite } from "./replica-confirmation.js";

/**
 * What the two Fork scripts (lua/fork.ts FORK, within a shard, and
 * FORK_COPY, across shards) share on the TypeScript side: their first
 * arguments, the new thread's, the plan fields from the core's decision, and
 * what their replies mean.
 */

/** Attempts before a Fork of a parent that changes under every one gives up. */
export const FORK_ATTEMPTS = 20;

/** What a FORK or FORK_COPY reply means; undefined: run it again (the new id had expired). */
export async function forkOutcome(
  ctx: RedisContext,
  k: NamespaceKeys,
  cmd: ForkCommand,
  reply: unknown[],
  plan: { shared: number; inherited: boolean } | undefined,
  refusal: unknown,
  write: AcknowledgedWrite,
): Promise<ForkResult | undefined> {
  switch (reply[0]) {
    case "ok":
      await write.confirm();
      return {
        thread: decodeThread(reply[1]),
        sharedCount: plan?.shared ?? 0,
        summaryInherited: plan?.inherited ?? false,
        replayed: false,
      };
    case "replayed": {
      await write.confirm();
      const [, shared, inherited] = asString(reply[1]).split("\n");
      return {
        thread: decodeThread(reply[2]),
        sharedCount: Number(shared),
        summaryInherited: inherited === "1",
        replayed: true,
      };
    }
    case "expired":
      await ctx.io.run(
        EXPIRE_THREAD,
        [k.thread(cmd.newThreadId), k.threads, k.events, k.usage],
        [cmd.newThreadId, String(cmd.now), String(ctx.lim.eventRetention)],
        write.link,
      );
      return undefined;
    case "refused":
      throw refusal;
    case "request_id_reused":
      throw requestIdReusedError();
    case "exists":
      throw forkTargetExistsError();
    case "quota":
      throw quotaRefusal(ctx, reply[1], reply[2]);
  }
  throw unexpectedReply("fork", reply[0]);
}

/** The parent changed under every attempt (FORK_ATTEMPTS) of a Fork or an imported fork. */
export function parentChangedError(field: string, what: string): MemoryError {
  return new MemoryError(
    "aborted",
    `${field}: the thread changed under every attempt of the ${what}; retry`,
    { field },
  );
}

/** ARGV 1 to 13 of FORK and FORK_COPY (lua/fork.ts). */
export function forkArgs(ctx: RedisContext, k: NamespaceKeys, cmd: ForkCommand): string[] {
  const lim = ctx.lim;
  const keep = requestsToKeep(cmd.now, lim);
  return [
    cmd.threadId,
    cmd.newThreadId,
    String(cmd.now),
    cmd.requestId,
    cmd.requestHash,
    newThreadIncarnation(),
    String(lim.eventRetention),
    String(lim.idempotencyRetentionMs),
    String(keep.keepNewest),
    String(keep.dropThrough),
    ...quotaArgs(ctx, k),
  ];
}

/** The new thread's summary, labels' JSON, origin's JSON and strategy's JSON ("" each when refused). */
export function threadArgs(t: ForkPlan["thread"] | undefined): string[] {
  return [
    t?.summary ?? "",
    t?.labels === undefined ? "" : JSON.stringify(t.labels),
    t?.parent === undefined ? "" : JSON.stringify(t.parent),
    t === undefined ? "" : JSON.stringify(t.strategy),
  ];
}

/** The plan fields FORK and FORK_COPY share, from the core's decision. */
export function decidedFields(decided: ForkPlan, shared: number, inherited: boolean): object {
  const t = decided.thread;
  const s = t.strategy;
  return {
    key: strategyKey(s),
    kind: s.kind,
    max_stored: s.maxStored,
    exclude: s.excludeSystem ? "1" : "0",
    last_seq: t.lastSeq,
    through: t.summarizedThroughSeq,
    summary_time: t.summaryTime,
    ttl: t.ttlMs ?? 0,
    at_seq: decided.atSeq,
    shared,
    inherited,
  };
}
