import type { Store } from "../store/store.js";
import { encodeThreadLine } from "./thread-line.js";

/** Thread ids read per listing page: memory use is one page and one thread. */
export const EXPORT_PAGE = 100;

/**
 * Writes every thread of `namespace` as export lines (thread-line.ts), in
 * thread id order, one thread read at a time: memory stays bounded by the
 * largest thread, whatever the namespace's size. `write` is awaited, so a
 * slow destination slows the export instead of buffering it. A thread
 * cleared between the listing and its read is left out. A fork is written
 * with its origin and every message it stores, shared ones included, so its
 * line stands alone. Returns the count.
 */
export async function exportNamespace(
  store: Store,
  namespace: string,
  write: (line: string) => Promise<void>,
): Promise<number> {
  let after = "";
  let count = 0;
  for (;;) {
    const ids = await store.listThreads(namespace, after, EXPORT_PAGE);
    for (const threadId of ids) {
      const snap = await store.read(namespace, threadId);
      if (snap === undefined) continue;
      const { thread, messages } = snap;
      await write(
        `${encodeThreadLine({
          namespace,
          threadId,
          strategy: thread.strategy,
          lastSeq: thread.lastSeq,
          summarizedThroughSeq: thread.summarizedThroughSeq,
          summary: thread.summary,
          summaryTime: thread.summaryTime,
          createTime: thread.createTime,
          updateTime: thread.updateTime,
          ...(thread.labels === undefined ? {} : { labels: thread.labels }),
          ...(thread.ttlMs === undefined || thread.expireTime === undefined
            ? {}
            : { ttlMs: thread.ttlMs, expireTime: thread.expireTime }),
          ...(thread.parent === undefined ? {} : { parent: thread.parent }),
          messages,
        })}\n`,
      );
      count++;
    }
    if (ids.length < EXPORT_PAGE) return count;
    after = ids[ids.length - 1] ?? "";
  }
}
