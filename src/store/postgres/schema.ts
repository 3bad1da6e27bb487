import type { Pool, PoolClient } from "pg";
import { newStoreId, newTokenSecret } from "../resume-token.js";

/** The version the DDL below brings a database to (table windlass_schema). */
export const POSTGRES_SCHEMA_VERSION = 3;

/**
 * The key layout, for one PostgreSQL or a Citus cluster. Every table but
 * `meta` and `windlass_schema` has a primary key that starts with
 * `namespace`: namespaces (namespace), threads (namespace, thread_id),
 * messages (namespace, thread_id, seq), requests (namespace, thread_id,
 * request_id), fold_leases (namespace, thread_id), events (namespace, seq),
 * thread_labels (namespace, key, value, thread_id), segments (namespace,
 * segment_id); the forks index threads_by_parent is (namespace,
 * parent_thread_id, thread_id).
 *
 * Sharding (Citus, or any Postgres that distributes tables by a column):
 * the distribution column is `namespace`, every one of those tables
 * distributed by it and colocated with `namespaces`
 * (`SELECT create_distributed_table('threads', 'namespace',
 * colocate_with => 'namespaces')`, and so on), not (namespace, thread_id):
 * every write of a namespace takes its `namespaces` row (the namespace's
 * event counter and quota usage, which change in the same transaction as
 * the thread: an Add, a Rewind, a summary commit, a Clear) and a resume
 * reads the namespace's events as one range, so with namespace as the
 * distribution column each write transaction and each Watch read stays on
 * one shard, and every unique key holds the distribution column (as Citus
 * requires). `meta` and `windlass_schema` are tiny and read at start-up:
 * reference tables. One namespace is one shard's: a single tenant's load
 * does not spread; many tenants' does. The only statements that span
 * shards are the TTL sweep's search for due threads (threads_by_expiry,
 * across namespaces) and the migrations. This layout is tested on one
 * PostgreSQL 15, not on Citus; what to check there first is that the NOTIFY
 * of a commit (events.ts FLUSH, a pg_notify in the statement that updates
 * the namespace's row) is sent where the LISTEN connection listens (the
 * coordinator), not on the worker the statement is pushed down to, and
 * that nextval('segment_ids') (a new head's id, segments.ts) runs in a
 * statement Citus accepts on a distributed table (it is evaluated on the
 * coordinator).
 *
 * Ids compare as bytes (COLLATE "C" on UTF-8: the order ListThreads
 * promises), whatever the database's collation. Text a client sends freely
 * (message content, summaries, request ids) is kept as UTF-8 in bytea, and
 * JSON as text: PostgreSQL's text and jsonb refuse the NUL character, which
 * a message may hold and the other stores keep.
 */
const DDL_V1 = `
CREATE TABLE meta (
  key text PRIMARY KEY,
  value text NOT NULL
);

-- One row per namespace: the lock every write of the namespace takes first
-- (so locks are taken in one order and groups never deadlock), the newest
-- event number issued, the newest one dropped from retention, and what the
-- quotas count.
CREATE TABLE namespaces (
  namespace text COLLATE "C" PRIMARY KEY,
  last_event bigint NOT NULL,
  dropped_through bigint NOT NULL,
  threads bigint NOT NULL,
  messages bigint NOT NULL,
  bytes bigint NOT NULL
);

CREATE TABLE threads (
  namespace text COLLATE "C" NOT NULL,
  thread_id text COLLATE "C" NOT NULL,
  incarnation text NOT NULL,
  strategy text NOT NULL,
  last_seq bigint NOT NULL,
  summarized_through_seq bigint NOT NULL,
  summary bytea NOT NULL,
  summary_time bigint NOT NULL,
  create_time bigint NOT NULL,
  update_time bigint NOT NULL,
  -- Stored messages (seqs last_seq - stored + 1 .. last_seq) and their bytes.
  stored bigint NOT NULL,
  bytes bigint NOT NULL,
  labels jsonb,
  ttl_ms bigint,
  expire_at bigint,
  PRIMARY KEY (namespace, thread_id)
);
CREATE INDEX threads_by_expiry ON threads (expire_at) WHERE expire_at IS NOT NULL;

CREATE TABLE messages (
  namespace text COLLATE "C" NOT NULL,
  thread_id text COLLATE "C" NOT NULL,
  seq bigint NOT NULL,
  role text NOT NULL,
  create_time bigint NOT NULL,
  content bytea NOT NULL,
  -- The message's optional fields as JSON text (jsonb refuses the NUL character).
  extra text,
  PRIMARY KEY (namespace, thread_id, seq)
);

CREATE TABLE requests (
  namespace text COLLATE "C" NOT NULL,
  thread_id text COLLATE "C" NOT NULL,
  request_id bytea NOT NULL,
  hash text NOT NULL,
  result text NOT NULL,
  time bigint NOT NULL,
  PRIMARY KEY (namespace, thread_id, request_id)
);
CREATE INDEX requests_by_age ON requests (namespace, thread_id, time);

-- Not removed with the thread: a thread's fencing token keeps increasing across Clear.
CREATE TABLE fold_leases (
  namespace text COLLATE "C" NOT NULL,
  thread_id text COLLATE "C" NOT NULL,
  token bigint NOT NULL,
  expires_at bigint NOT NULL,
  PRIMARY KEY (namespace, thread_id)
);

CREATE TABLE events (
  namespace text COLLATE "C" NOT NULL,
  seq bigint NOT NULL,
  thread_id text NOT NULL,
  time bigint NOT NULL,
  type text NOT NULL,
  body text NOT NULL,
  PRIMARY KEY (namespace, seq)
);

-- A label's threads, in byte order of their ids: one range per label.
CREATE TABLE thread_labels (
  namespace text COLLATE "C" NOT NULL,
  key text COLLATE "C" NOT NULL,
  value text COLLATE "C" NOT NULL,
  thread_id text COLLATE "C" NOT NULL,
  PRIMARY KEY (namespace, key, value, thread_id)
);
CREATE INDEX thread_labels_by_thread ON thread_labels (namespace, thread_id);
`;

/**
 * Version 2: a request-id record says which request it is of, and an Add's
 * names the newest seq it stored (AppendResult.lastSeq; 0 when it added
 * none), so a Rewind finds the records it forgets (core/rewind.ts
 * forgetRequest) without reading their results; NULL for a Rewind's own
 * record. Every record written before is an Add's, its result written as
 * {"thread":…,"firstSeq":…,"lastSeq":N} (JSON.stringify keeps that order):
 * N is read off the end, since casting the text to json would refuse the
 * \u0000 escapes a summary or a label may hold.
 */
const DDL_V2 = `
ALTER TABLE requests ADD COLUMN last_seq bigint;
UPDATE requests SET last_seq = substring(result FROM '"lastSeq":([0-9]+)}$')::bigint;
`;

/**
 * Version 3: forks (core/lineage.ts). Messages live in segments; the
 * messages' thread_id column is the segment id. A thread's owned head is
 * `head`, NULL naming the segment of its own id (so every thread written
 * before keeps its rows where they are), and `stored`/`bytes` count that
 * head only, its seqs last_seq - stored + 1 .. last_seq. `lineage` is the
 * frozen segments it references, as JSON [[segment, low, through], …]
 * (NULL: none; at most MAX_LINEAGE, read with the row). A frozen segment has
 * a `segments` row: its reference count and physical count/bytes, deleted
 * with its messages when the count reaches 0. A head opened for a thread
 * whose id still names a live frozen segment is named
 * `<thread_id>\u0001<n>` (n from segment_ids; a thread id holds no control
 * character, so no id of a thread can name it). `parent_*` is the fork's
 * origin (ThreadState.parent) and threads_by_parent the forks index.
 * Adding NULL columns, a table and a sequence only changes the catalog; the
 * partial index reads the threads once (not the messages).
 */
const DDL_V3 = `
ALTER TABLE threads ADD COLUMN head text COLLATE "C", ADD COLUMN lineage text,
  ADD COLUMN parent_thread_id text COLLATE "C", ADD COLUMN parent_at_seq bigint,
  ADD COLUMN parent_fork_time bigint, ADD COLUMN parent_create_time bigint;
CREATE INDEX threads_by_parent ON threads (namespace, parent_thread_id, thread_id)
  WHERE parent_thread_id IS NOT NULL;
CREATE TABLE segments (
  namespace text COLLATE "C" NOT NULL,
  segment_id text COLLATE "C" NOT NULL,
  refs bigint NOT NULL,
  count bigint NOT NULL,
  bytes bigint NOT NULL,
  PRIMARY KEY (namespace, segment_id)
);
CREATE SEQUENCE segment_ids;
`;

/** MIGRATIONS[v] brings a database from version v to v + 1 (0: empty). */
const MIGRATIONS: Record<number, (c: PoolClient) => Promise<void>> = {
  0: async (c) => {
    await c.query(DDL_V1);
    // The database's incarnation: what signs its resume tokens (resume-token.ts).
    await c.query(
      "INSERT INTO meta (key, value) VALUES ('database_id', $1), ('token_secret', $2)",
      [newStoreId(), newTokenSecret()],
    );
  },
  1: async (c) => {
    await c.query(DDL_V2);
  },
  2: async (c) => {
    await c.query(DDL_V3);
  },
};

/** Any constant: serialises the migrations of replicas that start together. */
const MIGRATION_LOCK = 0x77696e64;

/**
 * Brings the database to POSTGRES_SCHEMA_VERSION (`target`, for tests of a
 * migration: an older one) in one transaction, under an advisory lock so
 * replicas starting at once migrate it once; throws when it was written by a
 * newer schema.
 */
export async function migrate(pool: Pool, target = POSTGRES_SCHEMA_VERSION): Promise<void> {
  const c = await pool.connect();
  try {
    await c.query("BEGIN");
    await c.query("SELECT pg_advisory_xact_lock($1)", [MIGRATION_LOCK]);
    await c.query("CREATE TABLE IF NOT EXISTS windlass_schema (version integer NOT NULL)");
    const r = await c.query<{ version: number }>(
      "SELECT max(version) AS version FROM windlass_schema",
    );
    const version = r.rows[0]?.version ?? 0;
    if (version > POSTGRES_SCHEMA_VERSION) {
      throw new Error(
        `schema version ${version} is newer than this server's (${POSTGRES_SCHEMA_VERSION})`,
      );
    }
    for (let v = version; v < target; v++) {
      const step = MIGRATIONS[v];
      if (step === undefined) throw new Error(`no migration from schema version ${v}`);
      await step(c);
    }
    if (version < target) {
      await c.query("INSERT INTO windlass_schema (version) VALUES ($1)", [target]);
    }
    await c.query("COMMIT");
  } catch (err) {
    await c.query("ROLLBACK").catch(() => {});
    throw err;
  } finally {
    c.release();
  }
}

/** The database's incarnation (meta): its id and resume-token secret. */
export async function readIncarnation(
  pool: Pick<Pool, "query">,
): Promise<{ databaseId: string; tokenSecret: string }> {
  const r = await pool.query<{ key: string; value: string }>(
    "SELECT key, value FROM meta WHERE key IN ('database_id', 'token_secret')",
  );
  const get = (k: string) => r.rows.find((row) => row.key === k)?.value;
  const databaseId = get("database_id");
  const tokenSecret = get("token_secret");
  if (databaseId === undefined || tokenSecret === undefined) {
    throw new Error("postgres store: meta has no database_id or token_secret");
  }
  return { databaseId, tokenSecret };
}
