import { randomUUID } from "node:crypto";
import {
  checkImportShare,
  decideFork,
  type ForkPlan,
  forkTargetExistsError,
  forkTrimCount,
  type ImportShare,
} from "../../core/fork.js";
import { importedState } from "../../core/import.js";
import {
  type ForkLineagePlan,
  floorOf,
  type Lineage,
  type LineageEntry,
  planForkLineage,
  raiseFloor,
  rangesFor,
} from "../../core/lineage.js";
import { checkQuotas } from "../../core/quota.js";
import { isExpired } from "../../core/ttl.js";
import type { Role, StoredMessage, ThreadState } from "../../core/types.js";
import { bytesOf } from "../../core/usage.js";
import type { ForkCommand, ForkResult, ImportThreadCommand } from "../store.js";
import {
  INSERT_MESSAGES,
  type Layout,
  layoutOf,
  lineageColumn,
  messageColumns,
  type ThreadRow,
  toThread,
} from "./codec.js";
import type { Query } from "./events.js";
import { recordedResult, recordRequest } from "./requests.js";
import { addReferences, freezeHead, freshHeadId, readRanges } from "./segments.js";
import { saveThread, setLabels, threadRow } from "./thread-rows.js";
import { removeThreads, type WriteContext } from "./writes.js";

/** What a Fork's request-id record keeps (a replay answers the fork's current state with it). */
type RecordedFork = Omit<ForkResult, "replayed">;

/**
 * Store.fork, one write of a group transaction (group-commit.ts), behind the
 * namespace's row lock: the checks in Store.fork's order, then the rows of
 * core/lineage.ts planForkLineage. Its statements are a fixed number (and
 * a few reads of roles for the fork's own trim), whatever the parent's
 * length: at most FORK_COPY_MAX messages are read and copied; the rest is
 * references to frozen segments.
 */
export async function fork(ctx: WriteContext, cmd: ForkCommand): Promise<ForkResult> {
  const { q, log, lim } = ctx;
  const ns = await log.lock(cmd.namespace);
  const key = { ...cmd, threadId: cmd.newThreadId };
  let target = await threadRow(q, cmd.namespace, cmd.newThreadId);
  if (target !== undefined && isExpired(toThread(target), cmd.now)) {
    await removeThreads(ctx, cmd.namespace, [target], cmd.now, "expired");
    target = undefined;
  }
  if (target !== undefined) {
    const first = await recordedResult<RecordedFork>(q, lim, key, "add");
    if (first === undefined) throw forkTargetExistsError();
    const { sharedCount, summaryInherited } = first;
    return { thread: toThread(target), sharedCount, summaryInherited, replayed: true };
  }
  const live = await liveParent(q, cmd.namespace, cmd.threadId, cmd.now);
  const plan = decideFork(live?.state, live?.oldest, cmd);
  // decideFork refused a missing parent (not_found).
  if (live === undefined) throw new Error("postgres store: no parent");
  const { row: parent, layout, floor } = live;
  const lineage = planForkLineage(layout.lineage, layout.lastSeq, plan.atSeq);
  const own = await ownView(ctx, cmd.namespace, plan, lineage, floor);
  const delta = { threads: 1, messages: own.copied.length, bytes: bytesOf(own.copied) };
  checkQuotas(lim, ns.usage, delta);

  const state: ThreadState = { ...plan.thread, incarnation: randomUUID() };
  await writeForkRows(ctx, cmd.namespace, { row: parent, layout, lineage }, state, {
    entries: own.entries.entries,
    messages: own.copied,
  });
  const result: ForkResult = {
    thread: state,
    sharedCount: own.sharedCount,
    summaryInherited: plan.summaryInherited,
    replayed: false,
  };
  if (cmd.requestId !== "") await recordRequest(q, lim, key, result, 0);
  log.use(cmd.namespace, delta);
  log.log(cmd.namespace, cmd.newThreadId, cmd.now, {
    type: "thread_forked",
    parentThreadId: cmd.threadId,
    atSeq: plan.atSeq,
    sharedCount: own.sharedCount,
    summaryInherited: plan.summaryInherited,
  });
  return { ...result, thread: { ...state } };
}

/** A parent as Fork and the sharing import read it: live (not expired), with its layout. */
interface LiveParent {
  row: ThreadRow;
  state: ThreadState;
  layout: Layout;
  /** Its oldest stored seq (above last_seq when it stores none). */
  floor: number;
  /** The same, undefined when it stores none (what decideFork and checkImportShare take). */
  oldest: number | undefined;
}

/** The thread `threadId` when it is there and not expired (an expired one is left for the sweep). */
async function liveParent(
  q: Query,
  namespace: string,
  threadId: string,
  now: number,
): Promise<LiveParent | undefined> {
  const row = await threadRow(q, namespace, threadId);
  if (row === undefined) return undefined;
  const state = toThread(row);
  if (isExpired(state, now)) return undefined;
  const layout = layoutOf(row);
  const floor = floorOf(layout.lineage, layout.lastSeq);
  return { row, state, layout, floor, oldest: floor <= layout.lastSeq ? floor : undefined };
}

/** The fork as its own strategy keeps it: its frozen entries, the messages it copies. */
interface OwnView {
  /** The fork's lineage after its own trim (its head: the parent's, where it copies from). */
  entries: Lineage;
  copied: StoredMessage[];
  sharedCount: number;
}

/**
 * The fork's lineage after its own trim (core/fork.ts forkTrimCount, then
 * raiseFloor): what it references and copies is only what it keeps, so the
 * trim writes nothing of its own.
 */
async function ownView(
  ctx: WriteContext,
  namespace: string,
  plan: ForkPlan,
  lineage: ForkLineagePlan,
  floor: number,
): Promise<OwnView> {
  const copy = lineage.copy;
  const before: Lineage = {
    entries: lineage.forkEntries,
    head: copy === undefined ? undefined : { segment: copy.segment, low: copy.from },
  };
  const trimmed =
    lineage.sharedCount === 0
      ? 0
      : await forkTrimOf(ctx, namespace, plan.thread, before, floor, plan.atSeq);
  const newFloor = floor + trimmed;
  const after = trimmed === 0 ? before : raiseFloor(before, newFloor).lineage;
  const from = Math.max(copy?.from ?? 0, newFloor);
  const copied =
    copy === undefined || from > copy.to
      ? []
      : await readRanges(ctx.q, namespace, [{ segment: copy.segment, from, to: copy.to }]);
  // The parent's stored messages it took at the fork point (the contract's), before its own trim.
  return { entries: after, copied, sharedCount: lineage.sharedCount };
}

/**
 * How many of the fork's oldest messages its strategy drops (forkTrimCount),
 * reading the roles it asks for in windows (doubling) at the cut.
 */
async function forkTrimOf(
  ctx: WriteContext,
  namespace: string,
  thread: Omit<ThreadState, "incarnation">,
  lineage: Lineage,
  floor: number,
  atSeq: number,
): Promise<number> {
  const roles = new Map<number, Role | undefined>();
  for (let window = 16; ; window *= 2) {
    let missing: number | undefined;
    const n = forkTrimCount(thread.strategy, floor, atSeq, thread.summarizedThroughSeq, (seq) => {
      if (!roles.has(seq) && missing === undefined) missing = seq;
      return roles.get(seq);
    });
    if (missing === undefined) return n;
    const to = Math.min(atSeq, missing + window - 1);
    const read = await readRanges(ctx.q, namespace, rangesFor(lineage, atSeq, missing, to));
    for (let seq = missing; seq <= to; seq++) roles.set(seq, undefined);
    for (const m of read) roles.set(m.seq, m.role);
  }
}

/**
 * The references of the fork's entries: one more on each segment it keeps;
 * the parent's head frozen when the plan says so (referenced by the parent's
 * new last entry and, if it keeps it, the fork's), the parent given a new,
 * empty head. The parent's state does not change.
 */
async function shareSegments(
  ctx: WriteContext,
  namespace: string,
  parent: ThreadRow,
  layout: Layout,
  lineage: ForkLineagePlan,
  own: readonly LineageEntry[],
): Promise<void> {
  const kept = own.map((e) => e.segment);
  const frozen = lineage.headFrozen ? layout.headId : undefined;
  if (frozen !== undefined) {
    await freezeHead(
      ctx.q,
      namespace,
      {
        segment: frozen,
        refs: kept.includes(frozen) ? 2 : 1,
        count: parent.stored,
        bytes: parent.bytes,
      },
      { threadId: parent.thread_id, lineage: lineageColumn(lineage.parent.entries) },
    );
  }
  await addReferences(
    ctx.q,
    namespace,
    kept.filter((id) => id !== frozen),
  );
}

/** The parent a fork's rows are written against, and the lineage planned on it. */
interface ForkSource {
  row: ThreadRow;
  layout: Layout;
  lineage: ForkLineagePlan;
}

/**
 * Writes a thread whose lineage `source.lineage` plans on its parent: the
 * segments shared (the parent's head frozen when the plan says so), a new
 * owned head holding `own.messages` (seqs right after its last entry), the
 * thread row with `own.entries` and its labels. Fork and the sharing import
 * both end here, after every check passed.
 */
async function writeForkRows(
  ctx: WriteContext,
  namespace: string,
  source: ForkSource,
  state: ThreadState,
  own: { entries: readonly LineageEntry[]; messages: readonly StoredMessage[] },
): Promise<void> {
  const { q } = ctx;
  const { threadId } = state;
  await shareSegments(ctx, namespace, source.row, source.layout, source.lineage, own.entries);
  const head = await freshHeadId(q, namespace, threadId);
  if (own.messages.length > 0) {
    const columns = messageColumns(own.messages);
    await q(INSERT_MESSAGES, [namespace, head ?? threadId, ...columns]);
  }
  const counts = { stored: own.messages.length, bytes: bytesOf(own.messages) };
  await saveThread(q, namespace, state, counts, { head, lineage: lineageColumn(own.entries) });
  if (state.labels !== undefined) await setLabels(q, namespace, threadId, state.labels);
}

/**
 * Store.importThread with shareFrom (one write of a group transaction, as
 * fork): the thread written as a Fork of its parent at throughSeq would be
 * (core/lineage.ts planForkLineage, before any trim of its own), its head
 * the copied messages then its own, its state as the command gives it. Every
 * refusal is thrown before the first write; no trim, no request record, no
 * thread_forked. Like the plain import, a row of the id (even expired)
 * makes it return false.
 */
export async function importFork(
  ctx: WriteContext,
  cmd: ImportThreadCommand,
  share: ImportShare,
): Promise<boolean> {
  const { q, log, lim } = ctx;
  const ns = await log.lock(cmd.namespace);
  if ((await threadRow(q, cmd.namespace, cmd.threadId)) !== undefined) return false;
  const live = await liveParent(q, cmd.namespace, share.threadId, cmd.now);
  checkImportShare(live?.state, live?.oldest, share);
  // checkImportShare refused a missing parent (failed_precondition).
  if (live === undefined) throw new Error("postgres store: no parent");
  const { layout, floor } = live;
  const lineage = planForkLineage(layout.lineage, layout.lastSeq, share.throughSeq);
  const copied =
    lineage.copy === undefined ? [] : await readRanges(q, cmd.namespace, [lineage.copy]);
  const messages = [...copied, ...cmd.messages];
  const delta = { threads: 1, messages: messages.length, bytes: bytesOf(messages) };
  checkQuotas(lim, ns.usage, delta);

  const state = importedState(cmd, randomUUID());
  // The origin as exported; the parent's id is also what the forks index lists it under.
  if (cmd.parent !== undefined) state.parent = { ...cmd.parent };
  const source = { row: live.row, layout, lineage };
  await writeForkRows(ctx, cmd.namespace, source, state, {
    entries: lineage.forkEntries,
    messages,
  });
  log.use(cmd.namespace, delta);
  // Every stored seq, the shared ones included: from the parent's oldest (throughSeq is at least it).
  log.log(cmd.namespace, cmd.threadId, cmd.now, {
    type: "messages_added",
    firstSeq: floor,
    lastSeq: cmd.lastSeq,
  });
  return true;
}
