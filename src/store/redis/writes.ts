import {
  lastSeqMismatchError,
  requestIdReusedError,
  strategyMismatchError,
} from "../../core/append.js";
import { requestsToKeep } from "../../core/idempotency.js";
import { messageBytes } from "../../core/quota.js";
import { strategyKey } from "../../core/strategy.js";
import type { StoredMessage } from "../../core/types.js";
import type { AppendCommand, AppendResult, ImportThreadCommand } from "../store.js";
import {
  asArray,
  asString,
  decodeResult,
  encodeMessage,
  newThreadIncarnation,
  strategyArgs,
} from "./codec.js";
import type { RedisConnection } from "./connection.js";
import {
  beginWrite,
  quotaArgs,
  quotaRefusal,
  type RedisContext,
  refuseLate,
  sameShard,
} from "./context.js";
import { unexpectedReply } from "./errors.js";
import { importFork } from "./forks.js";
import { importCopiedFork } from "./forks-across-shards.js";
import type { NamespaceKeys } from "./keys.js";
import { APPEND } from "./lua/append.js";
import { EXPIRE_THREAD } from "./lua/clears.js";
import { IMPORT_THREAD } from "./lua/import.js";
import type { AcknowledgedWrite } from "./replica-confirmation.js";

/**
 * The Redis store's Add and import: each one script (lua/append.ts,
 * lua/import.ts; an import sharing its parent's prefix is forks.ts
 * importFork's), so the checks, the write, the trim, the request record
 * and the event are one atomic step on the server and one round trip.
 * With options.minReplicas, acknowledged only once a WAIT confirms it.
 */

export async function append(ctx: RedisContext, cmd: AppendCommand): Promise<AppendResult> {
  const k = ctx.keys.forThread(cmd.namespace, cmd.threadId);
  const id = cmd.threadId;
  const write = ctx.replicas === undefined ? ctx.unconfirmed : await beginWrite(ctx, k);
  refuseLate(cmd.deadline, "Add");
  if ((cmd.ttlMs ?? 0) > 0 || (cmd.defaultTtlMs ?? 0) > 0) {
    await noteTtlNamespace(ctx, cmd.namespace, write);
  }
  let reply = await appendOnce(ctx, k, cmd, write.link);
  if (asArray(reply)[0] === "expired") {
    // Removed (with its event) in its own atomic step, then the Add goes to a new thread.
    await ctx.io.run(
      EXPIRE_THREAD,
      [k.thread(id), k.threads, k.events, k.usage],
      [id, String(cmd.now), String(ctx.lim.eventRetention)],
      write.link,
    );
    reply = await appendOnce(ctx, k, cmd, write.link);
  }
  const [status, value] = asArray(reply);
  switch (status) {
    case "ok":
      await write.confirm();
      return decodeResult(asString(value), false);
    case "replayed":
      // The first attempt may not have reached the replicas (its WAIT fell short).
      await write.confirm();
      return decodeResult(asString(value), true);
  }
  throw appendRefusal(ctx, cmd, reply);
}

/**
 * Adds the namespace to the set the TTL sweep walks (keys.ts), before the
 * write that sets a ttl. On one primary it goes on the write's own session
 * (one WAIT confirms both); on a cluster the set has a slot of its own,
 * maybe on another primary, so it gets that primary's session and WAIT.
 */
export async function noteTtlNamespace(
  ctx: RedisContext,
  namespace: string,
  write: AcknowledgedWrite,
): Promise<void> {
  const sadd = ["SADD", ctx.keys.ttlNamespaces, namespace];
  if (!ctx.keys.clustered) {
    await ctx.io.command(sadd, write.link);
    return;
  }
  const own = await beginWrite(ctx, {
    base: ctx.keys.ttlNamespaces,
    replicationFence: ctx.keys.ttlFence,
  });
  await ctx.io.command(sadd, own.link);
  await own.confirm();
}

/** The error of an APPEND reply that refused the Add. */
function appendRefusal(ctx: RedisContext, cmd: AppendCommand, reply: unknown): Error {
  const [status, value] = asArray(reply);
  switch (status) {
    case "request_id_reused":
      return requestIdReusedError();
    case "last_seq_mismatch":
      return lastSeqMismatchError(Number(asString(value)), cmd.expectedLastSeq ?? 0);
    case "strategy_mismatch":
      if (cmd.strategy === undefined) break;
      return strategyMismatchError(asString(value), strategyKey(cmd.strategy));
    case "quota": {
      const [, quota, limit] = asArray(reply);
      return quotaRefusal(ctx, quota, limit);
    }
  }
  return unexpectedReply("append", status);
}

/** One APPEND call (see lua/append.ts for its arguments and replies). */
function appendOnce(
  ctx: RedisContext,
  k: NamespaceKeys,
  cmd: AppendCommand,
  via: RedisConnection,
): Promise<unknown> {
  const id = cmd.threadId;
  const lim = ctx.lim;
  const keep = requestsToKeep(cmd.now, lim);
  return ctx.io.run(
    APPEND,
    [
      k.thread(id),
      k.messages(id),
      k.requests(id),
      k.requestTimes(id),
      k.threads,
      k.events,
      k.usage,
    ],
    [
      id,
      String(cmd.now),
      cmd.requestId,
      cmd.requestHash,
      cmd.expectedLastSeq === undefined ? "" : String(cmd.expectedLastSeq),
      cmd.replaceStrategy ? "1" : "0",
      newThreadIncarnation(),
      String(lim.eventRetention),
      String(lim.idempotencyRetentionMs),
      String(keep.keepNewest),
      String(keep.dropThrough),
      ...strategyArgs(cmd.strategy),
      ...strategyArgs(cmd.defaultStrategy),
      ...quotaArgs(ctx, k),
      cmd.labels === undefined ? "" : JSON.stringify(cmd.labels),
      cmd.ttlMs === undefined ? "" : String(cmd.ttlMs),
      String(cmd.defaultTtlMs ?? 0),
      ...cmd.messages.map((m) => `${messageBytes(m)} ${encodeMessage(m, cmd.now)}`),
    ],
    via,
  );
}

/** Store.importThread: the whole thread in one IMPORT_THREAD script, or one IMPORT_FORK with shareFrom. */
export async function importThread(ctx: RedisContext, cmd: ImportThreadCommand): Promise<boolean> {
  const k = ctx.keys.forThread(cmd.namespace, cmd.threadId);
  // A fork's prefix is shared only within one shard; across shards it is copied whole.
  const share = cmd.shareFrom;
  if (share !== undefined) {
    if (sameShard(ctx, cmd.namespace, cmd.threadId, share.threadId)) {
      return importFork(ctx, cmd, share);
    }
    return importThread(ctx, await importCopiedFork(ctx, cmd, share));
  }
  const id = cmd.threadId;
  const write = await beginImport(ctx, cmd);
  const { entries, bytes } = importEntries(cmd.messages);
  const reply = await ctx.io.run(
    IMPORT_THREAD,
    [k.thread(id), k.messages(id), k.threads, k.events, k.usage],
    [...importArgs(ctx, k, cmd, bytes, cmd.messages[0]?.seq ?? 0), ...entries],
    write.link,
  );
  return importOutcome(ctx, reply, write);
}

/** An import's write session; the namespace is noted for the TTL sweep first when it sets a ttl. */
export async function beginImport(
  ctx: RedisContext,
  cmd: ImportThreadCommand,
): Promise<AcknowledgedWrite> {
  const k = ctx.keys.forThread(cmd.namespace, cmd.threadId);
  const write = ctx.replicas === undefined ? ctx.unconfirmed : await beginWrite(ctx, k);
  if (importTtl(cmd) !== undefined) await noteTtlNamespace(ctx, cmd.namespace, write);
  return write;
}

/** The retention an import writes: both the ttl and the expire time, or neither. */
function importTtl(cmd: ImportThreadCommand): { ttlMs: number; expireTime: number } | undefined {
  return cmd.ttlMs === undefined || cmd.expireTime === undefined
    ? undefined
    : { ttlMs: cmd.ttlMs, expireTime: cmd.expireTime };
}

/** The messages as lua/import.ts entries "<seq> <bytes> <json>", and their bytes. */
export function importEntries(messages: StoredMessage[]): { entries: string[]; bytes: number } {
  let bytes = 0;
  const entries = messages.map((m) => {
    const b = messageBytes(m);
    bytes += b;
    return `${m.seq} ${b} ${encodeMessage(m, m.createTime)}`;
  });
  return { entries, bytes };
}

/** ARGV 1 to 24 of both import scripts (lua/import.ts IMPORT_THREAD). */
export function importArgs(
  ctx: RedisContext,
  k: NamespaceKeys,
  cmd: ImportThreadCommand,
  bytes: number,
  firstSeq: number,
): string[] {
  const lim = ctx.lim;
  const ttl = importTtl(cmd);
  return [
    cmd.threadId,
    newThreadIncarnation(),
    ...strategyArgs(cmd.strategy),
    String(cmd.lastSeq),
    String(cmd.summarizedThroughSeq),
    cmd.summary,
    String(cmd.summaryTime),
    String(cmd.createTime),
    String(cmd.updateTime),
    String(cmd.now),
    String(lim.eventRetention),
    ...quotaArgs(ctx, k),
    String(bytes),
    String(firstSeq),
    cmd.labels === undefined ? "" : JSON.stringify(cmd.labels),
    ttl === undefined ? "" : String(ttl.ttlMs),
    ttl === undefined ? "" : String(ttl.expireTime),
    cmd.parent === undefined ? "" : JSON.stringify(cmd.parent),
  ];
}

/** What an import script's final reply means: written, or there already (both confirmed), or a quota's refusal. */
export async function importOutcome(
  ctx: RedisContext,
  reply: unknown,
  write: AcknowledgedWrite,
): Promise<boolean> {
  const [status, quota, limit] = asArray(reply);
  switch (status) {
    case "ok":
      await write.confirm();
      return true;
    case "exists":
      await write.confirm();
      return false;
    case "quota":
      throw quotaRefusal(ctx, quota, limit);
  }
  throw unexpectedReply("import", status);
}
