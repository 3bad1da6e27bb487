import { recallSize } from "../../core/recall.js";
import { isExpired } from "../../core/ttl.js";
import type { Labels, ThreadState } from "../../core/types.js";
import { livePage } from "../live-page.js";
import { READ_SLACK, type ReadView, type ThreadSnapshot } from "../store.js";
import { hasAll } from "./labels.js";
import type { MemoryState } from "./namespaces.js";
import { storedFromSeq, storedTotal } from "./segments.js";
import type { SortedIds } from "./sorted-ids.js";
import { copyThread, type ThreadRecord } from "./thread-record.js";

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
  const segs = m.open(namespace).segments;
  const floor = rec.state.lastSeq - storedTotal(rec) + 1;
  return {
    thread: copyThread(rec.state),
    messages: storedFromSeq(segs, rec, floor + start),
    complete: start === 0,
  };
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
  forksOf?: string,
): Promise<string[]> {
  const s = m.find(namespace);
  if (s === undefined || limit <= 0) return Promise.resolve([]);
  const byLabels = labels !== undefined && Object.keys(labels).length > 0;
  const labelsOf = (id: string) => s.threads.get(id)?.state.labels;
  const forks = forksOf === undefined || forksOf === "" ? undefined : s.forks.get(forksOf);
  if (forksOf !== undefined && forksOf !== "" && forks === undefined) return Promise.resolve([]);
  const fetch =
    forks !== undefined
      ? async (from: string, n: number) =>
          forksPage(forks, from, n, (id) => !byLabels || hasAll(labelsOf(id), labels))
      : byLabels
        ? async (from: string, n: number) => s.labels.list(labels, from, n, labelsOf)
        : async (from: string, n: number) => s.ids.after(from, n);
  const now = Date.now();
  return livePage(after, limit, fetch, async (ids) =>
    ids.map((id) => {
      const t = s.threads.get(id);
      return t !== undefined && isExpired(t.state, now);
    }),
  );
}

/** Up to `limit` ids of `forks` after `after` that `keep` keeps. */
function forksPage(
  forks: SortedIds,
  after: string,
  limit: number,
  keep: (id: string) => boolean,
): string[] {
  const out: string[] = [];
  const chunk = Math.max(limit, 64);
  let cursor = after;
  for (;;) {
    const page = forks.after(cursor, chunk);
    for (const id of page) {
      if (!keep(id)) continue;
      out.push(id);
      if (out.length >= limit) return out;
    }
    if (page.length < chunk) return out;
    cursor = page[page.length - 1] ?? cursor;
  }
}

/**
 * Index (among the stored messages) of the oldest one a read with `view`
 * returns: the newest recallSize + READ_SLACK, and for the summary strategy
 * every message after summarized_through_seq too (store.ts Store.read).
 */
function viewStart(rec: ThreadRecord, view: ReadView): number {
  const count = storedTotal(rec);
  const size = recallSize(rec.state.strategy, view.limit);
  if (size <= 0) return 0;
  let start = Math.max(0, count - size - READ_SLACK);
  if (rec.state.strategy.kind === "summary") {
    const floor = rec.state.lastSeq - count + 1;
    start = Math.min(start, Math.max(0, rec.state.summarizedThroughSeq + 1 - floor));
  }
  return start;
}
