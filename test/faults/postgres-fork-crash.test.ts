import { status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role, type Thread } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import {
  type PostgresServer,
  queryPostgres,
  startPostgresServer,
} from "../support/postgres-server.js";
import { killHard, type ServerProcess, startServerProcess } from "../support/sqlite-server.js";
import { createGrpcClient, type MemoryGrpcClient } from "../transport/clients.js";

/**
 * Fork, Rewind, Clear and Adds (on plain threads and on forks) lose nothing
 * acknowledged on the Postgres store, through the compiled server over
 * gRPC, while six writers run: (1) PostgreSQL is killed with SIGKILL and
 * restarted, three times; (2) the service is killed with SIGKILL and started
 * again, three times. Each writer owns a family of threads (roots, forks of
 * them, forks of forks) and sends one call at a time, each Add, Fork and
 * Rewind with a request_id, retried with the same one until it gets a
 * definite answer, so its model of what each thread holds is exact. A
 * tenth of the calls give their first attempt a deadline of a few ms, so
 * that besides the calls a kill cuts, some are stored without the client
 * knowing: their retries must be answered from the request-id record (the
 * line printed counts, per kind, the retried calls and those replayed). After
 * the faults every live thread reads as the model says (each acknowledged
 * message once, at its seq; a fork's parent and fork point), and an SQL
 * audit of the tables (which checks itself against a corrupted copy inside
 * a transaction) finds every segment's reference count equal to the lineage
 * entries naming it, no orphan segment or message row, the namespace's
 * usage equal to what is stored and one thread_forked event per
 * acknowledged Fork.
 */

const WRITERS = 6;
const CYCLES = 3;
/** Calls acknowledged (all writers) between two faults, before the first and after the last. */
const OPS_PER_CYCLE = 200;
const CALL_DEADLINE_MS = 5_000;
/** The share of calls whose first attempt has a deadline of a few ms (then CALL_DEADLINE_MS). */
const IMPATIENT = 0.1;
/** The namespace of calls without a token (transport/auth.ts DEFAULT_NAMESPACE). */
const NAMESPACE = "";
const strategy = { kind: { case: "buffer" as const, value: {} }, maxStored: 100_000 };

/** A small seeded generator (mulberry32), so a failing run can be told by its seed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** What a thread must hold: content by seq (index + 1); `own` when an Add on this thread wrote it. */
interface ModelThread {
  readonly id: string;
  readonly messages: { content: string; own: boolean }[];
  readonly parent: { threadId: string; atSeq: number } | undefined;
}

/** The acknowledged calls, and what went against the contract (each a test failure). */
class Ledger {
  adds = 0;
  forks = 0;
  rewinds = 0;
  clears = 0;
  /** Attempts answered with a code a client retries, or cut by a fault. */
  retried = 0;
  /**
   * Calls answered after a failed attempt (whose outcome the client did not
   * know): the event of the thread the call wrote, between the first
   * attempt's start and the last's, tells whether an earlier attempt had
   * been stored, so the answer was a replay.
   */
  readonly retriedCalls: RetriedCall[] = [];
  /** Every acknowledged Fork: new thread id -> parent and fork point. */
  readonly forked = new Map<string, { parent: string; atSeq: number }>();
  readonly anomalies: string[] = [];
  #acked = 0;
  #waiters: { at: number; resolve: () => void }[] = [];

  acked(): void {
    this.#acked++;
    for (const w of this.#waiters.filter((x) => this.#acked >= x.at)) w.resolve();
    this.#waiters = this.#waiters.filter((x) => this.#acked < x.at);
  }

  /** Resolves once `n` more calls have been acknowledged. */
  more(n: number): Promise<void> {
    const at = this.#acked + n;
    return new Promise((resolve) => this.#waiters.push({ at, resolve }));
  }
}

/** The compiled server, restarted on a new port after a kill: writers call `client`. */
class Service {
  server: ServerProcess | undefined;
  client: MemoryGrpcClient | undefined;
  /** True from a kill until the next start: every failed call then is the fault's. */
  down = false;
  readonly #old: MemoryGrpcClient[] = [];

  constructor(readonly url: string) {}

  async start(): Promise<void> {
    this.server = await startServerProcess(["--store", this.url, "--event-retention", "1000000"]);
    this.client = createGrpcClient(this.server.address);
    this.down = false;
  }

  async kill(): Promise<void> {
    this.down = true;
    if (this.server !== undefined) await killHard(this.server.child);
    if (this.client !== undefined) this.#old.push(this.client);
  }

  async stop(): Promise<void> {
    await this.kill();
    for (const c of this.#old) c.close();
  }
}

type Kind = "messages_added" | "thread_forked" | "thread_rewound" | "thread_cleared";

interface RetriedCall {
  kind: Kind;
  threadId: string;
  /** Date.now() at the first attempt and at the last (the one answered). */
  first: number;
  last: number;
}

type Attempt<T> = { ok: T; attempts: number } | { err: ServiceError; attempts: number };

/** Whether a failed attempt is one a client retries with the same request (or a fault's doing). */
function retryable(err: ServiceError, service: Service, client: MemoryGrpcClient): boolean {
  if (service.down || client !== service.client) return true;
  return err.code === GrpcStatus.UNAVAILABLE || err.code === GrpcStatus.DEADLINE_EXCEEDED;
}

/** One writer: its threads, the model of each, and the loop of calls. */
class Writer {
  readonly threads = new Map<string, ModelThread>();
  /** Ids it has cleared: an Add may create one again (a new thread, no parent). */
  readonly cleared: string[] = [];
  #n = 0;
  #stopped = false;
  #abandoned = false;
  #running: Promise<void> | undefined;
  readonly random: () => number;

  constructor(
    readonly name: string,
    readonly seed: number,
    readonly service: Service,
    readonly ledger: Ledger,
  ) {
    this.random = rng(seed);
  }

  start(): void {
    this.#running = this.#run();
  }

  /** Stops after the call in flight has its definite answer. */
  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#running;
  }

  /** Gives up at once, the call in flight unanswered: a failed case's clean-up. */
  async abandon(): Promise<void> {
    this.#stopped = true;
    this.#abandoned = true;
    await this.#running?.catch(() => {});
  }

  #pick<T>(items: readonly T[]): T {
    const item = items[Math.floor(this.random() * items.length)];
    if (item === undefined) throw new Error("picked from nothing");
    return item;
  }

  #int(lo: number, hi: number): number {
    return lo + Math.floor(this.random() * (hi - lo + 1));
  }

  async #run(): Promise<void> {
    while (!this.#stopped) {
      const live = [...this.threads.values()];
      const r = this.random();
      if (live.length === 0 || r < 0.05) await this.#add(this.#newTarget());
      else if (r < 0.5) await this.#add(this.#pick(live).id);
      else if (r < 0.72) await this.#fork(this.#pick(live));
      else if (r < 0.9) await this.#rewind(this.#pick(live));
      else if (r < 0.9 + (live.length > 10 ? 0.1 : 0.04)) await this.#clear(this.#pick(live));
      else await this.#add(this.#pick(live).id);
    }
  }

  /** A thread id to create: a new root, or one cleared before. */
  #newTarget(): string {
    if (this.cleared.length > 0 && this.random() < 0.4) {
      const i = Math.floor(this.random() * this.cleared.length);
      const [id] = this.cleared.splice(i, 1);
      if (id !== undefined && !this.threads.has(id)) return id;
    }
    return `${this.name}-r${this.#n++}`;
  }

  /** Sends `call` until it has a definite answer (the same request every time). */
  async #call<T>(
    kind: Kind,
    threadId: string,
    call: (c: MemoryGrpcClient, options: { deadline: number }) => Promise<T>,
  ): Promise<Attempt<T>> {
    let first = 0;
    // Some first attempts with a deadline too short to see the answer, while the server
    // goes on and may store the call: outcomes a client does not know, faults or not.
    const impatient = this.random() < IMPATIENT;
    for (let attempts = 1; ; attempts++) {
      if (this.#abandoned) throw new Error("abandoned");
      const client = this.service.client;
      if (client === undefined || this.service.down) {
        await new Promise((r) => setTimeout(r, 50));
        attempts--;
        continue;
      }
      const last = Date.now();
      if (attempts === 1) first = last;
      const retried = () => {
        if (attempts > 1) this.ledger.retriedCalls.push({ kind, threadId, first, last });
      };
      try {
        const ms = impatient && attempts === 1 ? this.#int(2, 20) : CALL_DEADLINE_MS;
        const ok = await call(client, { deadline: Date.now() + ms });
        retried();
        return { ok, attempts };
      } catch (e) {
        const err = e as ServiceError;
        if (!retryable(err, this.service, client)) {
          retried();
          return { err, attempts };
        }
        this.ledger.retried++;
        await new Promise((r) => setTimeout(r, 30 + Math.floor(this.random() * 40)));
      }
    }
  }

  async #add(threadId: string): Promise<void> {
    const op = this.#n++;
    const r = this.random();
    const count = r < 0.6 ? this.#int(1, 5) : r < 0.9 ? this.#int(10, 60) : this.#int(100, 200);
    const contents = Array.from(
      { length: count },
      (_, i) => `${this.name}.${op}.${i}${"x".repeat(this.#int(0, 80))}`,
    );
    const requestId = `${this.name}-add-${op}`;
    const res = await this.#call("messages_added", threadId, (c, o) =>
      c.add(
        {
          threadId,
          strategy,
          requestId,
          messages: contents.map((content) => ({ role: Role.USER, content })),
        },
        o,
      ),
    );
    if ("err" in res) {
      this.ledger.anomalies.push(`Add ${requestId} on ${threadId}: ${explain(res.err)}`);
      return;
    }
    let t = this.threads.get(threadId);
    if (t === undefined) {
      t = { id: threadId, messages: [], parent: undefined };
      this.threads.set(threadId, t);
    }
    const want = t.messages.length + 1;
    if (Number(res.ok.firstSeq) !== want || Number(res.ok.lastSeq) !== want + count - 1) {
      this.ledger.anomalies.push(
        `Add ${requestId} on ${threadId} acknowledged at ${res.ok.firstSeq}-${res.ok.lastSeq}, not ${want}-${want + count - 1}`,
      );
    }
    for (const content of contents) t.messages.push({ content, own: true });
    this.ledger.adds++;
    this.ledger.acked();
  }

  async #fork(parent: ModelThread): Promise<void> {
    const op = this.#n++;
    const newThreadId = `${this.name}-f${op}`;
    const last = parent.messages.length;
    const atEnd = this.random() < 0.4;
    const atSeq = atEnd ? last : this.#int(0, last);
    const checked = this.random() < 0.5;
    const requestId = `${this.name}-fork-${op}`;
    const res = await this.#call("thread_forked", newThreadId, (c, o) =>
      c.fork(
        {
          threadId: parent.id,
          newThreadId,
          requestId,
          ...(atEnd ? {} : { atSeq: BigInt(atSeq) }),
          ...(checked ? { expectedLastSeq: BigInt(last) } : {}),
        },
        o,
      ),
    );
    let thread: Thread | undefined;
    if ("err" in res) {
      // A retry of a Fork that was stored answers the first response: ALREADY_EXISTS here
      // means the request id's record was lost (or the first attempt was not the one stored).
      this.ledger.anomalies.push(
        `Fork ${requestId} ${parent.id}->${newThreadId}@${atSeq} (attempt ${res.attempts}): ${explain(res.err)}`,
      );
      if (res.err.code !== GrpcStatus.ALREADY_EXISTS) return;
      thread = (await this.service.client?.get({ threadId: newThreadId, limit: 1 }))?.thread;
      if (thread === undefined) return;
    } else thread = res.ok.thread;
    if (
      thread?.parent?.threadId !== parent.id ||
      Number(thread.parent.atSeq) !== atSeq ||
      Number(thread.lastSeq) !== atSeq
    ) {
      this.ledger.anomalies.push(
        `Fork ${requestId} ${parent.id}->${newThreadId}@${atSeq} answered parent ` +
          `${thread?.parent?.threadId}@${thread?.parent?.atSeq}, last_seq ${thread?.lastSeq}`,
      );
    }
    this.threads.set(newThreadId, {
      id: newThreadId,
      messages: parent.messages.slice(0, atSeq).map((m) => ({ content: m.content, own: false })),
      parent: { threadId: parent.id, atSeq },
    });
    this.ledger.forked.set(newThreadId, { parent: parent.id, atSeq });
    this.ledger.forks++;
    this.ledger.acked();
  }

  async #rewind(t: ModelThread): Promise<void> {
    const op = this.#n++;
    const last = t.messages.length;
    // Mostly a few messages back; sometimes far, below a fork point.
    const toSeq = this.random() < 0.7 ? Math.max(0, last - this.#int(0, 20)) : this.#int(0, last);
    const checked = this.random() < 0.5;
    const requestId = `${this.name}-rewind-${op}`;
    const res = await this.#call("thread_rewound", t.id, (c, o) =>
      c.rewind(
        {
          threadId: t.id,
          toSeq: BigInt(toSeq),
          requestId,
          ...(checked ? { expectedLastSeq: BigInt(last) } : {}),
        },
        o,
      ),
    );
    if ("err" in res) {
      // ABORTED (expected_last_seq) or FAILED_PRECONDITION after a retry: the first attempt
      // was stored and its record not replayed. Read what the thread holds to go on.
      this.ledger.anomalies.push(
        `Rewind ${requestId} ${t.id} to ${toSeq} (attempt ${res.attempts}): ${explain(res.err)}`,
      );
      const got = await this.service.client?.get({ threadId: t.id, limit: 1 });
      if (Number(got?.thread?.lastSeq) !== toSeq) return;
    } else {
      const want = last - toSeq;
      if (Number(res.ok.thread?.lastSeq) !== toSeq || res.ok.removedCount !== want) {
        this.ledger.anomalies.push(
          `Rewind ${requestId} ${t.id} to ${toSeq} answered last_seq ${res.ok.thread?.lastSeq}, removed ${res.ok.removedCount} (not ${want})`,
        );
      }
    }
    t.messages.length = toSeq;
    this.ledger.rewinds++;
    this.ledger.acked();
  }

  async #clear(t: ModelThread): Promise<void> {
    const res = await this.#call("thread_cleared", t.id, (c, o) => c.clear({ threadId: t.id }, o));
    if ("err" in res) {
      this.ledger.anomalies.push(`Clear ${t.id}: ${explain(res.err)}`);
      return;
    }
    // A retry of a Clear that was applied finds nothing to clear.
    if (res.ok.clearedThreads !== 1 && !(res.attempts > 1 && res.ok.clearedThreads === 0)) {
      this.ledger.anomalies.push(`Clear ${t.id} cleared ${res.ok.clearedThreads} threads`);
    }
    this.threads.delete(t.id);
    this.cleared.push(t.id);
    this.ledger.clears++;
    this.ledger.acked();
  }
}

function explain(err: ServiceError): string {
  return `${GrpcStatus[err.code] ?? err.code}: ${err.details ?? err.message}`;
}

type Q = (sql: string, params?: unknown[]) => Promise<Record<string, unknown>[]>;

/**
 * The tables' own accounts, with SQL (no model needed): what is wrong, one
 * line each. A frozen segment's refs equal the lineage entries naming it
 * (an unnamed segment is an orphan) and its count/bytes its message rows;
 * every message row belongs to one segment or one thread's owned head (and
 * each head's rows are seqs last_seq - stored + 1 .. last_seq, stored and
 * bytes counting them); each lineage entry's seqs are all in its segment,
 * the entries and head contiguous; the namespace's usage equals the threads
 * and message rows stored.
 */
async function auditTables(q: Q): Promise<string[]> {
  const problems: string[] = [];
  const refs = await q(
    `WITH named AS (
       SELECT t.namespace, e->>0 AS segment_id, count(*)::int AS n
       FROM threads t CROSS JOIN LATERAL jsonb_array_elements(t.lineage::jsonb) e
       WHERE t.lineage IS NOT NULL GROUP BY 1, 2)
     SELECT coalesce(s.segment_id, n.segment_id) AS segment, s.refs::int AS refs, n.n AS named
     FROM segments s FULL JOIN named n ON n.namespace = s.namespace AND n.segment_id = s.segment_id
     WHERE s.refs IS DISTINCT FROM n.n OR s.refs <= 0`,
  );
  for (const r of refs) {
    problems.push(
      `segment ${JSON.stringify(r.segment)}: refs ${r.refs ?? "(no row)"}, named by ${r.named ?? 0} lineage entries`,
    );
  }
  const counts = await q(
    `SELECT s.segment_id, s.count::int AS count, s.bytes::int AS bytes,
       coalesce(m.n, 0)::int AS n, coalesce(m.b, 0)::int AS b
     FROM segments s LEFT JOIN (
       SELECT namespace, thread_id, count(*) AS n, sum(octet_length(content)) AS b
       FROM messages GROUP BY 1, 2) m ON m.namespace = s.namespace AND m.thread_id = s.segment_id
     WHERE s.count <> coalesce(m.n, 0) OR s.bytes <> coalesce(m.b, 0)`,
  );
  for (const r of counts) {
    problems.push(
      `segment ${JSON.stringify(r.segment_id)}: count ${r.count}/bytes ${r.bytes}, holds ${r.n} rows/${r.b} bytes`,
    );
  }
  const heads = await q(
    `SELECT t.thread_id, t.last_seq::int AS last_seq, t.stored::int AS stored, t.bytes::int AS bytes,
       coalesce(m.n, 0)::int AS n, coalesce(m.b, 0)::int AS b, m.lo::int AS lo, m.hi::int AS hi
     FROM threads t LEFT JOIN (
       SELECT namespace, thread_id, count(*) AS n, sum(octet_length(content)) AS b,
         min(seq) AS lo, max(seq) AS hi
       FROM messages GROUP BY 1, 2) m
       ON m.namespace = t.namespace AND m.thread_id = coalesce(t.head, t.thread_id)
     WHERE t.stored <> coalesce(m.n, 0) OR t.bytes <> coalesce(m.b, 0)
       OR (t.stored > 0 AND (m.lo <> t.last_seq - t.stored + 1 OR m.hi <> t.last_seq))`,
  );
  for (const r of heads) {
    problems.push(
      `thread ${r.thread_id}: head stored ${r.stored}/bytes ${r.bytes} ending at ${r.last_seq}, ` +
        `holds ${r.n} rows/${r.b} bytes, seqs ${r.lo}-${r.hi}`,
    );
  }
  const owners = await q(
    `SELECT m.thread_id AS segment, count(*)::int AS n,
       EXISTS (SELECT 1 FROM segments s WHERE s.namespace = m.namespace AND s.segment_id = m.thread_id) AS frozen,
       (SELECT count(*)::int FROM threads t WHERE t.namespace = m.namespace
          AND coalesce(t.head, t.thread_id) = m.thread_id) AS heads
     FROM messages m GROUP BY m.namespace, m.thread_id`,
  );
  for (const r of owners) {
    const holders = (r.frozen ? 1 : 0) + Number(r.heads);
    if (holders !== 1) {
      problems.push(
        `message rows of ${JSON.stringify(r.segment)} (${r.n}): ${r.frozen ? "a frozen segment" : "no segment"} and the head of ${r.heads} threads`,
      );
    }
  }
  const entries = await q(
    `SELECT t.thread_id, t.last_seq::int AS last_seq, t.stored::int AS stored, e.ord::int AS ord,
       e.v->>0 AS segment, (e.v->>1)::int AS low, (e.v->>2)::int AS through,
       (SELECT count(*)::int FROM messages m WHERE m.namespace = t.namespace
          AND m.thread_id = e.v->>0 AND m.seq BETWEEN (e.v->>1)::int AND (e.v->>2)::int) AS held
     FROM threads t CROSS JOIN LATERAL jsonb_array_elements(t.lineage::jsonb) WITH ORDINALITY AS e (v, ord)
     WHERE t.lineage IS NOT NULL ORDER BY t.thread_id, e.ord`,
  );
  const byThread = new Map<string, typeof entries>();
  for (const e of entries) {
    const id = String(e.thread_id);
    byThread.set(id, [...(byThread.get(id) ?? []), e]);
  }
  for (const [id, list] of byThread) {
    let next: number | undefined;
    for (const e of list) {
      const low = Number(e.low);
      const through = Number(e.through);
      if (Number(e.held) !== through - low + 1) {
        problems.push(
          `thread ${id}: entry ${e.ord} ${e.segment}[${low}, ${through}] holds ${e.held}`,
        );
      }
      if (next !== undefined && low !== next)
        problems.push(`thread ${id}: entry ${e.ord} starts at ${low}, not ${next}`);
      next = through + 1;
    }
    const last = list.at(-1);
    const headLow = Number(last?.last_seq) - Number(last?.stored) + 1;
    if (Number(last?.stored) > 0 && next !== headLow) {
      problems.push(`thread ${id}: head starts at ${headLow}, not ${next}`);
    }
    if (next !== undefined && next - 1 > Number(last?.last_seq)) {
      problems.push(`thread ${id}: entries reach ${next - 1}, past last_seq ${last?.last_seq}`);
    }
  }
  const usage = await q(
    `SELECT n.namespace, n.threads::int AS threads, n.messages::int AS messages, n.bytes::int AS bytes,
       (SELECT count(*)::int FROM threads t WHERE t.namespace = n.namespace) AS t,
       (SELECT count(*)::int FROM messages m WHERE m.namespace = n.namespace) AS m,
       (SELECT coalesce(sum(octet_length(content)), 0)::int FROM messages m WHERE m.namespace = n.namespace) AS b,
       (SELECT count(*)::int FROM messages m WHERE m.namespace = n.namespace AND m.extra::jsonb ?| array['name', 'toolCallId', 'toolCalls', 'metadata']) AS extra
     FROM namespaces n`,
  );
  for (const r of usage) {
    if (r.threads !== r.t || r.messages !== r.m || r.bytes !== r.b) {
      problems.push(
        `namespace ${JSON.stringify(r.namespace)}: usage ${r.threads} threads/${r.messages} messages/${r.bytes} bytes, ` +
          `stored ${r.t}/${r.m}/${r.b}`,
      );
    }
    // Content only (tokens aside): their bytes are their content's (core/quota.ts messageBytes).
    if (r.extra !== 0)
      problems.push(
        `namespace ${JSON.stringify(r.namespace)}: ${r.extra} messages with fields counted in bytes`,
      );
  }
  return problems;
}

/**
 * The audit, first on copies corrupted inside a transaction that is rolled
 * back (one reference count, the usage, an orphan message row, one head's
 * stored count): it must report each, so it cannot pass vacuously; then on
 * the tables as they are.
 */
async function auditWithSelfCheck(url: string): Promise<{ problems: string[]; caught: string[] }> {
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  const q: Q = async (sql, params = []) => (await db.query(sql, params)).rows;
  try {
    await db.query("BEGIN");
    const [seg] = await q("SELECT segment_id FROM segments ORDER BY segment_id LIMIT 1");
    const [head] = await q(
      "SELECT thread_id FROM threads WHERE stored > 0 ORDER BY thread_id LIMIT 1",
    );
    if (seg === undefined || head === undefined)
      throw new Error("nothing to corrupt: no segment or head");
    await q("UPDATE segments SET refs = refs + 1 WHERE namespace = $1 AND segment_id = $2", [
      NAMESPACE,
      seg.segment_id,
    ]);
    await q("UPDATE namespaces SET messages = messages + 1 WHERE namespace = $1", [NAMESPACE]);
    await q(
      `INSERT INTO messages (namespace, thread_id, seq, role, create_time, content)
       VALUES ($1, 'orphan' || chr(2), 1, 'user', 0, 'x')`,
      [NAMESPACE],
    );
    await q("UPDATE threads SET stored = stored - 1 WHERE namespace = $1 AND thread_id = $2", [
      NAMESPACE,
      head.thread_id,
    ]);
    const caught = await auditTables(q);
    await db.query("ROLLBACK");
    const expected = [
      `segment ${JSON.stringify(seg.segment_id)}: refs`,
      `namespace ${JSON.stringify(NAMESPACE)}: usage`,
      `message rows of ${JSON.stringify("orphan\u0002")}`,
      `thread ${head.thread_id}: head stored`,
    ];
    const missed = expected.filter((p) => !caught.some((c) => c.startsWith(p)));
    if (missed.length > 0) {
      throw new Error(
        `the audit missed corruptions: ${missed.join("; ")} (it said: ${caught.join("; ")})`,
      );
    }
    return { problems: await auditTables(q), caught };
  } finally {
    await db.end();
  }
}

/** Every page of a listing. */
async function listAll(client: MemoryGrpcClient, forksOf = ""): Promise<Thread[]> {
  const out: Thread[] = [];
  let pageToken = "";
  do {
    const page = await client.listThreads({
      pageSize: 1000,
      pageToken,
      forksOf,
      includeThreads: true,
    });
    out.push(...page.threads);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return out;
}

interface Verdict {
  wrong: string[];
  /** Acknowledged Adds still owed (a message of theirs is in the model), and those read whole. */
  addsOwed: number;
  addsPresent: number;
  /** Their messages. */
  owed: number;
  present: number;
  messages: number;
  live: number;
  liveForks: number;
}

/** Every writer's live threads read back over gRPC, against the model. */
async function verify(client: MemoryGrpcClient, writers: readonly Writer[]): Promise<Verdict> {
  const wrong: string[] = [];
  const v = { owed: 0, present: 0, messages: 0, live: 0, liveForks: 0 };
  const addsOwed = new Set<string>();
  const addsMissing = new Set<string>();
  const model = new Map<string, ModelThread>();
  for (const w of writers) for (const [id, t] of w.threads) model.set(id, t);
  for (const t of model.values()) {
    v.live++;
    if (t.parent !== undefined) v.liveForks++;
    const got = await client.get({ threadId: t.id, limit: 0 });
    const seqs = got.messages.map((m) => Number(m.seq));
    const last = Number(got.thread?.lastSeq);
    if (seqs.some((s, i) => s !== i + 1) || seqs.length !== last) {
      wrong.push(`${t.id}: seqs ${seqs[0]}..${seqs.at(-1)} (${seqs.length}) with last_seq ${last}`);
    }
    if (last !== t.messages.length)
      wrong.push(`${t.id}: last_seq ${last}, not ${t.messages.length}`);
    const contents = got.messages.map((m) => m.content);
    if (new Set(contents).size !== contents.length) wrong.push(`${t.id}: a message stored twice`);
    const bySeq = new Map(got.messages.map((m) => [Number(m.seq), m.content]));
    for (const [i, m] of t.messages.entries()) {
      v.messages++;
      const here = bySeq.get(i + 1) === m.content;
      if (m.own) {
        // Content is "<writer>.<op>.<i>x…": the Add is <thread>/<writer>.<op>.
        const add = `${t.id}/${m.content.split(".").slice(0, 2).join(".")}`;
        addsOwed.add(add);
        v.owed++;
        if (here) v.present++;
        else addsMissing.add(add);
      }
      if (!here)
        wrong.push(
          `${t.id}:${i + 1} ${m.own ? "(own)" : "(shared)"} is ${bySeq.get(i + 1)?.slice(0, 20)}`,
        );
    }
    const p = got.thread?.parent;
    const want = t.parent;
    if (p?.threadId !== want?.threadId || (want !== undefined && Number(p?.atSeq) !== want.atSeq)) {
      wrong.push(
        `${t.id}: parent ${p?.threadId}@${p?.atSeq}, not ${want?.threadId}@${want?.atSeq}`,
      );
    }
  }
  // ListThreads: exactly the live threads, each with its origin; forks_of lists each parent's forks.
  const listed = await listAll(client);
  const ids = listed.map((t) => t.threadId);
  const expectedIds = [...model.keys()].sort((a, b) =>
    Buffer.compare(Buffer.from(a), Buffer.from(b)),
  );
  if (JSON.stringify(ids) !== JSON.stringify(expectedIds)) {
    wrong.push(`ListThreads: ${ids.length} ids, not the ${expectedIds.length} live ones`);
  }
  for (const t of listed) {
    const want = model.get(t.threadId)?.parent;
    if (
      t.parent?.threadId !== want?.threadId ||
      (want !== undefined && Number(t.parent?.atSeq) !== want.atSeq)
    ) {
      wrong.push(`ListThreads ${t.threadId}: parent ${t.parent?.threadId}@${t.parent?.atSeq}`);
    }
  }
  const forksOf = new Map<string, string[]>();
  for (const t of model.values()) {
    if (t.parent !== undefined)
      forksOf.set(t.parent.threadId, [...(forksOf.get(t.parent.threadId) ?? []), t.id]);
  }
  for (const [parent, forks] of forksOf) {
    const got = (await listAll(client, parent)).map((t) => t.threadId);
    forks.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    if (JSON.stringify(got) !== JSON.stringify(forks)) {
      wrong.push(`ListThreads forks_of ${parent}: ${got.join(",")}, not ${forks.join(",")}`);
    }
  }
  return { wrong, addsOwed: addsOwed.size, addsPresent: addsOwed.size - addsMissing.size, ...v };
}

/** One thread_forked event per acknowledged Fork, naming its parent and fork point. */
async function checkForkEvents(url: string, ledger: Ledger): Promise<string[]> {
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  try {
    const r = await db.query<{ thread_id: string; body: string }>(
      "SELECT thread_id, body FROM events WHERE namespace = $1 AND type = 'thread_forked' ORDER BY seq",
      [NAMESPACE],
    );
    const wrong: string[] = [];
    const seen = new Map<string, number>();
    for (const e of r.rows) {
      seen.set(e.thread_id, (seen.get(e.thread_id) ?? 0) + 1);
      const body = JSON.parse(e.body) as { parentThreadId: string; atSeq: number };
      const acked = ledger.forked.get(e.thread_id);
      if (acked === undefined) wrong.push(`thread_forked of ${e.thread_id}: no acknowledged Fork`);
      else if (body.parentThreadId !== acked.parent || body.atSeq !== acked.atSeq) {
        wrong.push(`thread_forked of ${e.thread_id}: ${body.parentThreadId}@${body.atSeq}`);
      }
    }
    for (const id of ledger.forked.keys()) {
      if (seen.get(id) !== 1) wrong.push(`${seen.get(id) ?? 0} thread_forked events of ${id}`);
    }
    return wrong;
  } finally {
    await db.end();
  }
}

/**
 * Per kind, the calls answered after a failed attempt, and of them those an
 * earlier attempt had already stored (its event logged before the answered
 * attempt began): the retries that idempotency answered.
 */
async function retriesReplayed(
  url: string,
  ledger: Ledger,
): Promise<{ line: string; replayed: number }> {
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  try {
    const out = new Map<Kind, { calls: number; stored: number }>();
    for (const c of ledger.retriedCalls) {
      const r = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM events WHERE namespace = $1 AND thread_id = $2 AND type = $3
           AND time >= $4 AND time < $5`,
        [NAMESPACE, c.threadId, c.kind, c.first, c.last],
      );
      const k = out.get(c.kind) ?? { calls: 0, stored: 0 };
      k.calls++;
      if ((r.rows[0]?.n ?? 0) > 0) k.stored++;
      out.set(c.kind, k);
    }
    return {
      line: [...out].map(([kind, k]) => `${kind} ${k.calls} (${k.stored} replayed)`).join(", "),
      replayed: [...out.values()].reduce((n, k) => n + k.stored, 0),
    };
  } finally {
    await db.end();
  }
}

describe("Postgres store: Fork, Rewind and Clear under kill -9", () => {
  let postgres: PostgresServer;
  const services: Service[] = [];
  const everyWriter: Writer[] = [];
  beforeAll(async () => {
    postgres = await startPostgresServer();
  }, 60_000);
  afterAll(async () => {
    await Promise.all(everyWriter.map((w) => w.abandon()));
    for (const s of services) await s.stop();
    await postgres?.stop();
  });

  /**
   * Six writers through a started service; `fault` runs CYCLES times, each
   * after OPS_PER_CYCLE (and a random part) more acknowledged calls; then
   * the writers settle and everything is checked.
   */
  async function run(label: string, fault: (service: Service, cycle: number) => Promise<void>) {
    const began = Date.now();
    const url = await postgres.createDatabase();
    const service = new Service(url);
    services.push(service);
    await service.start();
    const ledger = new Ledger();
    const seed = Math.floor(Math.random() * 2 ** 31);
    const writers = Array.from(
      { length: WRITERS },
      (_, i) => new Writer(`w${i}`, seed + i, service, ledger),
    );
    everyWriter.push(...writers);
    for (const w of writers) w.start();
    for (let cycle = 1; cycle <= CYCLES; cycle++) {
      await ledger.more(OPS_PER_CYCLE + Math.floor(Math.random() * 100));
      await fault(service, cycle);
    }
    await ledger.more(OPS_PER_CYCLE);
    await Promise.all(writers.map((w) => w.stop()));
    const client = service.client;
    if (client === undefined) throw new Error("no client");
    const verdict = await verify(client, writers);
    const events = await checkForkEvents(url, ledger);
    const audit = await auditWithSelfCheck(url);
    const replayed = await retriesReplayed(url, ledger);
    const [segs] = await queryPostgres<{ n: number; refs: number }>(
      url,
      "SELECT count(*)::int AS n, coalesce(sum(refs), 0)::int AS refs FROM segments",
    );
    console.log(
      `postgres fork crash (${label}, seed ${seed}): cycles=${CYCLES} ` +
        `acked adds=${ledger.adds} forks=${ledger.forks} rewinds=${ledger.rewinds} clears=${ledger.clears}; ` +
        `adds owed=${verdict.addsOwed} present=${verdict.addsPresent} ` +
        `(their messages owed=${verdict.owed} present=${verdict.present}); messages=${verdict.messages} ` +
        `live threads=${verdict.live} live forks=${verdict.liveForks}; segments=${segs?.n} refs=${segs?.refs}; ` +
        `attempts retried=${ledger.retried}; calls answered after a retry: ${replayed.line || "none"}; ` +
        `wrong=${verdict.wrong.length} anomalies=${ledger.anomalies.length} events wrong=${events.length} ` +
        `audit problems=${audit.problems.length} (self-check caught ${audit.caught.length}); ${Date.now() - began} ms`,
    );
    expect(ledger.anomalies).toEqual([]);
    expect(verdict.wrong.slice(0, 40)).toEqual([]);
    expect(events).toEqual([]);
    expect(audit.problems).toEqual([]);
    expect(verdict.present).toBe(verdict.owed);
    expect(verdict.addsPresent).toBe(verdict.addsOwed);
    expect(ledger.forks).toBeGreaterThan(CYCLES * 10);
    expect(ledger.rewinds).toBeGreaterThan(CYCLES * 5);
    expect(ledger.clears).toBeGreaterThan(0);
    expect(Number(segs?.n)).toBeGreaterThan(0);
    expect(ledger.retried).toBeGreaterThan(0);
    // Retries of calls an earlier attempt had stored: the request ids' replays were tested.
    expect(replayed.replayed).toBeGreaterThan(0);
    await service.stop();
  }

  it("loses nothing acknowledged when PostgreSQL is killed with SIGKILL and restarted, 3 times", {
    timeout: 60_000,
  }, async () => {
    await run("PostgreSQL killed", async () => {
      await postgres.kill();
      await new Promise((r) => setTimeout(r, 200 + Math.floor(Math.random() * 300)));
      await postgres.restart();
    });
  });

  it("loses nothing acknowledged when the service is killed with SIGKILL and restarted, 3 times", {
    timeout: 60_000,
  }, async () => {
    await run("service killed", async (service) => {
      await service.kill();
      await new Promise((r) => setTimeout(r, 100 + Math.floor(Math.random() * 200)));
      await service.start();
    });
  });
});
