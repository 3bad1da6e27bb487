import { recallSize } from "../../core/recall.js";
import { isExpired } from "../../core/ttl.js";
import type { Labels, ThreadState } from "../../core/types.js";
import { livePage } from "../live-page.js";
import { READ_SLACK, type ReadView, type ThreadSnapshot } from "../store.js";
import type { MemoryState } from "./namespaces.js";
import {
  copyThread,
  firstAfter,
  storedCount,
  storedFrom,
  type ThreadRecord,
} from "./thread-record.js";

/** Store.read: the thread and the stored messages its view needs. */
export function read(
  m: MemoryState,
  namespace: string,
  threadId: string,
  view?: ReadView,
): ThreadSnapshot | undefined {
  const rec = m.live(namespace, threadId, Date.now());
  if (rec === undefined) return undefined;
  // Only what the view needs is copied, so a Get costs its window, not the thread.
  const start = view === undefined ? 0 : viewStart(rec, view);
  return { thread: copyThread(rec.state), messages: storedFrom(rec, start), complete: start === 0 };
}

/** Store.getThread. */
export function getThread(
  m: MemoryState,
  namespace: string,
  threadId: string,
): ThreadState | undefined {
  const rec = m.live(namespace, threadId, Date.now());
  return rec === undefined ? undefined : copyThread(rec.state);
}

/** Store.listThreads: a page of live ids, from the id index or the rarest label's. */
export function listThreads(
  m: MemoryState,
  namespace: string,
  after: string,
  limit: number,
  labels?: Labels,
): Promise<string[]> {
  const s = m.find(namespace);
  if (s === undefined || limit <= 0) return Promise.resolve([]);
  const fetch =
    labels !== undefined && Object.keys(labels).length > 0
      ? async (from: string, n: number) =>
          s.labels.list(labels, from, n, (id) => s.threads.get(id)?.state.labels)
      : async (from: string, n: number) => s.ids.after(from, n);
  const now = Date.now();
  return livePage(after, limit, fetch, async (ids) =>
    ids.map((id) => {
      const t = s.threads.get(id);
      return t !== undefined && isExpired(t.state, now);
    }),
  );
}

/**
 * Index (among the stored messages) of the oldest one a read with `view`
 * returns: the newest recallSize + READ_SLACK, and for the summary strategy
 * every message after summarized_through_seq too (store.ts Store.read).
 */
function viewStart(rec: ThreadRecord, view: ReadView): number {
  const count = storedCount(rec);
  const size = recallSize(rec.state.strategy, view.limit);
  if (size <= 0) return 0;
  let start = Math.max(0, count - size - READ_SLACK);
  if (rec.state.strategy.kind === "summary") {
    start = Math.min(start, firstAfter(rec, rec.state.summarizedThroughSeq));
  }
  return start;
}
