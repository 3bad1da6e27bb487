import { randomUUID } from "node:crypto";
import { decideAppend, keepsSummary, newThreadState } from "../../../core/append.js";
import type { Lineage } from "../../../core/lineage.js";
import { checkQuotas } from "../../../core/quota.js";
import { ttlAfterAdd, ttlFields } from "../../../core/ttl.js";
import type { StoredMessage, ThreadState } from "../../../core/types.js";
import { appendDelta } from "../../../core/usage.js";
import type { AppendCommand, AppendResult } from "../../store.js";
import { type RecordedResult, type ThreadRow, toThread } from "../codec.js";
import { expireIfDue } from "./clears.js";
import type { WriteContext } from "./context.js";
import type { Committed } from "./outcomes.js";

/**
 * Store.append on the write connection, inside its savepoint: an expired
 * thread goes first (thread_cleared {reason: expired}), then the Add runs
 * on what is left, and moves the thread's expiry on.
 */
export function appendWithTtl(ctx: WriteContext, cmd: AppendCommand): Committed<AppendResult> {
  const row = ctx.threads.get(cmd.namespace, cmd.threadId);
  const expired = expireIfDue(ctx, cmd.namespace, cmd.threadId, cmd.now, row);
  const before = expired === undefined ? row : undefined;
  const done = append(ctx, cmd, before);
  const ttl = ttlAfterAdd(
    cmd.ttlMs,
    before?.ttl_ms ?? undefined,
    before === undefined,
    cmd.defaultTtlMs,
  );
  // A thread without a ttl that keeps none costs no write here (the common Add).
  if (!done.value.replayed && (ttl > 0 || before?.ttl_ms != null)) {
    const fields = ttlFields(ttl, cmd.now);
    ctx.ttl.set.run(fields.ttlMs ?? null, fields.expireTime ?? null, cmd.namespace, cmd.threadId);
    const thread = { ...done.value.thread };
    delete thread.ttlMs;
    delete thread.expireTime;
    done.value = { ...done.value, thread: { ...thread, ...fields } };
  }
  if (expired === undefined) return done;
  return {
    ...done,
    events: [expired.event, ...done.events],
    ended: [...(done.ended ?? []), expired.incarnation],
  };
}

/**
 * The Add itself; `row` is the thread's row as this transaction read it
 * (undefined: none, or expired and just removed), so the Add reads it once.
 * Its trim and its quota check come after its messages are written: a
 * refusal rolls the savepoint back, all of it.
 */
function append(
  ctx: WriteContext,
  cmd: AppendCommand,
  row: ThreadRow | undefined,
): Committed<AppendResult> {
  const first = ctx.requests.replayOf<RecordedResult>(row?.id, cmd);
  if (first !== undefined) return { value: { ...first, replayed: true }, events: [] };
  const { key, state } = threadToAddTo(ctx, cmd, row);
  const lastSeqBefore = state.lastSeq;
  // A new thread's head is its key (lineage.ts); a thread whose head a Fork froze opens one.
  const stored: Lineage =
    row === undefined
      ? { entries: [], head: { segment: String(key), low: 1 } }
      : ctx.threads.lineages.of(row);
  const lineage =
    cmd.messages.length > 0 ? ctx.threads.headForAdd(key, stored, state.lastSeq) : stored;
  const added = storeMessages(ctx, Number(lineage.head?.segment ?? key), state, cmd);
  const trimmed = ctx.threads.trim(cmd.namespace, key, lineage, state);
  const delta = appendDelta(row === undefined, cmd.messages, trimmed);
  checkQuotas(ctx.lim, ctx.threads.usage(cmd.namespace), delta);
  ctx.threads.use(cmd.namespace, delta, key);
  ctx.threads.save(key, state);
  if (cmd.labels !== undefined) {
    ctx.labels.set(cmd.namespace, cmd.threadId, key, cmd.labels);
    state.labels = { ...cmd.labels };
  }
  const firstSeq = added.length > 0 ? lastSeqBefore + 1 : 0;
  const lastSeq = added.length > 0 ? state.lastSeq : 0;
  const result: RecordedResult = { thread: state, firstSeq, lastSeq };
  ctx.requests.record(key, cmd, result);
  const events =
    added.length > 0
      ? [
          ctx.events.log(cmd.namespace, cmd.threadId, cmd.now, {
            type: "messages_added",
            firstSeq,
            lastSeq,
          }),
        ]
      : [];
  return {
    value: { ...result, thread: { ...state }, replayed: false },
    events,
    messages: {
      incarnation: state.incarnation,
      created: row === undefined,
      lastSeqBefore,
      added,
      droppedThrough: trimmed.through,
    },
  };
}

/**
 * The thread the Add goes to, with the strategy it has after the Add
 * (core/append.ts decideAppend: throws aborted or failed_precondition):
 * created now when there is none.
 */
function threadToAddTo(
  ctx: WriteContext,
  cmd: AppendCommand,
  row: ThreadRow | undefined,
): { key: number; state: ThreadState } {
  const existing = row === undefined ? undefined : toThread(row);
  const strategy = decideAppend(existing, cmd);
  let key: number;
  let state: ThreadState;
  if (row === undefined || existing === undefined) {
    state = newThreadState(cmd.threadId, strategy, randomUUID(), cmd.now);
    key = ctx.threads.insert(cmd.namespace, state);
  } else {
    key = row.id;
    state = existing;
  }
  if (!keepsSummary(state.strategy, strategy)) {
    state.summary = "";
    state.summaryTime = 0;
    state.summarizedThroughSeq = 0;
  }
  state.strategy = strategy;
  return { key, state };
}

/** Writes the Add's messages after the thread's last seq into its head, moving `state` on; them as stored. */
function storeMessages(
  ctx: WriteContext,
  segment: number,
  state: ThreadState,
  cmd: AppendCommand,
): StoredMessage[] {
  const added: StoredMessage[] = [];
  for (const m of cmd.messages) {
    added.push(ctx.threads.insertMessage(segment, ++state.lastSeq, cmd.now, m));
  }
  if (added.length > 0) state.updateTime = cmd.now;
  return added;
}
