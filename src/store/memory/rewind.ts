import { decideRewind } from "../../core/rewind.js";
import type { RewindCommand, RewindResult } from "../store.js";
import { addUsage, type MemoryState } from "./namespaces.js";
import { forgetRewound, recordRequest, replayOf } from "./requests.js";
import { copyThread, dropAfter, oldestStoredSeq } from "./thread-record.js";

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
  const plan = decideRewind(rec?.state, rec && oldestStoredSeq(rec), cmd);
  if (rec === undefined) throw new Error("unreachable: decideRewind refuses a missing thread");
  const s = m.open(cmd.namespace);
  let result: RewindResult;
  if (plan === "unchanged") {
    result = {
      thread: copyThread(rec.state),
      removedCount: 0,
      summaryDropped: false,
      replayed: false,
    };
  } else {
    const dropped = dropAfter(rec, plan.dropAfterSeq);
    rec.state = plan.thread;
    forgetRewound(rec, cmd.toSeq);
    // A fold running meanwhile read messages that are gone: it must not commit.
    m.leases.end(cmd.namespace, cmd.threadId);
    addUsage(s.usage, { threads: 0, messages: -dropped.count, bytes: -dropped.bytes });
    s.log.emit(cmd.threadId, cmd.now, {
      type: "thread_rewound",
      toSeq: cmd.toSeq,
      removedCount: dropped.count,
      summaryDropped: plan.summaryDropped,
    });
    result = {
      thread: copyThread(rec.state),
      removedCount: dropped.count,
      summaryDropped: plan.summaryDropped,
      replayed: false,
    };
  }
  if (cmd.requestId !== "") {
    recordRequest(rec, cmd, { kind: "rewind", result }, m.lim);
    // The recorded result is the store's own, for replays: the caller gets a copy.
    return { ...result, thread: copyThread(result.thread) };
  }
  return result;
}
