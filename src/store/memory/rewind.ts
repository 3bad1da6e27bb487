import { cutLineage } from "../../core/lineage.js";
import { decideRewind, type RewindPlan } from "../../core/rewind.js";
import { droppedDelta } from "../../core/usage.js";
import type { RewindCommand, RewindResult } from "../store.js";
import { addUsage, type MemoryState, type NamespaceState } from "./namespaces.js";
import { forgetRewound, recordRequest, replayOf } from "./requests.js";
import { lineageOf, oldestSeq, release, storedTotal } from "./segments.js";
import { copyThread, dropAfter, type ThreadRecord } from "./thread-record.js";

/**
 * Store.rewind: drops the thread's messages after cmd.toSeq as
 * core/rewind.ts decideRewind plans it. Runs to completion in one turn of
 * the event loop, so it is atomic; every refusal is thrown before anything
 * changes. An expired thread is not found (and left for the sweep).
 */
export function rewind(m: MemoryState, cmd: RewindCommand): RewindResult {
  const rec = m.live(cmd.namespace, cmd.threadId, cmd.now);
  const replay = replayOf("rewind", rec, cmd, m.lim);
  if (replay !== undefined) return replay;
  const plan = decideRewind(rec?.state, rec && oldestSeq(rec), cmd);
  if (rec === undefined) throw new Error("unreachable: decideRewind refuses a missing thread");
  const done =
    plan === "unchanged"
      ? { removedCount: 0, summaryDropped: false }
      : applyPlan(m, m.open(cmd.namespace), rec, cmd, plan);
  const result: RewindResult = { thread: copyThread(rec.state), ...done, replayed: false };
  if (cmd.requestId === "") return result;
  recordRequest(rec, cmd, { kind: "rewind", result }, m.lim);
  // The recorded result is the store's own, for replays: the caller gets a copy.
  return { ...result, thread: copyThread(result.thread) };
}

/** Writes a Rewind that changes the thread, with everything that hangs on its messages. */
function applyPlan(
  m: MemoryState,
  s: NamespaceState,
  rec: ThreadRecord,
  cmd: RewindCommand,
  plan: RewindPlan,
): { removedCount: number; summaryDropped: boolean } {
  const stored = storedTotal(rec);
  const cut = cutLineage(lineageOf(rec), rec.state.lastSeq, plan.dropAfterSeq);
  rec.entries = [...cut.lineage.entries];
  const freed = release(s.segments, cut.released);
  const head = dropAfter(rec, plan.dropAfterSeq);
  const removedCount = stored - storedTotal(rec);
  addUsage(s.usage, droppedDelta(head.count + freed.count, head.bytes + freed.bytes));
  rec.state = plan.thread;
  forgetRewound(rec, cmd.toSeq);
  // A fold running meanwhile read messages that are gone: it must not commit.
  m.leases.end(cmd.namespace, cmd.threadId);
  const done = { removedCount, summaryDropped: plan.summaryDropped };
  s.log.emit(cmd.threadId, cmd.now, { type: "thread_rewound", toSeq: cmd.toSeq, ...done });
  return done;
}
