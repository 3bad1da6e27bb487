import { MemoryError } from "../../core/errors.js";
import { type QuotaName, quotaExceededError } from "../../core/quota.js";
import type { StoreLimits } from "../store.js";
import { asString, type DecodedMessages } from "./codec.js";
import type { Commands } from "./commands.js";
import { storeError } from "./errors.js";
import type { Incarnation } from "./incarnation.js";
import type { KeyLayout, NamespaceKeys } from "./keys.js";
import type { ReadTails } from "./reads.js";
import type { AcknowledgedWrite, ReplicaConfirmation } from "./replica-confirmation.js";

/** What the Redis store's reads, writes, leases and event log share (index.ts wires it). */
export interface RedisContext {
  readonly io: Commands;
  readonly keys: KeyLayout;
  readonly lim: StoreLimits;
  readonly decoded: DecodedMessages;
  /** The size of each thread's next tail read (reads.ts). */
  readonly readTails: ReadTails;
  readonly incarnation: Incarnation;
  /** Set when replicas must confirm an Add, import, Rewind or Clear (options.minReplicas). */
  readonly replicas: ReplicaConfirmation | undefined;
  /** Where a write goes when no replica must confirm it: the main connection. */
  readonly unconfirmed: AcknowledgedWrite;
}

/**
 * Where an Add, import, Rewind or Clear goes when replicas must confirm it
 * (a session one WAIT confirms). Callers use `ctx.unconfirmed` without
 * awaiting when ctx.replicas is unset, so the write is queued in the call.
 */
export async function beginWrite(
  ctx: RedisContext,
  k: Pick<NamespaceKeys, "base" | "replicationFence">,
): Promise<AcknowledgedWrite> {
  if (ctx.replicas === undefined) return ctx.unconfirmed;
  try {
    return await ctx.replicas.begin(k.base, k.replicationFence);
  } catch (err) {
    throw storeError(err, ctx.io.target);
  }
}

/**
 * Refuses a write whose caller has given up (its deadline passed before
 * the write reached Redis): stored now, it would be one the caller was told
 * had failed.
 */
export function refuseLate(deadline: number | undefined, what: string): void {
  if (deadline !== undefined && Date.now() >= deadline) {
    throw new MemoryError(
      "deadline_exceeded",
      `the call's deadline passed before the ${what} reached Redis; nothing was stored`,
    );
  }
}

/**
 * With options.minReplicas: resolves once enough replicas hold everything
 * the namespace's primary held when this is called (one INCR of the fence
 * and a WAIT on the write session, coalesced with the writes' WAITs), so a
 * Watch never sees an event, or gets a token past one, that a failover to
 * a replica could take back. Without it, at once. A reader calls it after
 * its read's reply came: the events read are then before the fence.
 */
export async function confirmRead(
  ctx: RedisContext,
  k: Pick<NamespaceKeys, "base" | "replicationFence">,
): Promise<void> {
  if (ctx.replicas === undefined) return;
  try {
    const session = await beginWrite(ctx, k);
    await session.confirm();
  } catch (err) {
    if (!(err instanceof MemoryError) || err.code !== "unavailable") throw err;
    throw new MemoryError(
      "unavailable",
      "the Redis replicas required (--redis-min-replicas) did not confirm the events read, which a failover could take back; retry from the same resume token",
      { cause: err },
    );
  }
}

/**
 * The namespace quotas (threads, messages, bytes; "0": none) as the
 * scripts of shard `k` enforce them. A sharded namespace (keys.ts) keeps
 * a usage hash per shard, and a script sees only its own shard, so each
 * shard enforces its share of every limit: floor(limit / N), one more for
 * the first limit mod N shards. The shares add up to the limit exactly, so
 * the namespace never holds more than its limit; it may refuse before the
 * limit when its threads are unevenly spread (config.ts asks every limit
 * to be at least N, so no share is 0, which the scripts read as "none").
 */
export function quotaArgs(ctx: RedisContext, k: Pick<NamespaceKeys, "shard">): string[] {
  const { lim } = ctx;
  const n = ctx.keys.shards;
  const share = (limit: number) =>
    n === 1 || limit === 0
      ? String(limit)
      : String(Math.floor(limit / n) + (k.shard < limit % n ? 1 : 0));
  return [
    share(lim.maxThreadsPerNamespace),
    share(lim.maxMessagesPerNamespace),
    share(lim.maxBytesPerNamespace),
  ];
}

/** The error of a script's quota refusal ({"quota", name, the share it enforced}). */
export function quotaRefusal(ctx: RedisContext, name: unknown, share: unknown): MemoryError {
  const quota = asString(name) as QuotaName;
  const n = ctx.keys.shards;
  if (n === 1) return quotaExceededError(quota, Number(asString(share)));
  const limit = {
    max_threads_per_namespace: ctx.lim.maxThreadsPerNamespace,
    max_messages_per_namespace: ctx.lim.maxMessagesPerNamespace,
    max_bytes_per_namespace: ctx.lim.maxBytesPerNamespace,
  }[quota];
  return new MemoryError(
    "resource_exhausted",
    `namespace quota ${quota} (${limit}) reached in this thread's shard, which holds its share (${asString(share)}) of the namespace's ${n} shards (--redis-namespace-shards); nothing was stored: clear threads to make room`,
  );
}

/** Whether two threads of a namespace are in one shard (always, unsharded). */
export function sameShard(ctx: RedisContext, namespace: string, a: string, b: string): boolean {
  return ctx.keys.forThread(namespace, a).shard === ctx.keys.forThread(namespace, b).shard;
}
