import { randomUUID } from "node:crypto";
import { decideAppend, keepsSummary, newThreadState } from "../../core/append.js";
import { mayCommitSummary } from "../../core/fold-commit.js";
import { importedState } from "../../core/import.js";
import { checkQuotas } from "../../core/quota.js";
import { isExpired, ttlAfterAdd, ttlFields } from "../../core/ttl.js";
import type { StoredMessage, Strategy, ThreadState } from "../../core/types.js";
import { appendDelta, droppedDelta, importDelta, removalDelta } from "../../core/usage.js";
import type {
  AppendCommand,
  AppendResult,
  CommitSummaryCommand,
  FoldFailureCommand,
  ForkCommand,
  ImportThreadCommand,
  RewindCommand,
  StoreLimits,
} from "../store.js";
import { INSERT_MESSAGES, layoutOf, messageColumns, type ThreadRow, toThread } from "./codec.js";
import type { NamespaceLog, Query } from "./events.js";
import { fork, importFork } from "./forks.js";
import { recordedResult, recordRequest } from "./requests.js";
import { rewind } from "./rewind.js";
import { freshHeadId, releaseSegments } from "./segments.js";
import { applyTrim, planTrim, saveThread, setLabels, threadRow } from "./thread-rows.js";

/**
 * The store's writes, one at a time, each inside a transaction
 * (group-commit.ts) on one connection, in a savepoint of its own or alone.
 * Every write first locks its namespace's row (NamespaceLog.lock), then
 * reads and writes rows of that namespace only; the decisions are the
 * core's pure functions. A group's Adds usually go set-wise instead
 * (add-batch.ts, deciding with the same functions); `append` here is the
 * form for the Adds the batch leaves out and for a write run alone.
 */
export type WriteOp =
  | { kind: "append"; cmd: AppendCommand }
  | { kind: "rewind"; cmd: RewindCommand }
  | { kind: "commitSummary"; cmd: CommitSummaryCommand }
  | { kind: "recordFoldFailure"; cmd: FoldFailureCommand }
  | { kind: "clear"; namespace: string; threadId: string; now: number }
  | { kind: "clearBatch"; namespace: string; now: number; limit: number }
  | { kind: "import"; cmd: ImportThreadCommand }
  | { kind: "fork"; cmd: ForkCommand }
  | { kind: "sweepOne"; namespace: string; threadId: string; now: number };

export interface WriteContext {
  q: Query;
  log: NamespaceLog;
  lim: StoreLimits;
}

/** The namespace a write changes (its only one). */
export function namespaceOf(op: WriteOp): string {
  return "cmd" in op ? op.cmd.namespace : op.namespace;
}

export function runWrite(ctx: WriteContext, op: WriteOp): Promise<unknown> {
  switch (op.kind) {
    case "append":
      return append(ctx, op.cmd);
    case "rewind":
      return rewind(ctx, op.cmd);
    case "commitSummary":
      return commitSummary(ctx, op.cmd);
    case "recordFoldFailure":
      return recordFoldFailure(ctx, op.cmd);
    case "clear":
      return clearThreads(ctx, op.namespace, op.now, { ids: [op.threadId] }).then((n) => n > 0);
    case "clearBatch":
      return clearThreads(ctx, op.namespace, op.now, { first: op.limit });
    case "import":
      return importThread(ctx, op.cmd);
    case "fork":
      return fork(ctx, op.cmd);
    case "sweepOne":
      return sweepOne(ctx, op.namespace, op.threadId, op.now);
  }
}

/** What an Add's request-id record keeps: its first result. */
type RecordedAdd = Omit<AppendResult, "replayed">;

async function append(ctx: WriteContext, cmd: AppendCommand): Promise<AppendResult> {
  const { q, log, lim } = ctx;
  const ns = await log.lock(cmd.namespace);
  let row = await threadRow(q, cmd.namespace, cmd.threadId);
  if (row !== undefined && isExpired(toThread(row), cmd.now)) {
    await removeThreads(ctx, cmd.namespace, [row], cmd.now, "expired");
    row = undefined;
  }
  if (row !== undefined) {
    const first = await recordedResult<RecordedAdd>(q, lim, cmd, "add");
    if (first !== undefined) return { ...first, replayed: true };
  }
  const existing = row === undefined ? undefined : toThread(row);
  const strategy = decideAppend(existing, cmd);
  const created = existing === undefined;
  const { state, lastSeqBefore, added } = stateAfterAdd(existing, strategy, cmd);
  const stored = row?.stored ?? 0;
  // A new thread's head: its own id, unless a frozen segment of that id outlived an earlier one.
  const head = row === undefined ? await freshHeadId(q, cmd.namespace, cmd.threadId) : row.head;
  const layout = layoutOf(row ?? { ...EMPTY_ROW, thread_id: cmd.threadId, head });
  const trimmed = await planTrim(q, cmd.namespace, state, layout, added);
  const delta = appendDelta(created, cmd.messages, {
    count: trimmed.headCount,
    bytes: trimmed.headBytes,
  });
  checkQuotas(lim, ns.usage, delta);

  const lineage = await applyTrim(ctx, cmd.namespace, layout, trimmed.through, lastSeqBefore);
  const kept = added.filter((m) => m.seq > trimmed.through);
  if (kept.length > 0) {
    await q(INSERT_MESSAGES, [cmd.namespace, layout.headId, ...messageColumns(kept)]);
  }
  const ttl = ttlAfterAdd(cmd.ttlMs, row?.ttl_ms ?? undefined, created, cmd.defaultTtlMs);
  delete state.ttlMs;
  delete state.expireTime;
  Object.assign(state, ttlFields(ttl, cmd.now));
  if (cmd.labels !== undefined) {
    state.labels = { ...cmd.labels };
    await setLabels(q, cmd.namespace, cmd.threadId, cmd.labels);
  }
  const counts = {
    stored: stored + added.length - trimmed.headCount,
    bytes: (row?.bytes ?? 0) + delta.bytes,
  };
  await saveThread(q, cmd.namespace, state, counts, { head, lineage });
  log.use(cmd.namespace, delta);
  const firstSeq = added.length > 0 ? lastSeqBefore + 1 : 0;
  const lastSeq = added.length > 0 ? state.lastSeq : 0;
  const result: AppendResult = { thread: state, firstSeq, lastSeq, replayed: false };
  if (cmd.requestId !== "") await recordRequest(q, lim, cmd, result, lastSeq);
  if (added.length > 0) {
    log.log(cmd.namespace, cmd.threadId, cmd.now, { type: "messages_added", firstSeq, lastSeq });
  }
  return { ...result, thread: { ...state } };
}

/**
 * The thread as an Add leaves it before its trim, ttl and labels: a copy of
 * `existing` (a new thread when undefined) under the decided strategy,
 * with the Add's messages numbered after its last seq.
 */
export function stateAfterAdd(
  existing: ThreadState | undefined,
  strategy: Strategy,
  cmd: AppendCommand,
): { state: ThreadState; lastSeqBefore: number; added: StoredMessage[] } {
  const state: ThreadState =
    existing === undefined
      ? newThreadState(cmd.threadId, strategy, randomUUID(), cmd.now)
      : { ...existing };
  if (!keepsSummary(state.strategy, strategy)) {
    state.summary = "";
    state.summaryTime = 0;
    state.summarizedThroughSeq = 0;
  }
  state.strategy = strategy;
  const lastSeqBefore = state.lastSeq;
  const added = cmd.messages.map(
    (m, i): StoredMessage => ({ ...m, seq: lastSeqBefore + i + 1, createTime: cmd.now }),
  );
  if (added.length > 0) {
    state.lastSeq += added.length;
    state.updateTime = cmd.now;
  }
  return { state, lastSeqBefore, added };
}

/** What layoutOf reads of a thread that does not exist yet. */
const EMPTY_ROW = { head: null, lineage: null, last_seq: 0, stored: 0 };

/**
 * Deletes threads with everything hanging off them (their owned heads'
 * messages; one reference less on each frozen segment they hold), gives
 * their room back, logs thread_cleared.
 */
export async function removeThreads(
  ctx: WriteContext,
  namespace: string,
  rows: readonly ThreadRow[],
  now: number,
  reason?: "expired",
): Promise<void> {
  if (rows.length === 0) return;
  await ctx.q(
    `WITH m AS (DELETE FROM messages WHERE namespace = $1 AND thread_id = ANY ($3::text[])),
       r AS (DELETE FROM requests WHERE namespace = $1 AND thread_id = ANY ($2::text[])),
       l AS (DELETE FROM thread_labels WHERE namespace = $1 AND thread_id = ANY ($2::text[]))
     DELETE FROM threads WHERE namespace = $1 AND thread_id = ANY ($2::text[])`,
    [namespace, rows.map((r) => r.thread_id), rows.map((r) => r.head ?? r.thread_id)],
  );
  const held = rows.flatMap((r) => layoutOf(r).lineage.entries.map((e) => e.segment));
  await releaseSegments(ctx.q, ctx.log, namespace, held);
  for (const row of rows) {
    ctx.log.use(namespace, removalDelta({ messages: row.stored, bytes: row.bytes }));
    const body = reason === undefined ? {} : { reason };
    ctx.log.log(namespace, row.thread_id, now, { type: "thread_cleared", ...body });
  }
}

/** Clears the given threads, or the first `first` of the namespace in byte order; how many. */
async function clearThreads(
  ctx: WriteContext,
  namespace: string,
  now: number,
  which: { ids: string[] } | { first: number },
): Promise<number> {
  await ctx.log.lock(namespace);
  const rows =
    "ids" in which
      ? await ctx.q<ThreadRow>(
          "SELECT * FROM threads WHERE namespace = $1 AND thread_id = ANY ($2::text[]) ORDER BY thread_id",
          [namespace, which.ids],
        )
      : await ctx.q<ThreadRow>(
          "SELECT * FROM threads WHERE namespace = $1 ORDER BY thread_id LIMIT $2",
          [namespace, which.first],
        );
  await removeThreads(ctx, namespace, rows, now);
  return rows.length;
}

async function sweepOne(ctx: WriteContext, namespace: string, threadId: string, now: number) {
  await ctx.log.lock(namespace);
  const row = await threadRow(ctx.q, namespace, threadId);
  // Written since it was found due: its expire time moved on, and it stays.
  if (row === undefined || !isExpired(toThread(row), now)) return false;
  await removeThreads(ctx, namespace, [row], now, "expired");
  return true;
}

async function commitSummary(
  ctx: WriteContext,
  cmd: CommitSummaryCommand,
): Promise<ThreadState | undefined> {
  const { q, log } = ctx;
  await log.lock(cmd.namespace);
  const row = await threadRow(q, cmd.namespace, cmd.threadId);
  // FOR UPDATE: a lease taken meanwhile by another replica waits for this commit.
  const [lease] = await q<{ token: number }>(
    "SELECT token FROM fold_leases WHERE namespace = $1 AND thread_id = $2 FOR UPDATE",
    [cmd.namespace, cmd.threadId],
  );
  const thread = row === undefined ? undefined : toThread(row);
  if (row === undefined || thread === undefined || !mayCommitSummary(thread, lease, cmd)) {
    return undefined;
  }
  const state: ThreadState = {
    ...thread,
    summary: cmd.summary,
    summaryTime: cmd.now,
    summarizedThroughSeq: cmd.throughSeq,
    updateTime: cmd.now,
  };
  const layout = layoutOf(row);
  const trimmed = await planTrim(q, cmd.namespace, state, layout, []);
  const lineage = await applyTrim(ctx, cmd.namespace, layout, trimmed.through, row.last_seq);
  await saveThread(
    q,
    cmd.namespace,
    state,
    { stored: row.stored - trimmed.headCount, bytes: row.bytes - trimmed.headBytes },
    { head: row.head, lineage },
  );
  log.use(cmd.namespace, droppedDelta(trimmed.headCount, trimmed.headBytes));
  log.log(cmd.namespace, cmd.threadId, cmd.now, {
    type: "summary_updated",
    summary: cmd.summary,
    summarizedThroughSeq: cmd.throughSeq,
    foldedCount: cmd.foldedCount,
  });
  return state;
}

async function recordFoldFailure(ctx: WriteContext, cmd: FoldFailureCommand): Promise<void> {
  await ctx.log.lock(cmd.namespace);
  const row = await threadRow(ctx.q, cmd.namespace, cmd.threadId);
  if (row === undefined || row.incarnation !== cmd.incarnation) return;
  ctx.log.log(cmd.namespace, cmd.threadId, cmd.now, {
    type: "summary_failed",
    reason: cmd.reason,
    attempt: cmd.attempt,
  });
}

async function importThread(ctx: WriteContext, cmd: ImportThreadCommand): Promise<boolean> {
  if (cmd.shareFrom !== undefined) return importFork(ctx, cmd, cmd.shareFrom);
  const { q, log, lim } = ctx;
  const ns = await log.lock(cmd.namespace);
  const row = await threadRow(q, cmd.namespace, cmd.threadId);
  const delta = importDelta(row !== undefined, cmd.messages);
  if (delta === undefined) return false;
  checkQuotas(lim, ns.usage, delta);
  const state = importedState(cmd, randomUUID());
  // The origin as exported: nothing is shared with a thread of that id.
  if (cmd.parent !== undefined) state.parent = { ...cmd.parent };
  const head = await freshHeadId(q, cmd.namespace, cmd.threadId);
  await saveThread(
    q,
    cmd.namespace,
    state,
    { stored: cmd.messages.length, bytes: delta.bytes },
    { head, lineage: null },
  );
  if (cmd.messages.length > 0) {
    await q(INSERT_MESSAGES, [
      cmd.namespace,
      head ?? cmd.threadId,
      ...messageColumns(cmd.messages),
    ]);
  }
  if (cmd.labels !== undefined) await setLabels(q, cmd.namespace, cmd.threadId, cmd.labels);
  log.use(cmd.namespace, delta);
  const first = cmd.messages[0];
  if (first !== undefined) {
    log.log(cmd.namespace, cmd.threadId, cmd.now, {
      type: "messages_added",
      firstSeq: first.seq,
      lastSeq: cmd.lastSeq,
    });
  }
  return true;
}
