import { trimCountOf } from "../../core/append.js";
import { floorOf, raiseFloor, rangesFor } from "../../core/lineage.js";
import type { Labels, StoredMessage, Strategy, ThreadState } from "../../core/types.js";
import { bytesOf } from "../../core/usage.js";
import { type Layout, lineageColumn, type ThreadRow } from "./codec.js";
import type { NamespaceLog, Query } from "./events.js";
import { readRanges, releaseSegments } from "./segments.js";

/**
 * A thread's rows as the writes (writes.ts) read and write them, inside the
 * caller's transaction: the thread row, its messages' front (for a trim)
 * and its labels.
 */

export async function threadRow(q: Query, namespace: string, threadId: string) {
  const rows = await q<ThreadRow>("SELECT * FROM threads WHERE namespace = $1 AND thread_id = $2", [
    namespace,
    threadId,
  ]);
  return rows[0];
}

/** What a trim drops: how many, the newest seq (0: none), and the part of the owned head. */
export interface TrimPlan {
  count: number;
  through: number;
  /** Of those, the messages of the owned head (or of the write's own): what the usage gives back. */
  headCount: number;
  headBytes: number;
}

/**
 * What trimming the thread to its strategy's max_stored drops (core/append.ts
 * trimCountOf): `before` is where it stores its messages now (shared ones
 * included), `added` the messages this write adds after them (not written
 * yet). Reads only the front it drops, in pages, one range read per segment.
 */
export async function planTrim(
  q: Query,
  namespace: string,
  state: { strategy: Strategy; summarizedThroughSeq: number },
  before: Layout,
  added: readonly StoredMessage[],
): Promise<TrimPlan> {
  const oldest = floorOf(before.lineage, before.lastSeq);
  const stored = before.lastSeq - oldest + 1;
  const length = stored + added.length;
  const excess = length - state.strategy.maxStored;
  if (excess <= 0) return { count: 0, through: 0, headCount: 0, headBytes: 0 };
  const front: StoredMessage[] = [];
  const all = (i: number): StoredMessage | undefined => (i < stored ? front[i] : added[i - stored]);
  // The excess and a few more (tool results after the cut), doubling while the cut reaches the end.
  let want = Math.min(stored, excess + 8);
  for (;;) {
    if (front.length < want) {
      const from = oldest + front.length;
      const ranges = rangesFor(before.lineage, before.lastSeq, from, oldest + want - 1);
      front.push(...(await readRanges(q, namespace, ranges)));
    }
    const n = trimCountOf(state.strategy, length, all, state.summarizedThroughSeq);
    if (n < front.length || front.length < want || front.length >= stored) {
      const dropped: StoredMessage[] = [];
      for (let i = 0; i < n; i++) {
        const m = all(i);
        if (m !== undefined) dropped.push(m);
      }
      const headLow = before.lineage.head?.low ?? before.lastSeq + 1;
      const own = dropped.filter((m) => m.seq >= headLow);
      return {
        count: n,
        through: dropped.at(-1)?.seq ?? 0,
        headCount: own.length,
        headBytes: bytesOf(own),
      };
    }
    want = Math.min(stored, front.length * 2);
  }
}

/**
 * Raises the thread's floor past a trim's `through` (core/lineage.ts
 * raiseFloor): entries below it released, the owned head's front deleted in
 * place up to `dropHeadThrough` at most (seqs after it were never written).
 * Returns the lineage column the thread keeps.
 */
export async function applyTrim(
  ctx: { q: Query; log: NamespaceLog },
  namespace: string,
  layout: Layout,
  through: number,
  dropHeadThrough: number,
): Promise<string | null> {
  if (through <= 0) return lineageColumn(layout.lineage.entries);
  const plan = raiseFloor(layout.lineage, through + 1);
  await releaseSegments(
    ctx.q,
    ctx.log,
    namespace,
    plan.released.map((e) => e.segment),
  );
  if (plan.headDropThrough !== undefined) {
    await dropThrough(
      ctx.q,
      namespace,
      layout.headId,
      Math.min(plan.headDropThrough, dropHeadThrough),
    );
  }
  return lineageColumn(plan.lineage.entries);
}

/** Deletes the segment's messages up to `seq` (an owned head's front, in place). */
export async function dropThrough(q: Query, namespace: string, segment: string, seq: number) {
  if (seq <= 0) return;
  await q("DELETE FROM messages WHERE namespace = $1 AND thread_id = $2 AND seq <= $3", [
    namespace,
    segment,
    seq,
  ]);
}

/** Where a thread's row says its messages are: the head column and the lineage column. */
export interface StoredLayout {
  head: string | null;
  lineage: string | null;
}

export async function saveThread(
  q: Query,
  namespace: string,
  t: ThreadState,
  counts: { stored: number; bytes: number },
  layout: StoredLayout,
) {
  await q(
    `INSERT INTO threads (namespace, thread_id, incarnation, strategy, last_seq,
       summarized_through_seq, summary, summary_time, create_time, update_time, stored, bytes,
       labels, ttl_ms, expire_at, head, lineage, parent_thread_id, parent_at_seq,
       parent_fork_time, parent_create_time)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
       $19, $20, $21)
     ON CONFLICT (namespace, thread_id) DO UPDATE SET incarnation = excluded.incarnation,
       strategy = excluded.strategy, last_seq = excluded.last_seq,
       summarized_through_seq = excluded.summarized_through_seq, summary = excluded.summary,
       summary_time = excluded.summary_time, create_time = excluded.create_time,
       update_time = excluded.update_time, stored = excluded.stored, bytes = excluded.bytes,
       labels = excluded.labels, ttl_ms = excluded.ttl_ms, expire_at = excluded.expire_at,
       head = excluded.head, lineage = excluded.lineage,
       parent_thread_id = excluded.parent_thread_id, parent_at_seq = excluded.parent_at_seq,
       parent_fork_time = excluded.parent_fork_time,
       parent_create_time = excluded.parent_create_time`,
    [
      namespace,
      t.threadId,
      t.incarnation,
      JSON.stringify(t.strategy),
      t.lastSeq,
      t.summarizedThroughSeq,
      Buffer.from(t.summary, "utf8"),
      t.summaryTime,
      t.createTime,
      t.updateTime,
      counts.stored,
      counts.bytes,
      t.labels === undefined ? null : JSON.stringify(t.labels),
      t.ttlMs ?? null,
      t.expireTime ?? null,
      layout.head,
      layout.lineage,
      t.parent?.threadId ?? null,
      t.parent?.atSeq ?? null,
      t.parent?.forkTime ?? null,
      t.parent?.parentCreateTime ?? null,
    ],
  );
}

export async function setLabels(q: Query, namespace: string, threadId: string, labels: Labels) {
  await q("DELETE FROM thread_labels WHERE namespace = $1 AND thread_id = $2", [
    namespace,
    threadId,
  ]);
  const entries = Object.entries(labels);
  await q(
    `INSERT INTO thread_labels (namespace, key, value, thread_id)
     SELECT $1, k, v, $2 FROM unnest($3::text[], $4::text[]) AS l (k, v)`,
    [namespace, threadId, entries.map(([k]) => k), entries.map(([, v]) => v)],
  );
}
