import type { ForkPlan, ImportShare } from "../../core/fork.js";
import { checkImportShare, decideFork, forkTrimCount } from "../../core/fork.js";
import type { StoredMessage } from "../../core/types.js";
import type { ForkCommand, ForkResult, ImportThreadCommand, ThreadSnapshot } from "../store.js";
import { asArray } from "./codec.js";
import type { RedisConnection } from "./connection.js";
import { beginWrite, type RedisContext, refuseLate } from "./context.js";
import {
  decidedFields,
  FORK_ATTEMPTS,
  forkArgs,
  forkOutcome,
  parentChangedError,
  threadArgs,
} from "./fork-calls.js";
import type { NamespaceKeys } from "./keys.js";
import { FORK_COPY } from "./lua/fork.js";
import { readThread } from "./reads.js";
import { importEntries, noteTtlNamespace } from "./writes.js";

/**
 * Forks and imported forks whose parent is in another shard of a sharded
 * namespace (keys.ts): no script may touch two slots, so nothing is shared;
 * the parent is read in one atomic READ and the fork written with copies.
 * Within one shard, forks.ts shares segments as on an unsharded namespace.
 */

/**
 * Store.fork across shards of a sharded namespace (keys.ts): the parent is
 * read whole in one READ (an atomic snapshot in its shard; an expired one
 * is not there), the core decides on that snapshot exactly as for a shared
 * fork (decideFork, forkTrimCount), and one FORK_COPY script (lua/fork.ts)
 * writes the fork with copies of the messages it keeps, in its own shard.
 * The Fork is linearized at the read: a parent that changes after it does
 * not change the fork. It costs what a read of the parent and an import of
 * its messages cost (no segment is shared across shards).
 */
export async function forkAcrossShards(ctx: RedisContext, cmd: ForkCommand): Promise<ForkResult> {
  const k = ctx.keys.forThread(cmd.namespace, cmd.newThreadId);
  const write = ctx.replicas === undefined ? ctx.unconfirmed : await beginWrite(ctx, k);
  refuseLate(cmd.deadline, "Fork");
  if ((cmd.ttlMs ?? 0) > 0) await noteTtlNamespace(ctx, cmd.namespace, write);
  for (let attempt = 0; attempt < FORK_ATTEMPTS; attempt++) {
    const snapshot = await readThread(ctx, cmd.namespace, cmd.threadId);
    let plan: CopiedFork | undefined;
    let refusal: unknown;
    try {
      plan = planCopiedFork(snapshot, cmd);
    } catch (err) {
      refusal = err;
    }
    const reply = asArray(await forkCopyOnce(ctx, k, cmd, plan, write.link));
    const done = await forkOutcome(ctx, k, cmd, reply, plan, refusal, write);
    if (done !== undefined) return done;
  }
  throw parentChangedError("new_thread_id", "Fork");
}

/** What FORK_COPY writes: the core's decision and the messages copied. */
interface CopiedFork {
  decided: ForkPlan;
  copied: StoredMessage[];
  shared: number;
  inherited: boolean;
}

/** The core's decisions for a Fork of the parent snapshot; throws the core's refusals. */
function planCopiedFork(snapshot: ThreadSnapshot | undefined, cmd: ForkCommand): CopiedFork {
  const state = snapshot?.thread;
  const messages = snapshot?.messages ?? [];
  const lastSeq = state?.lastSeq ?? 0;
  const floor = messages[0]?.seq ?? lastSeq + 1;
  const decided = decideFork(state, floor > lastSeq ? undefined : floor, { ...cmd });
  const at = decided.atSeq;
  const t = decided.thread;
  const roles = new Map(messages.map((m) => [m.seq, m.role]));
  const dropped = forkTrimCount(t.strategy, floor, at, t.summarizedThroughSeq, (seq) =>
    roles.get(seq),
  );
  return {
    decided,
    copied: messages.filter((m) => m.seq >= floor + dropped && m.seq <= at),
    shared: Math.max(0, at - floor + 1),
    inherited: decided.summaryInherited,
  };
}

/** One FORK_COPY call (lua/fork.ts for its arguments and replies). */
function forkCopyOnce(
  ctx: RedisContext,
  k: NamespaceKeys,
  cmd: ForkCommand,
  plan: CopiedFork | undefined,
  via: RedisConnection,
): Promise<unknown> {
  const json =
    plan === undefined
      ? ""
      : JSON.stringify(decidedFields(plan.decided, plan.shared, plan.inherited));
  return ctx.io.run(
    FORK_COPY,
    [k.thread(cmd.newThreadId), k.threads, k.events, k.usage],
    [
      ...forkArgs(ctx, k, cmd),
      json,
      ...threadArgs(plan?.decided.thread),
      ...importEntries(plan?.copied ?? []).entries,
    ],
    via,
  );
}

/**
 * Store.importThread with shareFrom when the parent is in another shard
 * (keys.ts): checked as importFork checks it (core/fork.ts
 * checkImportShare), on one READ of the parent (an atomic snapshot), and
 * written as a plain import holding copies of the parent's stored messages
 * through throughSeq before its own: no segment is shared across shards.
 */
export async function importCopiedFork(
  ctx: RedisContext,
  cmd: ImportThreadCommand,
  share: ImportShare,
): Promise<ImportThreadCommand> {
  const snapshot = await readThread(ctx, cmd.namespace, share.threadId);
  const messages = snapshot?.messages ?? [];
  checkImportShare(snapshot?.thread, messages[0]?.seq, share);
  const { shareFrom: _, ...rest } = cmd;
  return {
    ...rest,
    messages: [...messages.filter((m) => m.seq <= share.throughSeq), ...cmd.messages],
  };
}
