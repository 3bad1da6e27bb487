import {
  checkImportShare,
  decideFork,
  type ForkPlan,
  forkTrimCount,
  type ImportShare,
} from "../../core/fork.js";
import {
  floorOf,
  type Lineage,
  type LineageEntry,
  planForkLineage,
  raiseFloor,
  rangesFor,
} from "../../core/lineage.js";
import type { Role, ThreadState } from "../../core/types.js";
import type { ForkCommand, ForkResult, ImportThreadCommand } from "../store.js";
import { asArray, asString, decodeMessage, decodeThread, lineageField } from "./codec.js";
import type { RedisConnection } from "./connection.js";
import { beginWrite, type RedisContext, refuseLate, sameShard } from "./context.js";
import {
  decidedFields,
  FORK_ATTEMPTS,
  forkArgs,
  forkOutcome,
  parentChangedError,
  threadArgs,
} from "./fork-calls.js";
import { forkAcrossShards } from "./forks-across-shards.js";
import type { NamespaceKeys } from "./keys.js";
import { FORK } from "./lua/fork.js";
import { IMPORT_FORK } from "./lua/import.js";
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
