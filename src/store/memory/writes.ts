import { randomUUID } from "node:crypto";
import { decideAppend, keepsSummary, newThreadState } from "../../core/append.js";
import { importedState } from "../../core/import.js";
import { checkQuotas, type NamespaceUsage } from "../../core/quota.js";
import { isExpired, ttlAfterAdd, ttlFields } from "../../core/ttl.js";
import type { StoredMessage, Strategy } from "../../core/types.js";
import { appendDelta, bytesOf, importDelta } from "../../core/usage.js";
import type { AppendCommand, AppendResult, ImportThreadCommand } from "../store.js";
import { importFork } from "./forks.js";
import {
  addFork,
  addUsage,
  type MemoryState,
  type NamespaceState,
  removeThread,
} from "./namespaces.js";
import { recordRequest, replayOf } from "./requests.js";
import { dropFront, trimCount, trimmedUsage } from "./segments.js";
import { copyThread, newThreadRecord, type ThreadRecord } from "./thread-record.js";

/** Store.append: where an Add commits. */
export function append(m: MemoryState, cmd: AppendCommand): AppendResult {
  const s = m.open(cmd.namespace);
  const found = s.threads.get(cmd.threadId);
  if (found !== undefined && isExpired(found.state, cmd.now)) {
    removeThread(s, found, cmd.now, "expired");
  }
  const existing = s.threads.get(cmd.threadId);
  const replay = replayOf("append", existing, cmd, m.lim);
  if (replay !== undefined) return replay;
  const plan = planAppend(m, s, existing, cmd);
  const { rec } = plan;
  if (plan.created) {
    s.threads.set(cmd.threadId, rec);
    s.ids.add(cmd.threadId);
  }
  updateThread(m, s, plan, cmd);
  rec.bytes += plan.addedBytes;
  addUsage(s.usage, plan.delta);
  const lastSeqBefore = plan.lastSeqBefore;
  const n = cmd.messages.length;
  const firstSeq = n > 0 ? lastSeqBefore + 1 : 0;
  const lastSeq = n > 0 ? lastSeqBefore + n : 0;
  if (n > 0) {
    rec.state.lastSeq = lastSeq;
    rec.state.updateTime = cmd.now;
  }
  const result: AppendResult = {
    thread: copyThread(rec.state),
    firstSeq,
    lastSeq,
    replayed: false,
  };
  const kept = cmd.requestId !== "";
  if (kept) recordRequest(rec, cmd, { kind: "append", result }, m.lim);
  if (n > 0) s.log.emit(cmd.threadId, cmd.now, { type: "messages_added", firstSeq, lastSeq });
  // A kept result is the store's own, for replays: the caller gets a copy.
  return kept ? { ...result, thread: copyThread(rec.state) } : result;
}

/** What an Add does to its thread, worked out before anything changes. */
interface AppendPlan {
  /** The thread, new or existing, with the added messages already pushed. */
  rec: ThreadRecord;
  created: boolean;
  strategy: Strategy;
  keepsSummary: boolean;
  lastSeqBefore: number;
  /** Oldest stored messages the Add's trim drops. */
  dropped: number;
  addedBytes: number;
  delta: NamespaceUsage;
}

/**
 * Runs the Add's checks (core/append.ts decideAppend, the quotas) on the
 * thread after the Add, trim included; a refusal leaves everything as it was.
 */
function planAppend(
  m: MemoryState,
  s: NamespaceState,
  existing: ThreadRecord | undefined,
  cmd: AppendCommand,
): AppendPlan {
  const strategy = decideAppend(existing?.state, cmd);
  const keeps = existing !== undefined && keepsSummary(existing.state.strategy, strategy);
  const through = keeps ? (existing?.state.summarizedThroughSeq ?? 0) : 0;
  const lastSeqBefore = existing?.state.lastSeq ?? 0;
  const added = cmd.messages.map(
    (msg, i): StoredMessage =>
      Object.freeze({ ...msg, seq: lastSeqBefore + i + 1, createTime: cmd.now }),
  );
  const rec =
    existing ?? newThreadRecord(newThreadState(cmd.threadId, strategy, randomUUID(), cmd.now));
  const list = rec.messages;
  const before = list.length;
  for (const msg of added) list.push(msg);
  const dropped = trimCount(s.segments, rec, strategy, through);
  const trimmed = trimmedUsage(s.segments, rec, dropped);
  const delta = appendDelta(existing === undefined, added, trimmed);
  try {
    checkQuotas(m.lim, s.usage, delta);
  } catch (err) {
    list.length = before;
    throw err;
  }
  const created = existing === undefined;
  const addedBytes = bytesOf(added);
  return { rec, created, strategy, keepsSummary: keeps, lastSeqBefore, dropped, addedBytes, delta };
}

/** Writes an accepted Add's strategy, summary, labels, trim and retention to its thread. */
function updateThread(m: MemoryState, s: NamespaceState, plan: AppendPlan, cmd: AppendCommand) {
  const { rec } = plan;
  const state = rec.state;
  if (!plan.keepsSummary) {
    state.summary = "";
    state.summaryTime = 0;
    state.summarizedThroughSeq = 0;
  }
  state.strategy = plan.strategy;
  if (cmd.labels !== undefined) {
    s.labels.replace(cmd.threadId, state.labels, cmd.labels);
    state.labels = { ...cmd.labels };
  }
  // Its usage is already in plan.delta.
  dropFront(s.segments, rec, plan.dropped);
  const hadExpiry = state.expireTime !== undefined;
  const ttl = ttlAfterAdd(cmd.ttlMs, state.ttlMs, plan.created, cmd.defaultTtlMs);
  delete state.ttlMs;
  delete state.expireTime;
  Object.assign(state, ttlFields(ttl, cmd.now));
  // A thread already queued is queued again at its new time when its old one comes.
  if (!hadExpiry) m.scheduleExpiry(cmd.namespace, rec);
}

/** Store.importThread: writes a whole thread as given, once. */
export function importThread(m: MemoryState, cmd: ImportThreadCommand): boolean {
  if (cmd.shareFrom !== undefined) return importFork(m, cmd, cmd.shareFrom);
  const s = m.open(cmd.namespace);
  const messages = cmd.messages.map((msg): StoredMessage => Object.freeze({ ...msg }));
  const delta = importDelta(s.threads.has(cmd.threadId), messages);
  if (delta === undefined) return false;
  checkQuotas(m.lim, s.usage, delta);
  const state = importedState(cmd, randomUUID());
  if (cmd.parent !== undefined) state.parent = { ...cmd.parent };
  const rec = newThreadRecord(state, messages, delta.bytes);
  s.threads.set(cmd.threadId, rec);
  if (state.parent !== undefined) addFork(s, state.parent.threadId, cmd.threadId);
  s.ids.add(cmd.threadId);
  s.labels.replace(cmd.threadId, undefined, rec.state.labels);
  m.scheduleExpiry(cmd.namespace, rec);
  addUsage(s.usage, delta);
  const first = messages[0];
  if (first !== undefined) {
    s.log.emit(cmd.threadId, cmd.now, {
      type: "messages_added",
      firstSeq: first.seq,
      lastSeq: cmd.lastSeq,
    });
  }
  return true;
}
