import type { ThreadState } from "./types.js";

/**
 * Import (`windlass-memory import`, Store.importThread): a thread written
 * whole from a snapshot. Every store builds the written thread the same way.
 */

/** What a snapshot gives of a thread (Store.importThread's command carries it): all but its incarnation. */
export type ImportedThread = Omit<ThreadState, "incarnation">;

/**
 * The state of an imported thread under its new `incarnation`: everything
 * as given, its labels copied, and its retention only when both the ttl and
 * the expire time are given (one without the other means none).
 */
export function importedState(given: ImportedThread, incarnation: string): ThreadState {
  return {
    threadId: given.threadId,
    incarnation,
    strategy: given.strategy,
    lastSeq: given.lastSeq,
    summarizedThroughSeq: given.summarizedThroughSeq,
    summary: given.summary,
    summaryTime: given.summaryTime,
    createTime: given.createTime,
    updateTime: given.updateTime,
    ...(given.labels === undefined ? {} : { labels: { ...given.labels } }),
    ...(given.ttlMs === undefined || given.expireTime === undefined
      ? {}
      : { ttlMs: given.ttlMs, expireTime: given.expireTime }),
  };
}
