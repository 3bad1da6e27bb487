import { rangesFor, type SegmentRange } from "../../core/lineage.js";
import { recallSize } from "../../core/recall.js";
import { isExpired } from "../../core/ttl.js";
import type { Labels, Role, StoredMessage, Strategy, ThreadState } from "../../core/types.js";
import { livePage } from "../live-page.js";
import { READ_SLACK, type ReadView, type ThreadSnapshot } from "../store.js";
import { layoutOf, oldestSeq, type ThreadRow, toMessage, toThread } from "./codec.js";
import type { Query } from "./events.js";
import { rangeBranches, rangeParams } from "./segments.js";

/**
 * The store's reads: single statements on any pool connection, so each
 * sees one snapshot of the database, and none waits for a write group.
 */

/** The thread, unless it does not exist or has expired. */
export async function getThread(
  q: Query,
  namespace: string,
  threadId: string,
): Promise<ThreadState | undefined> {
  const rows = await q<ThreadRow>("SELECT * FROM threads WHERE namespace = $1 AND thread_id = $2", [
    namespace,
    threadId,
  ]);
  const row = rows[0];
  if (row === undefined) return undefined;
  const thread = toThread(row);
  return isExpired(thread, Date.now()) ? undefined : thread;
}

/**
 * The oldest seq a read with `view` returns: the newest recallSize +
 * READ_SLACK messages and a summary thread's unfolded ones (Store.read);
 * 0: every message.
 */
function viewFrom(row: ThreadRow, strategy: Strategy, view: ReadView | undefined): number {
  if (view === undefined) return 0;
  const size = recallSize(strategy, view.limit);
  if (size <= 0) return 0;
  const from = row.last_seq - size - READ_SLACK + 1;
  return strategy.kind === "summary" ? Math.min(from, row.summarized_through_seq + 1) : from;
}

/**
 * The thread and its messages from the view's first seq on, in one
 * statement (one snapshot): the seq is worked out from the thread as a
 * first statement found it and checked against the thread the second one
 * returns with the messages; a write in between makes it read again. The
 * same for a thread that references frozen segments: the statement reads
 * their ranges (core/lineage.ts rangesFor, one range read per segment) as
 * the first statement's lineage names them, and its answer counts only if
 * the thread it returns still has that lineage (frozen segments never
 * change, and a segment it references is not deleted).
 */
export async function readThread(
  q: Query,
  namespace: string,
  threadId: string,
  view: ReadView | undefined,
): Promise<ThreadSnapshot | undefined> {
  let from = 0;
  // Where the statement reads: the head's id (a thread's own, unless it shared) and frozen ranges.
  let plan: ReadPlan = { head: threadId, ranges: [] };
  if (view !== undefined) {
    const thread = await getThread(q, namespace, threadId);
    if (thread === undefined) return undefined;
    from = viewFrom(asRow(thread), thread.strategy, view);
  }
  for (let attempt = 0; ; attempt++) {
    const rows = await q<ThreadRow & MessageColumns>(readStatement(plan.ranges.length), [
      namespace,
      threadId,
      from,
      plan.head,
      ...rangeParams(plan.ranges),
    ]);
    const row = rows[0];
    if (row === undefined) return undefined;
    const thread = toThread(row);
    if (isExpired(thread, Date.now())) return undefined;
    const needed = viewFrom(row, thread.strategy, view);
    const moved = needed < from;
    // A write between the two statements moved what the view needs further back.
    if (moved) from = attempt < 3 ? needed : 0;
    const want: ReadPlan = { head: row.head ?? row.thread_id, ranges: frozenRanges(row, from) };
    // The thread's head or frozen ranges are not what the statement read: read again with them.
    if ((moved || !samePlan(want, plan)) && attempt < 6) {
      plan = want;
      continue;
    }
    const messages = rows.flatMap(messageOf);
    return { thread, messages, complete: from <= oldestSeq(row) };
  }
}

/** What a read statement reads besides the thread row. */
interface ReadPlan {
  /** The owned head's segment id. */
  head: string;
  ranges: SegmentRange[];
}

/**
 * Whether the statement of `b` read what `a` says to: the same head and
 * frozen ranges (a frozen segment never changes, and one the thread row of
 * that snapshot references is there).
 */
function samePlan(a: ReadPlan, b: ReadPlan): boolean {
  return (
    a.head === b.head &&
    a.ranges.length === b.ranges.length &&
    a.ranges.every((r, i) => {
      const o = b.ranges[i];
      return o !== undefined && o.segment === r.segment && o.from === r.from && o.to === r.to;
    })
  );
}

/**
 * The thread ($1, $2) and its messages from seq $3 on: of its owned head
 * $4, and of `ranges` frozen ranges ($5 on, segments.ts rangeBranches)
 * before it. Every part is a range of a primary key given by parameters.
 */
function readStatement(ranges: number): string {
  const columns = "seq, role, create_time, content, extra";
  const frozen = ranges === 0 ? "" : `${rangeBranches(ranges, 5, columns)} UNION ALL `;
  return `SELECT t.*, m.seq AS m_seq, m.role AS m_role, m.create_time AS m_create_time,
         m.content AS m_content, m.extra AS m_extra
       FROM threads t LEFT JOIN (${frozen}SELECT ${columns} FROM messages
         WHERE namespace = $1 AND thread_id = $4 AND seq >= $3) m ON true
       WHERE t.namespace = $1 AND t.thread_id = $2 ORDER BY m.seq`;
}

/** The frozen segments' ranges of the thread's seqs from `from` on (its head left out). */
function frozenRanges(row: ThreadRow, from: number): SegmentRange[] {
  if (row.lineage === null) return [];
  const { lineage } = layoutOf(row);
  return rangesFor({ entries: lineage.entries, head: undefined }, row.last_seq, from, row.last_seq);
}

function messageOf(r: MessageColumns): StoredMessage[] {
  return r.m_seq === null
    ? []
    : [
        toMessage({
          seq: r.m_seq,
          role: r.m_role,
          create_time: r.m_create_time,
          content: r.m_content,
          extra: r.m_extra,
        }),
      ];
}

/** A message's columns beside its thread's, as the LEFT JOIN returns them (null: none). */
type MessageColumns =
  | {
      m_seq: number;
      m_role: Role;
      m_create_time: number;
      m_content: Buffer;
      m_extra: string | null;
    }
  | { m_seq: null; m_role: null; m_create_time: null; m_content: null; m_extra: null };

/** What viewFrom reads of a thread. */
function asRow(t: ThreadState): ThreadRow {
  return { last_seq: t.lastSeq, summarized_through_seq: t.summarizedThroughSeq } as ThreadRow;
}

/**
 * Ids after `after`, ascending in byte order, at most `limit`, without the
 * expired ones: a range of the threads' primary key, or with labels of the
 * thread_labels index for the first label, joined by primary-key lookups for
 * the others; with `forksOf`, a range of the forks index (threads_by_parent),
 * each label a primary-key lookup.
 */
export async function listThreads(
  q: Query,
  namespace: string,
  after: string,
  limit: number,
  labels: Labels | undefined,
  forksOf?: string,
): Promise<string[]> {
  if (limit <= 0) return [];
  const entries = Object.entries(labels ?? {});
  if (forksOf !== undefined && forksOf !== "") {
    return listForks(q, namespace, after, limit, entries, forksOf);
  }
  const now = Date.now();
  const fetch = async (from: string, n: number): Promise<string[]> => {
    if (entries.length === 0) {
      const rows = await q<{ thread_id: string }>(
        `SELECT thread_id FROM threads WHERE namespace = $1 AND thread_id > $2
         AND (expire_at IS NULL OR expire_at > $3) ORDER BY thread_id LIMIT $4`,
        [namespace, from, now, n],
      );
      return rows.map((r) => r.thread_id);
    }
    const joins = entries
      .slice(1)
      .map(
        (_, i) =>
          `JOIN thread_labels l${i + 1} ON l${i + 1}.namespace = l0.namespace AND l${i + 1}.key = $${5 + 2 * i}
            AND l${i + 1}.value = $${6 + 2 * i} AND l${i + 1}.thread_id = l0.thread_id`,
      )
      .join(" ");
    const [first, ...rest] = entries as [[string, string], ...[string, string][]];
    const rows = await q<{ thread_id: string }>(
      `SELECT l0.thread_id FROM thread_labels l0 ${joins}
       WHERE l0.namespace = $1 AND l0.key = $2 AND l0.value = $3 AND l0.thread_id > $4
       ORDER BY l0.thread_id LIMIT ${Math.floor(n)}`,
      [namespace, first[0], first[1], from, ...rest.flat()],
    );
    return rows.map((r) => r.thread_id);
  };
  if (entries.length === 0) return fetch(after, limit);
  // Labelled listings skip expired threads as pages of ids come (live-page.ts).
  return livePage(after, limit, fetch, async (ids) => {
    const rows = await q<{ thread_id: string }>(
      `SELECT thread_id FROM threads WHERE namespace = $1 AND thread_id = ANY ($2::text[])
       AND expire_at IS NOT NULL AND expire_at <= $3`,
      [namespace, ids, now],
    );
    const gone = new Set(rows.map((r) => r.thread_id));
    return ids.map((id) => gone.has(id));
  });
}

/** listThreads of the forks of `parent`, in one statement. */
async function listForks(
  q: Query,
  namespace: string,
  after: string,
  limit: number,
  labels: [string, string][],
  parent: string,
): Promise<string[]> {
  const joins = labels
    .map(
      (_, i) =>
        `JOIN thread_labels l${i} ON l${i}.namespace = t.namespace AND l${i}.key = $${6 + 2 * i}
          AND l${i}.value = $${7 + 2 * i} AND l${i}.thread_id = t.thread_id`,
    )
    .join(" ");
  const rows = await q<{ thread_id: string }>(
    `SELECT t.thread_id FROM threads t ${joins}
     WHERE t.namespace = $1 AND t.parent_thread_id = $2 AND t.thread_id > $3
       AND (t.expire_at IS NULL OR t.expire_at > $4)
     ORDER BY t.thread_id LIMIT $5`,
    [namespace, parent, after, Date.now(), limit, ...labels.flat()],
  );
  return rows.map((r) => r.thread_id);
}

/** Threads whose expire time is at or before `now`, oldest expiry first. */
export async function dueThreads(
  q: Query,
  now: number,
  limit: number,
): Promise<{ namespace: string; thread_id: string }[]> {
  return q(
    `SELECT namespace, thread_id FROM threads WHERE expire_at IS NOT NULL AND expire_at <= $1
     ORDER BY expire_at LIMIT $2`,
    [now, Math.max(0, limit)],
  );
}
