import { CLEAR_BATCH } from "../store.js";
import { forget, type MemoryState, removeThread } from "./namespaces.js";

/** Store.clear: removes one thread. */
export function clear(m: MemoryState, namespace: string, threadId: string, now: number): boolean {
  const s = m.find(namespace);
  const rec = s?.threads.get(threadId);
  if (s === undefined || rec === undefined) return false;
  removeThread(s, rec, now);
  return true;
}

/** Store.clearAll: the namespace's threads in batches, smallest ids first. */
export async function clearAll(m: MemoryState, namespace: string, now: number): Promise<number> {
  const s = m.find(namespace);
  if (s === undefined) return 0;
  let total = 0;
  for (;;) {
    // Each batch runs to completion inside one turn of the event loop (atomic).
    const ids = s.ids.shift(CLEAR_BATCH);
    for (const id of ids) {
      const rec = s.threads.get(id);
      if (rec !== undefined) forget(s, rec);
      s.threads.delete(id);
    }
    s.log.publish(ids.map((id) => s.log.log(id, now, { type: "thread_cleared" })));
    total += ids.length;
    if (ids.length < CLEAR_BATCH) return total;
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** Store.sweepExpired: the due threads of the expiry queue, oldest expiry first. */
export function sweepExpired(m: MemoryState, now: number, limit: number): number {
  let removed = 0;
  while (removed < limit) {
    const due = m.expiries.popDue(now);
    if (due === undefined) break;
    const s = m.find(due.namespace);
    const rec = s?.threads.get(due.threadId);
    if (s === undefined || rec?.state.incarnation !== due.incarnation) continue;
    const at = rec.state.expireTime;
    if (at === undefined) continue;
    if (at > now) {
      // Written since it was queued: due again at its new time.
      m.expiries.push({ ...due, at });
      continue;
    }
    removeThread(s, rec, now, "expired");
    removed++;
  }
  return removed;
}
