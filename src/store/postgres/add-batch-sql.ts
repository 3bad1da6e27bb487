import pg from "pg";
import type { BatchWrites } from "./add-batch.js";
import { extraOf } from "./codec.js";
import { lockStatement, logStatementParts } from "./events.js";

/**
 * The set-wise statements of add-batch.ts: each one covers every Add of a
 * batch, its rows passed as one array per column (unnest). Column lists
 * are explicit: these run as prepared statements, which a `SELECT *` would
 * break once a migration adds a column.
 */

const THREAD_COLUMNS = `thread_id, incarnation, strategy, last_seq, summarized_through_seq,
  summary, summary_time, create_time, update_time, stored, bytes, labels, ttl_ms, expire_at`;

/** What the batch reads of a thread beyond what it writes (schema.ts version 3). */
const LAYOUT_COLUMNS = `head, lineage, parent_thread_id, parent_at_seq, parent_fork_time,
  parent_create_time`;

/** The NULLs of a thread's columns, for a row of LOAD_THREADS that is not a thread's. */
const NO_THREAD = `${THREAD_COLUMNS}, ${LAYOUT_COLUMNS}`
  .split(",")
  .map(() => "NULL")
  .join(", ");

/**
 * The batch's threads that exist (`namespace`, `ids`: $1 and $2, or
 * literals), `frozen_id` NULL; then a row for each id that still names a
 * frozen segment (`wanted` the id, `frozen_id` true, the thread's columns
 * NULL): a thread created under it opens a head of another id
 * (segments.ts freshHeadId). Both parts are ranges of a primary key.
 */
export function loadThreads(namespace: string, ids: string): string {
  return `SELECT thread_id AS wanted, NULL::boolean AS frozen_id, ${THREAD_COLUMNS}, ${LAYOUT_COLUMNS}
  FROM threads WHERE namespace = ${namespace} AND thread_id = ANY (${ids}::text[])
  UNION ALL
  SELECT segment_id, true, ${NO_THREAD}
  FROM segments WHERE namespace = ${namespace} AND segment_id = ANY (${ids}::text[])`;
}

export const LOAD_THREADS = loadThreads("$1", "$2");

/**
 * BEGIN, the namespace's lock and the read of its threads in one round
 * trip, as one simple-protocol query of three statements: each statement
 * takes its snapshot when it starts, so the read sees what the holders of
 * the lock before it committed. Without parameters, so its values are
 * literals (pg.escapeLiteral); not a prepared statement.
 */
export function beginLockAndLoad(namespace: string, ids: readonly string[]): string {
  const ns = pg.escapeLiteral(namespace);
  const list = `ARRAY[${ids.map((id) => pg.escapeLiteral(id)).join(", ")}]`;
  return `BEGIN; ${lockStatement(ns)}; ${loadThreads(ns, list)}`;
}

/** The request-id records of ($2[i], $3[i]) pairs that exist. */
export const LOAD_RECORDS = `SELECT r.thread_id, r.request_id, r.hash, r.time, r.result, r.last_seq
  FROM requests r JOIN unnest($2::text[], $3::bytea[]) AS k (thread_id, request_id)
    ON r.thread_id = k.thread_id AND r.request_id = k.request_id
  WHERE r.namespace = $1`;

const LOG = logStatementParts(28);

/**
 * The batch's messages ($2-$7, $2 their segments), request-id records ($8-$13), thread rows
 * ($14-$27), and the namespace's events and row with the NOTIFY ($28-$38,
 * NamespaceLog.take), in one statement: five tables, so no row is written
 * twice by it.
 */
export const WRITE_ADDS = `
WITH m AS (
  INSERT INTO messages (namespace, thread_id, seq, role, create_time, content, extra)
  SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::bytea[],
    $7::text[])
), r AS (
  INSERT INTO requests (namespace, thread_id, request_id, hash, result, time, last_seq)
  SELECT $1, * FROM unnest($8::text[], $9::bytea[], $10::text[], $11::text[], $12::bigint[],
    $13::bigint[])
  ON CONFLICT (namespace, thread_id, request_id) DO UPDATE SET hash = excluded.hash,
    result = excluded.result, time = excluded.time, last_seq = excluded.last_seq
), t AS (
INSERT INTO threads (namespace, ${THREAD_COLUMNS})
SELECT $1, * FROM unnest($14::text[], $15::text[], $16::text[], $17::bigint[], $18::bigint[],
  $19::bytea[], $20::bigint[], $21::bigint[], $22::bigint[], $23::bigint[], $24::bigint[],
  $25::jsonb[], $26::bigint[], $27::bigint[])
ON CONFLICT (namespace, thread_id) DO UPDATE SET incarnation = excluded.incarnation,
  strategy = excluded.strategy, last_seq = excluded.last_seq,
  summarized_through_seq = excluded.summarized_through_seq, summary = excluded.summary,
  summary_time = excluded.summary_time, create_time = excluded.create_time,
  update_time = excluded.update_time, stored = excluded.stored, bytes = excluded.bytes,
  labels = excluded.labels, ttl_ms = excluded.ttl_ms, expire_at = excluded.expire_at
), ${LOG.ctes}
${LOG.update}`;

/** The parameters of WRITE_ADDS. */
export function writeAddsParams(namespace: string, w: BatchWrites): unknown[] {
  const ms = w.messages;
  const records = [...w.records].flatMap(([threadId, byId]) =>
    [...byId].map(([requestId, r]) => ({ threadId, requestId, ...r })),
  );
  const threads = [...w.threads.values()];
  const states = threads.map((t) => t.state);
  return [
    namespace,
    ms.map((m) => m.segment),
    ms.map((m) => m.message.seq),
    ms.map((m) => m.message.role),
    ms.map((m) => m.message.createTime),
    ms.map((m) => Buffer.from(m.message.content, "utf8")),
    ms.map((m) => extraOf(m.message)),
    records.map((r) => r.threadId),
    records.map((r) => Buffer.from(r.requestId, "utf8")),
    records.map((r) => r.hash),
    records.map((r) => r.result),
    records.map((r) => r.time),
    records.map((r) => r.last_seq),
    states.map((t) => t.threadId),
    states.map((t) => t.incarnation),
    states.map((t) => JSON.stringify(t.strategy)),
    states.map((t) => t.lastSeq),
    states.map((t) => t.summarizedThroughSeq),
    states.map((t) => Buffer.from(t.summary, "utf8")),
    states.map((t) => t.summaryTime),
    states.map((t) => t.createTime),
    states.map((t) => t.updateTime),
    threads.map((t) => t.stored),
    threads.map((t) => t.bytes),
    states.map((t) => (t.labels === undefined ? null : JSON.stringify(t.labels))),
    states.map((t) => t.ttlMs ?? null),
    states.map((t) => t.expireTime ?? null),
  ];
}

/**
 * Each thread's records past retention ($3[i], the newest cut of its Adds)
 * and beyond its $4 newest (requests.ts recordRequest, for every thread of
 * the batch at once).
 */
export const PRUNE_RECORDS = `
DELETE FROM requests r USING unnest($2::text[], $3::bigint[]) AS k (thread_id, drop_through)
WHERE r.namespace = $1 AND r.thread_id = k.thread_id AND (r.time <= k.drop_through
  OR r.request_id IN (SELECT o.request_id FROM requests o
    WHERE o.namespace = $1 AND o.thread_id = k.thread_id
    ORDER BY o.time DESC, o.request_id DESC OFFSET $4))`;

/** The labels of threads $2, replaced by the ($3[i], $4[i], $5[i]) thread/key/value rows. */
export const REPLACE_LABELS = `
WITH gone AS (
  DELETE FROM thread_labels l WHERE l.namespace = $1 AND l.thread_id = ANY ($2::text[])
    AND (l.thread_id, l.key, l.value) NOT IN
      (SELECT * FROM unnest($3::text[], $4::text[], $5::text[]))
)
INSERT INTO thread_labels (namespace, key, value, thread_id)
SELECT $1, k, v, t FROM unnest($3::text[], $4::text[], $5::text[]) AS n (t, k, v)
ON CONFLICT DO NOTHING`;
