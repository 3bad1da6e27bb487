import { randomUUID } from "node:crypto";
import {
  checkImportShare,
  decideFork,
  type ForkPlan,
  forkTargetExistsError,
  forkTrimCount,
} from "../../core/fork.js";
import { importedState } from "../../core/import.js";
import { type ForkLineagePlan, planForkLineage } from "../../core/lineage.js";
import { checkQuotas } from "../../core/quota.js";
import { isExpired } from "../../core/ttl.js";
import type { StoredMessage, ThreadState } from "../../core/types.js";
import { bytesOf, droppedDelta } from "../../core/usage.js";
import type { ForkCommand, ForkResult, ImportThreadCommand } from "../store.js";
import {
  addFork,
  addUsage,
  type MemoryState,
  type NamespaceState,
  removeThread,
} from "./namespaces.js";
import { recordRequest, replayOf } from "./requests.js";
import { dropFront, freezeHead, lineageOf, messageAt, oldestSeq, retain } from "./segments.js";
import {
  copyThread,
  firstAfter,
  newThreadRecord,
  sumBytes,
  type ThreadRecord,
} from "./thread-record.js";

/**
 * Store.fork: a new thread sharing its parent's messages up to at_seq
 * (core/fork.ts decides, core/lineage.ts plans the segments). Runs to
 * completion in one turn of the event loop, so it is atomic; every refusal
 * is thrown before anything changes. Costs at most FORK_COPY_MAX copied
 * messages and the parent's lineage, never its length.
 */
export function fork(m: MemoryState, cmd: ForkCommand): ForkResult {
  const s = m.open(cmd.namespace);
  const target = s.threads.get(cmd.newThreadId);
  // An expired thread of the new id goes first, as Add removes one.
  if (target !== undefined && isExpired(target.state, cmd.now)) {
    removeThread(s, target, cmd.now, "expired");
  }
  const live = s.threads.get(cmd.newThreadId);
  const replay = replayOf("fork", live, cmd, m.lim);
  if (replay !== undefined && live !== undefined)
    return { ...replay, thread: copyThread(live.state) };
  if (live !== undefined) throw forkTargetExistsError();
  const parent = m.live(cmd.namespace, cmd.threadId, cmd.now);
  const plan = decideFork(parent?.state, parent && oldestSeq(parent), {
    newThreadId: cmd.newThreadId,
    atSeq: cmd.atSeq,
    expectedLastSeq: cmd.expectedLastSeq,
    strategy: cmd.strategy,
    labels: cmd.labels,
    ttlMs: cmd.ttlMs,
    now: cmd.now,
  });
  if (parent === undefined) throw new Error("unreachable: decideFork refuses a missing parent");
  const lineage = planForkLineage(lineageOf(parent), parent.state.lastSeq, plan.atSeq);
  const copied = copiedMessages(parent, lineage);
  const copiedBytes = sumBytes(copied, 0, copied.length);
  checkQuotas(m.lim, s.usage, { threads: 1, messages: copied.length, bytes: copiedBytes });
  // Every check passed: from here on the Fork writes.
  const rec = writeFork(m, cmd.namespace, s, parent, plan, lineage, copied);
  addUsage(s.usage, { threads: 1, messages: copied.length, bytes: copiedBytes });
  ownTrim(s, rec);
  const result: ForkResult = {
    thread: copyThread(rec.state),
    sharedCount: lineage.sharedCount,
    summaryInherited: plan.summaryInherited,
    replayed: false,
  };
  if (cmd.requestId !== "") recordRequest(rec, cmd, { kind: "fork", result }, m.lim);
  s.log.emit(cmd.newThreadId, cmd.now, {
    type: "thread_forked",
    parentThreadId: cmd.threadId,
    atSeq: plan.atSeq,
    sharedCount: lineage.sharedCount,
    summaryInherited: plan.summaryInherited,
  });
  return { ...result, thread: copyThread(rec.state) };
}

/** The parent's head messages the plan copies (at most FORK_COPY_MAX). */
function copiedMessages(parent: ThreadRecord, lineage: ForkLineagePlan): StoredMessage[] {
  const copy = lineage.copy;
  if (copy === undefined) return [];
  const from = parent.head + firstAfter(parent, copy.from - 1);
  const to = parent.head + firstAfter(parent, copy.to);
  // Stored messages are frozen objects: the copy may share them.
  return parent.messages.slice(from, to) as StoredMessage[];
}

/** Writes the new thread: its state, segments, indexes and expiry. */
function writeFork(
  m: MemoryState,
  namespace: string,
  s: NamespaceState,
  parent: ThreadRecord,
  plan: ForkPlan,
  lineage: ForkLineagePlan,
  copied: StoredMessage[],
): ThreadRecord {
  return writeForkRecord(
    m,
    namespace,
    s,
    parent,
    { ...plan.thread, incarnation: randomUUID() },
    lineage,
    copied,
  );
}

/** Writes a thread whose lineage `lineage` plans on `parent`, its head `head`. */
function writeForkRecord(
  m: MemoryState,
  namespace: string,
  s: NamespaceState,
  parent: ThreadRecord,
  state: ThreadState,
  lineage: ForkLineagePlan,
  head: StoredMessage[],
): ThreadRecord {
  if (lineage.headFrozen) freezeHead(s.segments, parent);
  const entries = lineage.forkEntries.map((e) => ({ ...e }));
  retain(s.segments, entries);
  const rec = newThreadRecord(state, head, sumBytes(head, 0, head.length));
  rec.entries = entries;
  const id = rec.state.threadId;
  s.threads.set(id, rec);
  s.ids.add(id);
  s.labels.replace(id, undefined, rec.state.labels);
  addFork(s, parent.state.threadId, id);
  m.scheduleExpiry(namespace, rec);
  return rec;
}

/** The fork's own trim when its strategy stores fewer than it holds (core/fork.ts forkTrimCount). */
function ownTrim(s: NamespaceState, rec: ThreadRecord): void {
  const { strategy, lastSeq, summarizedThroughSeq } = rec.state;
  const floor = oldestSeq(rec);
  if (floor === undefined) return;
  const n = forkTrimCount(
    strategy,
    floor,
    lastSeq,
    summarizedThroughSeq,
    (seq) => messageAt(s.segments, rec, seq)?.role,
  );
  const freed = dropFront(s.segments, rec, n);
  addUsage(s.usage, droppedDelta(freed.count, freed.bytes));
}

/**
 * Store.importThread with shareFrom: the thread written as a Fork of its
 * parent at throughSeq would be (shared segments, at most FORK_COPY_MAX
 * copied), its own messages after the copied ones in its head, its state as
 * the command gives it. Atomic as fork is; refusals throw before any change.
 */
export function importFork(
  m: MemoryState,
  cmd: ImportThreadCommand,
  share: NonNullable<ImportThreadCommand["shareFrom"]>,
): boolean {
  const s = m.open(cmd.namespace);
  if (s.threads.has(cmd.threadId)) return false;
  const parent = m.live(cmd.namespace, share.threadId, cmd.now);
  checkImportShare(parent?.state, parent && oldestSeq(parent), share);
  if (parent === undefined)
    throw new Error("unreachable: checkImportShare refuses a missing parent");
  const lineage = planForkLineage(lineageOf(parent), parent.state.lastSeq, share.throughSeq);
  const own = cmd.messages.map((msg): StoredMessage => Object.freeze({ ...msg }));
  const head = [...copiedMessages(parent, lineage), ...own];
  const bytes = bytesOf(head);
  checkQuotas(m.lim, s.usage, { threads: 1, messages: head.length, bytes });
  const state = importedState(cmd, randomUUID());
  if (cmd.parent !== undefined) state.parent = { ...cmd.parent };
  const rec = writeForkRecord(m, cmd.namespace, s, parent, state, lineage, head);
  addUsage(s.usage, { threads: 1, messages: head.length, bytes });
  const first = oldestSeq(rec);
  if (first !== undefined) {
    s.log.emit(cmd.threadId, cmd.now, {
      type: "messages_added",
      firstSeq: first,
      lastSeq: cmd.lastSeq,
    });
  }
  return true;
}
