import type { SegmentRange } from "../../core/lineage.js";
import type { StoredMessage } from "../../core/types.js";
import { droppedDelta } from "../../core/usage.js";
import { type MessageRow, toMessage } from "./codec.js";
import type { NamespaceLog, Query } from "./events.js";

/**
 * Frozen segments (core/lineage.ts, schema.ts version 3), inside the
 * caller's write transaction: their reference counts, and the messages of
 * several segments read in one statement.
 */

/**
 * The id of a new owned head of `threadId`: null (the thread's own id, as
 * every thread that shares nothing has) unless a frozen segment of that id
 * is still referenced, then a new `<thread_id>\u0001<n>`.
 */
export async function freshHeadId(
  q: Query,
  namespace: string,
  threadId: string,
): Promise<string | null> {
  const [row] = await q<{ head: string | null }>(
    `SELECT CASE WHEN EXISTS (SELECT 1 FROM segments WHERE namespace = $1 AND segment_id = $2)
       THEN $2 || chr(1) || nextval('segment_ids') END AS head`,
    [namespace, threadId],
  );
  return row?.head ?? null;
}

/**
 * Freezes an owned head: it becomes a segment of `refs` references, its
 * messages staying where they are; `renamed` is the thread whose head it
 * was, given a new head id of the `<thread_id>\u0001<n>` form (empty: no
 * message yet, so it stores nothing until its next Add).
 */
export async function freezeHead(
  q: Query,
  namespace: string,
  head: { segment: string; refs: number; count: number; bytes: number },
  renamed: { threadId: string; lineage: string | null },
): Promise<void> {
  await q(
    `WITH s AS (
       INSERT INTO segments (namespace, segment_id, refs, count, bytes) VALUES ($1, $2, $3, $4, $5)
     )
     UPDATE threads SET head = $6 || chr(1) || nextval('segment_ids'), lineage = $7, stored = 0,
       bytes = 0 WHERE namespace = $1 AND thread_id = $6`,
    [namespace, head.segment, head.refs, head.count, head.bytes, renamed.threadId, renamed.lineage],
  );
}

/** One reference more on each of the segments `ids` (distinct). */
export async function addReferences(q: Query, namespace: string, ids: readonly string[]) {
  if (ids.length === 0) return;
  await q(
    "UPDATE segments SET refs = refs + 1 WHERE namespace = $1 AND segment_id = ANY ($2::text[])",
    [namespace, ids],
  );
}

/**
 * One reference less per occurrence of a segment in `ids`; a segment left
 * with none is deleted with its messages, and its count and bytes leave the
 * namespace's usage.
 */
export async function releaseSegments(
  q: Query,
  log: NamespaceLog,
  namespace: string,
  ids: readonly string[],
): Promise<void> {
  if (ids.length === 0) return;
  const times = new Map<string, number>();
  for (const id of ids) times.set(id, (times.get(id) ?? 0) + 1);
  // The rows kept and the rows deleted are disjoint: no row is written twice by the statement.
  // `segment_id = ANY ($2)` makes both a range of the primary key whatever the planner's estimates.
  const freed = await q<{ segment_id: string; count: number; bytes: number }>(
    `WITH k AS (SELECT * FROM unnest($2::text[], $3::bigint[]) AS k (id, n)),
       u AS (UPDATE segments s SET refs = s.refs - k.n FROM k
             WHERE s.namespace = $1 AND s.segment_id = ANY ($2::text[]) AND s.segment_id = k.id
               AND s.refs > k.n)
     DELETE FROM segments s USING k
     WHERE s.namespace = $1 AND s.segment_id = ANY ($2::text[]) AND s.segment_id = k.id
       AND s.refs <= k.n
     RETURNING s.segment_id, s.count, s.bytes`,
    [namespace, [...times.keys()], [...times.values()]],
  );
  if (freed.length === 0) return;
  await q("DELETE FROM messages WHERE namespace = $1 AND thread_id = ANY ($2::text[])", [
    namespace,
    freed.map((f) => f.segment_id),
  ]);
  const count = freed.reduce((n, f) => n + f.count, 0);
  const bytes = freed.reduce((n, f) => n + f.bytes, 0);
  log.use(namespace, droppedDelta(count, bytes));
}

/**
 * The messages of `ranges` (one range read per segment), oldest first, in
 * one statement: one branch per range, each a range of the messages'
 * primary key given by parameters (never a join the planner could turn
 * into a scan of the namespace).
 */
export async function readRanges(
  q: Query,
  namespace: string,
  ranges: readonly SegmentRange[],
): Promise<StoredMessage[]> {
  if (ranges.length === 0) return [];
  const rows = await q<MessageRow>(
    `${rangeBranches(ranges.length, 2, "seq, role, create_time, content, extra")} ORDER BY seq`,
    [namespace, ...rangeParams(ranges)],
  );
  return rows.map(toMessage);
}

/**
 * `n` SELECTs of `columns` of the messages of namespace $1 joined by UNION
 * ALL, the i-th reading segment $(first + 3i) from seq $(first + 3i + 1)
 * through $(first + 3i + 2).
 */
export function rangeBranches(n: number, first: number, columns: string): string {
  return Array.from({ length: n }, (_, i) => {
    const p = first + 3 * i;
    return `SELECT ${columns} FROM messages
      WHERE namespace = $1 AND thread_id = $${p} AND seq BETWEEN $${p + 1} AND $${p + 2}`;
  }).join(" UNION ALL ");
}

/** The parameters of rangeBranches for `ranges`. */
export function rangeParams(ranges: readonly SegmentRange[]): unknown[] {
  return ranges.flatMap((r) => [r.segment, r.from, r.to]);
}
