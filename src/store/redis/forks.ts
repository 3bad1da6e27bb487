import { randomUUID } from "node:crypto";
import { requestIdReusedError } from "../../core/append.js";
import { MemoryError } from "../../core/errors.js";
import {
  checkImportShare,
  decideFork,
  type ForkPlan,
  forkTargetExistsError,
  forkTrimCount,
  type ImportShare,
} from "../../core/fork.js";
import { requestsToKeep } from "../../core/idempotency.js";
import {
  floorOf,
  type Lineage,
  type LineageEntry,
  planForkLineage,
  raiseFloor,
  rangesFor,
} from "../../core/lineage.js";
import { strategyKey } from "../../core/strategy.js";
import type { Role, StoredMessage, ThreadState } from "../../core/types.js";
import type { ForkCommand, ForkResult, ImportThreadCommand, ThreadSnapshot } from "../store.js";
import { asArray, asString, decodeMessage, decodeThread, lineageField } from "./codec.js";
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
import type { NamespaceKeys } from "./keys.js";
import { EXPIRE_THREAD } from "./lua/clears.js";
import { FORK, FORK_COPY } from "./lua/fork.js";
import { IMPORT_FORK } from "./lua/import.js";
import { readThread } from "./reads.js";
import type { AcknowledgedWrite } from "./replica-confirmation.js";
import {
  beginImport,
  importArgs,
  importEntries,
  importOutcome,
  noteTtlNamespace,
} from "./writes.js";

/**
 * Store.fork: the core decides (core/fork.ts, core/lineage.ts) on the parent
 * as read (its hash and its head's length: nothing of its messages but the
 * roles at the cut a trim of the fork asks for, forkTrimOf), and one FORK script
 * (lua/fork.ts) writes the decision if the parent is still exactly that,
 * or answers retry. With options.minReplicas, acknowledged after a WAIT,
 * like an Add.
 */

/** Attempts before a Fork of a parent that changes under every one gives up. */
const FORK_ATTEMPTS = 20;

/** The parent as read: its hash, its head's length, its state and lineage. */
interface ParentRead {
  flat: string[];
  headLength: number;
  state: ThreadState | undefined;
  lineage: Lineage;
  /** Segment -> the seq its list starts at (the `first` of keys.ts). */
  firsts: Map<string, number>;
}

/** The parent's head in plans, until the script names it (lua/fork.ts). */
const HEAD = "";

export async function fork(ctx: RedisContext, cmd: ForkCommand): Promise<ForkResult> {
  if (!sameShard(ctx, cmd.namespace, cmd.threadId, cmd.newThreadId)) {
    return forkAcrossShards(ctx, cmd);
  }
  const k = ctx.keys.forThread(cmd.namespace, cmd.newThreadId);
  const write = ctx.replicas === undefined ? ctx.unconfirmed : await beginWrite(ctx, k);
  refuseLate(cmd.deadline, "Fork");
  // A fork given a ttl of its own; one inheriting its parent's is in a namespace noted already.
  if ((cmd.ttlMs ?? 0) > 0) await noteTtlNamespace(ctx, cmd.namespace, write);
  for (let attempt = 0; attempt < FORK_ATTEMPTS; attempt++) {
    const parent = await readParent(ctx, k, cmd.threadId, write.link);
    let plan: PlannedFork | undefined;
    let refusal: unknown;
    try {
      plan = await planFork(ctx, k, cmd, parent, write.link);
    } catch (err) {
      refusal = err;
    }
    const reply = asArray(await forkOnce(ctx, k, cmd, parent, plan, write.link));
    if (reply[0] === "retry") continue;
    const done = await forkOutcome(ctx, k, cmd, reply, plan, refusal, write);
    if (done !== undefined) return done;
  }
  throw parentChangedError("thread_id", "Fork");
}

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
async function forkAcrossShards(ctx: RedisContext, cmd: ForkCommand): Promise<ForkResult> {
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

/** What a FORK or FORK_COPY reply means; undefined: run it again (the new id had expired). */
async function forkOutcome(
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
function parentChangedError(field: string, what: string): MemoryError {
  return new MemoryError(
    "aborted",
    `${field}: the thread changed under every attempt of the ${what}; retry`,
    { field },
  );
}

async function readParent(
  ctx: RedisContext,
  k: NamespaceKeys,
  id: string,
  via: RedisConnection,
): Promise<ParentRead> {
  const flat = asArray(await ctx.io.command(["HGETALL", k.thread(id)], via)).map(asString);
  const headLength = Number(await ctx.io.command(["LLEN", k.messages(id)], via));
  const state = flat.length === 0 ? undefined : decodeThread(flat);
  const firsts = new Map<string, number>();
  const json = lineageField(flat);
  const raw = json === "" ? [] : (JSON.parse(json) as [string, number, number, number][]);
  const entries: LineageEntry[] = raw.map(([segment, low, through, first]) => {
    firsts.set(segment, first);
    return { segment, low, through };
  });
  const lastSeq = state?.lastSeq ?? 0;
  const low = entries.length > 0 ? (entries.at(-1)?.through ?? 0) + 1 : lastSeq - headLength + 1;
  firsts.set(HEAD, low);
  return { flat, headLength, state, lineage: { entries, head: { segment: HEAD, low } }, firsts };
}

/** What the FORK script writes (lua/fork.ts's plan, less the JSON). */
interface PlannedFork {
  decided: ForkPlan;
  entries: [string, number, number, number][];
  parentEntries: [string, number, number, number][];
  headFrozen: boolean;
  copyFrom: number;
  copyTo: number;
  headLow: number;
  shared: number;
  inherited: boolean;
}

/** The core's decisions for the Fork of the parent as read; throws the core's refusals. */
async function planFork(
  ctx: RedisContext,
  k: NamespaceKeys,
  cmd: ForkCommand,
  parent: ParentRead,
  via: RedisConnection,
): Promise<PlannedFork> {
  const state = liveState(parent, cmd.now);
  const lastSeq = state?.lastSeq ?? 0;
  const floor = floorOf(parent.lineage, lastSeq);
  const decided = decideFork(state, floor > lastSeq ? undefined : floor, { ...cmd });
  const at = decided.atSeq;
  const lineagePlan = planForkLineage(parent.lineage, lastSeq, at);
  const fork: Lineage = {
    entries: lineagePlan.forkEntries,
    head:
      lineagePlan.copy === undefined ? undefined : { segment: "copy", low: lineagePlan.copy.from },
  };
  const dropped = await forkTrimOf(ctx, k, cmd.threadId, parent, decided.thread, floor, via);
  const trimmed = raiseFloor(fork, floor + dropped);
  const entry = (e: LineageEntry) => withFirst(parent, e);
  const copy = lineagePlan.copy;
  return {
    decided,
    entries: trimmed.lineage.entries.map(entry),
    parentEntries: lineagePlan.parent.entries.map(entry),
    headFrozen: lineagePlan.headFrozen,
    copyFrom: copy === undefined ? 1 : Math.max(copy.from, floor + dropped),
    copyTo: copy === undefined ? 0 : copy.to,
    headLow: parent.firsts.get(HEAD) ?? 0,
    // What it took from the parent, before its own trim (core/lineage.ts).
    shared: lineagePlan.sharedCount,
    inherited: decided.summaryInherited,
  };
}

/** The parent as read, undefined when it is not there or has expired at `now`. */
function liveState(parent: ParentRead, now: number): ThreadState | undefined {
  const expireTime = parent.state?.expireTime;
  return expireTime !== undefined && expireTime <= now ? undefined : parent.state;
}

/** A lineage entry as the scripts keep it: `[segment, low, through, first]` (keys.ts). */
function withFirst(parent: ParentRead, e: LineageEntry): [string, number, number, number] {
  return [e.segment, e.low, e.through, parent.firsts.get(e.segment) ?? e.low];
}

/** Seqs of the parent read per LRANGE round trip while a fork's cut runs over tool results. */
const ROLE_PAGE = 256;

/**
 * How many of the fork's oldest messages its strategy drops: core/fork.ts
 * forkTrimCount itself, asked until it needs no role it was not given. The
 * roles are read from the parent as read (this attempt's: a retry reads
 * again), in pages of ROLE_PAGE seqs (one LRANGE per segment of a page)
 * from the first seq the core asks for, a page more only while every seq
 * so far is a tool result, up to at_seq (for a summary strategy, up to its
 * summarized_through_seq, past which the core never extends the cut). So
 * a cut over a run of tool results costs a round trip per page of the
 * run, and nothing when the fork keeps everything or no role is asked.
 */
async function forkTrimOf(
  ctx: RedisContext,
  k: NamespaceKeys,
  parentId: string,
  parent: ParentRead,
  fork: Omit<ThreadState, "incarnation">,
  floor: number,
  via: RedisConnection,
): Promise<number> {
  const { strategy, lastSeq: at, summarizedThroughSeq: through } = fork;
  const roles = new Map<number, Role | undefined>();
  const bound = strategy.kind === "summary" ? Math.min(at, through) : at;
  for (;;) {
    let missing: number | undefined;
    const n = forkTrimCount(strategy, floor, at, through, (seq) => {
      // The first role not read ends the core's run; it is where the next read starts.
      if (!roles.has(seq)) missing ??= seq;
      return roles.get(seq);
    });
    if (missing === undefined) return n;
    for (let from = missing; from <= Math.max(bound, missing); from += ROLE_PAGE) {
      const to = Math.min(Math.max(bound, missing), from + ROLE_PAGE - 1);
      if (!(await readRoles(ctx, k, parentId, parent, [from, to], roles, via))) break;
    }
  }
}

/**
 * Reads the roles of the parent's seqs from..to (the parent as read) into
 * `roles` (every seq of the range is then known: a seq missing from the
 * reply has no role); whether every one is a tool result.
 */
async function readRoles(
  ctx: RedisContext,
  k: NamespaceKeys,
  parentId: string,
  parent: ParentRead,
  [from, to]: [number, number],
  roles: Map<number, Role | undefined>,
  via: RedisConnection,
): Promise<boolean> {
  for (let seq = from; seq <= to; seq++) roles.set(seq, undefined);
  const lastSeq = parent.state?.lastSeq ?? 0;
  for (const r of rangesFor(parent.lineage, lastSeq, from, to)) {
    const first = parent.firsts.get(r.segment) ?? r.from;
    const key = r.segment === HEAD ? k.messages(parentId) : k.segment(r.segment);
    const got = asArray(
      await ctx.io.command(["LRANGE", key, String(r.from - first), String(r.to - first)], via),
    );
    for (const e of got) {
      const m = decodeMessage(asString(e));
      if (m.seq >= from && m.seq <= to) roles.set(m.seq, m.role);
    }
  }
  for (let seq = from; seq <= to; seq++) if (roles.get(seq) !== "tool") return false;
  return true;
}

function forkOnce(
  ctx: RedisContext,
  k: NamespaceKeys,
  cmd: ForkCommand,
  parent: ParentRead,
  plan: PlannedFork | undefined,
  via: RedisConnection,
): Promise<unknown> {
  const json =
    plan === undefined
      ? ""
      : JSON.stringify({
          ...decidedFields(plan.decided, plan.shared, plan.inherited),
          head_low: plan.headLow,
          copy_from: plan.copyFrom,
          copy_to: plan.copyTo,
          head_frozen: plan.headFrozen,
          entries: plan.entries,
          parent_entries: plan.parentEntries,
        });
  return ctx.io.run(
    FORK,
    [k.thread(cmd.threadId), k.thread(cmd.newThreadId), k.threads, k.events, k.usage],
    [
      ...forkArgs(ctx, k, cmd),
      String(parent.headLength),
      json,
      ...threadArgs(plan?.decided.thread),
      ...parent.flat,
    ],
    via,
  );
}

/** ARGV 1 to 13 of FORK and FORK_COPY (lua/fork.ts). */
function forkArgs(ctx: RedisContext, k: NamespaceKeys, cmd: ForkCommand): string[] {
  const lim = ctx.lim;
  const keep = requestsToKeep(cmd.now, lim);
  return [
    cmd.threadId,
    cmd.newThreadId,
    String(cmd.now),
    cmd.requestId,
    cmd.requestHash,
    randomUUID(),
    String(lim.eventRetention),
    String(lim.idempotencyRetentionMs),
    String(keep.keepNewest),
    String(keep.dropThrough),
    ...quotaArgs(ctx, k),
  ];
}

/** The new thread's summary, labels' JSON, origin's JSON and strategy's JSON ("" each when refused). */
function threadArgs(t: ForkPlan["thread"] | undefined): string[] {
  return [
    t?.summary ?? "",
    t?.labels === undefined ? "" : JSON.stringify(t.labels),
    t?.parent === undefined ? "" : JSON.stringify(t.parent),
    t === undefined ? "" : JSON.stringify(t.strategy),
  ];
}

/** The plan fields FORK and FORK_COPY share, from the core's decision. */
function decidedFields(decided: ForkPlan, shared: number, inherited: boolean): object {
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

/**
 * Store.importThread with shareFrom: decided as a Fork is, on the parent as
 * read (core/fork.ts checkImportShare, core/lineage.ts planForkLineage at
 * throughSeq, no trim of its own), and written by one IMPORT_FORK script
 * (lua/import.ts) if the parent is still exactly that, else read and
 * decided again, at most FORK_ATTEMPTS times. With options.minReplicas,
 * acknowledged after a WAIT, as the plain import is.
 */
export async function importFork(
  ctx: RedisContext,
  cmd: ImportThreadCommand,
  share: ImportShare,
): Promise<boolean> {
  const k = ctx.keys.forThread(cmd.namespace, cmd.threadId);
  const write = await beginImport(ctx, cmd);
  const own = importEntries(cmd.messages);
  for (let attempt = 0; attempt < FORK_ATTEMPTS; attempt++) {
    const parent = await readParent(ctx, k, share.threadId, write.link);
    let plan: PlannedImport = { json: "", firstSeq: 0 };
    let refusal: unknown;
    try {
      plan = planImportShare(parent, share, cmd.now);
    } catch (err) {
      refusal = err;
    }
    const reply = await ctx.io.run(
      IMPORT_FORK,
      [k.thread(share.threadId), k.thread(cmd.threadId), k.threads, k.events, k.usage],
      [
        ...importArgs(ctx, k, cmd, own.bytes, plan.firstSeq),
        share.threadId,
        String(parent.headLength),
        plan.json,
        String(parent.flat.length),
        ...parent.flat,
        ...own.entries,
      ],
      write.link,
    );
    const status = asArray(reply)[0];
    if (status === "retry") continue;
    if (status === "refused") throw refusal;
    return importOutcome(ctx, reply, write);
  }
  throw parentChangedError("parent", "import of a fork sharing its messages");
}

/** What IMPORT_FORK writes: its plan's JSON (lua/import.ts) and the thread's oldest stored seq. */
interface PlannedImport {
  json: string;
  firstSeq: number;
}

/** The core's decisions for an imported fork of the parent as read; throws the core's refusals. */
function planImportShare(parent: ParentRead, share: ImportShare, now: number): PlannedImport {
  const state = liveState(parent, now);
  const lastSeq = state?.lastSeq ?? 0;
  const floor = floorOf(parent.lineage, lastSeq);
  checkImportShare(state, floor > lastSeq ? undefined : floor, share);
  const lineage = planForkLineage(parent.lineage, lastSeq, share.throughSeq);
  const copy = lineage.copy;
  const json = JSON.stringify({
    head_low: parent.firsts.get(HEAD) ?? 0,
    copy_from: copy?.from ?? 1,
    copy_to: copy?.to ?? 0,
    head_frozen: lineage.headFrozen,
    entries: lineage.forkEntries.map((e) => withFirst(parent, e)),
    parent_entries: lineage.parent.entries.map((e) => withFirst(parent, e)),
  });
  return { json, firstSeq: floor };
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
