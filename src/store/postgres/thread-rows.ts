import { trimCountOf } from "../../core/append.js";
import type { Labels, StoredMessage, Strategy, ThreadState } from "../../core/types.js";
import { bytesOf } from "../../core/usage.js";
import { type MessageRow, oldestSeq, type ThreadRow, toMessage } from "./codec.js";
import type { Query } from "./events.js";

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

/**
 * What trimming the thread to its strategy's max_stored drops (core/append.ts
 * trimCountOf): `before` is what it stores now, `added` the messages this
 * write adds after them (not written yet). Reads only the front it drops, in
 * pages. Returns how many, their bytes and the newest dropped seq (0: none).
 */
export async function planTrim(
  q: Query,
  namespace: string,
  state: { threadId: string; strategy: Strategy; summarizedThroughSeq: number },
  before: { lastSeq: number; stored: number },
  added: readonly StoredMessage[],
): Promise<{ count: number; bytes: number; through: number }> {
  const length = before.stored + added.length;
  const excess = length - state.strategy.maxStored;
  if (excess <= 0) return { count: 0, bytes: 0, through: 0 };
  const oldest = oldestSeq({ last_seq: before.lastSeq, stored: before.stored });
  const front: StoredMessage[] = [];
  const all = (i: number): StoredMessage | undefined =>
    i < before.stored ? front[i] : added[i - before.stored];
  // The excess and a few more (tool results after the cut), doubling while the cut reaches the end.
  let want = Math.min(before.stored, excess + 8);
  for (;;) {
    while (front.length < want) {
      const rows = await q<MessageRow>(
        `SELECT seq, role, create_time, content, extra FROM messages
         WHERE namespace = $1 AND thread_id = $2 AND seq >= $3 ORDER BY seq LIMIT $4`,
        [namespace, state.threadId, oldest + front.length, want - front.length],
      );
      if (rows.length === 0) break;
      for (const r of rows) front.push(toMessage(r));
    }
    const n = trimCountOf(state.strategy, length, all, state.summarizedThroughSeq);
    if (n < front.length || front.length < want || front.length >= before.stored) {
      const dropped: StoredMessage[] = [];
      for (let i = 0; i < n; i++) {
        const m = all(i);
        if (m !== undefined) dropped.push(m);
      }
      return { count: n, bytes: bytesOf(dropped), through: dropped.at(-1)?.seq ?? 0 };
    }
    want = Math.min(before.stored, front.length * 2);
  }
}

export async function dropThrough(q: Query, namespace: string, threadId: string, seq: number) {
  if (seq <= 0) return;
  await q("DELETE FROM messages WHERE namespace = $1 AND thread_id = $2 AND seq <= $3", [
    namespace,
    threadId,
    seq,
  ]);
}

export async function saveThread(
  q: Query,
  namespace: string,
  t: ThreadState,
  counts: { stored: number; bytes: number },
) {
  await q(
    `INSERT INTO threads (namespace, thread_id, incarnation, strategy, last_seq,
       summarized_through_seq, summary, summary_time, create_time, update_time, stored, bytes,
       labels, ttl_ms, expire_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
     ON CONFLICT (namespace, thread_id) DO UPDATE SET incarnation = excluded.incarnation,
       strategy = excluded.strategy, last_seq = excluded.last_seq,
       summarized_through_seq = excluded.summarized_through_seq, summary = excluded.summary,
       summary_time = excluded.summary_time, create_time = excluded.create_time,
       update_time = excluded.update_time, stored = excluded.stored, bytes = excluded.bytes,
       labels = excluded.labels, ttl_ms = excluded.ttl_ms, expire_at = excluded.expire_at`,
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
