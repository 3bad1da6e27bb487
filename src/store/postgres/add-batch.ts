import { decideAppend } from "../../core/append.js";
import { requestsToKeep } from "../../core/idempotency.js";
import { floorOf } from "../../core/lineage.js";
import { checkQuotas } from "../../core/quota.js";
import { isExpired, ttlAfterAdd, ttlFields } from "../../core/ttl.js";
import type { Labels, StoredMessage, ThreadState } from "../../core/types.js";
import { appendDelta } from "../../core/usage.js";
import type { AppendCommand, AppendResult, StoreLimits } from "../store.js";
import {
  beginLockAndLoad,
  LOAD_RECORDS,
  LOAD_THREADS,
  PRUNE_RECORDS,
  REPLACE_LABELS,
  WRITE_ADDS,
  writeAddsParams,
} from "./add-batch-sql.js";
import { layoutOf, type ThreadRow, toThread } from "./codec.js";
import type { LoggedFrom, NamespaceLog, NsColumns, Query } from "./events.js";
import { type RequestRecord, replayOf } from "./requests.js";
import { stateAfterAdd } from "./writes.js";

/** A thread as the batch sees it: as stored, then as each Add decided leaves it. */
export interface ThreadEntry {
  state: ThreadState;
  stored: number;
  bytes: number;
  /** The owned head's segment id: where its messages go. */
  headId: string;
  /**
   * The messages it holds in frozen segments (0 when it shares nothing):
   * they count towards its trim, which then goes one by one (writes.ts append).
   */
  shared: number;
}

/** A row of LOAD_THREADS: a thread's, or NULLs and whether its id names a frozen segment. */
type LoadedRow =
  | (ThreadRow & { wanted: string; frozen_id: null })
  | { wanted: string; frozen_id: true; thread_id: null };

/** A simple-protocol query of several statements on the group's connection: each one's rows. */
export type SimpleQuery = (sql: string) => Promise<Record<string, unknown>[][]>;

/** What an Add's request-id record keeps: its first result. */
type RecordedAdd = Omit<AppendResult, "replayed">;

/** The rows a batch writes, each thread's and record's last version only. */
export interface BatchWrites {
  /** `segment`: the owned head the message goes to (the messages' thread_id column). */
  messages: { segment: string; message: StoredMessage }[];
  threads: Map<string, ThreadEntry>;
  labels: Map<string, Labels>;
  /** thread id -> request id -> the record to write. */
  records: Map<string, Map<string, RequestRecord>>;
  /** thread id -> the newest retention cut of the Adds that recorded there. */
  pruneThrough: Map<string, number>;
}

const NO_TRIM = { count: 0, bytes: 0, through: 0 };

/**
 * Adds of one namespace decided together and written set-wise: the
 * namespace's row is locked and the Adds' threads and request-id records
 * read in two statements (the lock and the threads' read in the same round
 * trip as BEGIN when the batch starts the group: beginAndLoad); each Add is then decided in
 * memory, in arrival order, by the same core functions as writes.ts append
 * (an Add sees the ones before it: consecutive seqs, a replay of a request
 * recorded earlier in the batch); a refusal changes nothing, so it needs no
 * savepoint. `write` then stores them all in a fixed number of statements,
 * whatever their count: messages, thread rows, records and the namespace's
 * log and row in one, the retention of records in one (when any was
 * recorded) and labels in one (when any Add set some).
 *
 * An Add whose decision needs more than those rows is left to writes.ts
 * append (`decide` answers undefined; the caller writes the batch first):
 * an expired thread (removed first), a trim (it reads the thread's oldest
 * messages), and a retry of a request id in a thread where this batch
 * already recorded one (whether the record outlived the per-thread limit
 * depends on what the batch recorded: the database answers it exactly).
 */
export class AddBatch {
  readonly namespace: string;
  readonly #q: Query;
  readonly #log: NamespaceLog;
  readonly #lim: StoreLimits;
  readonly #threads = new Map<string, ThreadEntry>();
  /** Ids of the batch that still name a frozen segment: a thread created so opens another head. */
  #frozenIds = new Set<string>();
  /** Records read or written: thread id -> request id -> record. */
  readonly #records = new Map<string, Map<string, RequestRecord>>();
  #writes: BatchWrites = emptyWrites();

  constructor(q: Query, log: NamespaceLog, lim: StoreLimits, namespace: string) {
    this.#q = q;
    this.#log = log;
    this.#lim = lim;
    this.namespace = namespace;
  }

  /** With the namespace locked, reads the threads and request-id records the Adds `cmds` refer to. */
  async load(cmds: readonly AppendCommand[]): Promise<void> {
    const ids = [...new Set(cmds.map((c) => c.threadId))];
    const rows = await this.#q<LoadedRow>(
      LOAD_THREADS,
      [this.namespace, ids],
      "windlass_load_threads",
    );
    await this.#adopt(cmds, rows);
  }

  /**
   * As `load`, as the transaction's first statements: BEGIN, the lock and
   * the read of the threads in one round trip (beginLockAndLoad). A
   * namespace without its row yet is locked as NamespaceLog.lock does (it
   * creates the row) and read again.
   */
  async beginAndLoad(simple: SimpleQuery, cmds: readonly AppendCommand[]): Promise<void> {
    const ids = [...new Set(cmds.map((c) => c.threadId))];
    const [, locked, rows] = await simple(beginLockAndLoad(this.namespace, ids));
    const ns = locked?.[0] as NsColumns | undefined;
    if (ns === undefined) {
      await this.#log.lock(this.namespace);
      await this.load(cmds);
      return;
    }
    this.#log.adopt(this.namespace, ns);
    await this.#adopt(cmds, (rows ?? []) as unknown as LoadedRow[]);
  }

  /** Takes the threads read, then reads the request-id records of the Adds that have one. */
  async #adopt(cmds: readonly AppendCommand[], loaded: readonly LoadedRow[]): Promise<void> {
    this.#frozenIds = new Set(loaded.filter((r) => r.frozen_id === true).map((r) => r.wanted));
    for (const r of loaded) {
      if (r.thread_id === null) continue;
      this.#threads.set(r.thread_id, {
        state: toThread(r),
        stored: r.stored,
        bytes: r.bytes,
        headId: r.head ?? r.thread_id,
        shared: sharedOf(r),
      });
    }
    const keyed = cmds.filter((c) => c.requestId !== "" && this.#threads.has(c.threadId));
    if (keyed.length === 0) return;
    const records = await this.#q<RequestRecord & { thread_id: string; request_id: Buffer }>(
      LOAD_RECORDS,
      [
        this.namespace,
        keyed.map((c) => c.threadId),
        keyed.map((c) => Buffer.from(c.requestId, "utf8")),
      ],
      "windlass_load_records",
    );
    for (const r of records) {
      const { thread_id, request_id, ...record } = r;
      this.#recordsOf(thread_id, this.#records).set(request_id.toString("utf8"), record);
    }
  }

  /**
   * Decides the Add and queues its rows: its result, or undefined when it
   * must run as writes.ts append (see the class). Throws the refusal, with
   * nothing queued or changed.
   */
  decide(cmd: AppendCommand): AppendResult | undefined {
    const ns = this.#log.held(this.namespace);
    if (ns === undefined) throw new Error("postgres store: a batch of an unlocked namespace");
    const entry = this.#threads.get(cmd.threadId);
    if (entry !== undefined && isExpired(entry.state, cmd.now)) return undefined;
    // A thread created under a frozen segment's id needs a new head id (nextval): one by one.
    // A thread with a lineage keeps it (its Add appends to its owned head, whose id its row
    // holds) unless it trims: that check below counts its shared messages.
    if (entry === undefined && this.#frozenIds.has(cmd.threadId)) return undefined;
    if (entry !== undefined && cmd.requestId !== "") {
      const seen = this.#records.get(cmd.threadId)?.get(cmd.requestId);
      if (seen !== undefined && this.#writes.records.has(cmd.threadId)) return undefined;
      const first = replayOf<RecordedAdd>(seen, this.#lim, cmd, "add");
      if (first !== undefined) return { ...first, replayed: true };
    }
    const existing = entry?.state;
    const strategy = decideAppend(existing, cmd);
    const stored = entry?.stored ?? 0;
    if (stored + (entry?.shared ?? 0) + cmd.messages.length > strategy.maxStored) return undefined;
    const created = existing === undefined;
    const { state, lastSeqBefore, added } = stateAfterAdd(existing, strategy, cmd);
    const delta = appendDelta(created, cmd.messages, NO_TRIM);
    checkQuotas(this.#lim, ns.usage, delta);

    // Decided: from here on, nothing refuses it.
    const ttl = ttlAfterAdd(cmd.ttlMs, existing?.ttlMs, created, cmd.defaultTtlMs);
    delete state.ttlMs;
    delete state.expireTime;
    Object.assign(state, ttlFields(ttl, cmd.now));
    if (cmd.labels !== undefined) {
      state.labels = { ...cmd.labels };
      this.#writes.labels.set(cmd.threadId, cmd.labels);
    }
    const headId = entry?.headId ?? cmd.threadId;
    const after = {
      state,
      stored: stored + added.length,
      bytes: (entry?.bytes ?? 0) + delta.bytes,
      headId,
      shared: entry?.shared ?? 0,
    };
    this.#threads.set(cmd.threadId, after);
    this.#writes.threads.set(cmd.threadId, after);
    for (const message of added) this.#writes.messages.push({ segment: headId, message });
    this.#log.use(this.namespace, delta);
    const firstSeq = added.length > 0 ? lastSeqBefore + 1 : 0;
    const lastSeq = added.length > 0 ? state.lastSeq : 0;
    if (cmd.requestId !== "") this.#record(cmd, { thread: state, firstSeq, lastSeq });
    if (added.length > 0) {
      this.#log.log(this.namespace, cmd.threadId, cmd.now, {
        type: "messages_added",
        firstSeq,
        lastSeq,
      });
    }
    return { thread: { ...state }, firstSeq, lastSeq, replayed: false };
  }

  /** Writes every Add decided so far, and the namespace's log; where its events start. */
  async write(): Promise<LoggedFrom[]> {
    const w = this.#writes;
    this.#writes = emptyWrites();
    const logged: LoggedFrom[] = [];
    if (w.threads.size > 0) {
      const log = await this.#log.take(this.namespace);
      if (log === undefined) throw new Error("postgres store: a batch of an unlocked namespace");
      const params = [...writeAddsParams(this.namespace, w), ...log.params];
      await this.#q(WRITE_ADDS, params, "windlass_write_adds");
      logged.push(...log.logged);
    }
    if (w.pruneThrough.size > 0) {
      const keepNewest = requestsToKeep(0, this.#lim).keepNewest;
      await this.#q(
        PRUNE_RECORDS,
        [this.namespace, [...w.pruneThrough.keys()], [...w.pruneThrough.values()], keepNewest],
        "windlass_prune_records",
      );
    }
    if (w.labels.size > 0) {
      const entries = [...w.labels].flatMap(([t, labels]) =>
        Object.entries(labels).map(([k, v]) => [t, k, v] as const),
      );
      await this.#q(
        REPLACE_LABELS,
        [
          this.namespace,
          [...w.labels.keys()],
          entries.map((e) => e[0]),
          entries.map((e) => e[1]),
          entries.map((e) => e[2]),
        ],
        "windlass_replace_labels",
      );
    }
    // Nothing written yet (every Add refused or replayed): the log's own statement.
    if (w.threads.size === 0) logged.push(...(await this.#log.flush([this.namespace])));
    return logged;
  }

  /** Records the Add's first result (writes.ts recordRequest's row), for retries in and after the batch. */
  #record(cmd: AppendCommand, first: RecordedAdd): void {
    const record: RequestRecord = {
      hash: cmd.requestHash,
      time: cmd.now,
      result: JSON.stringify(first),
      last_seq: first.lastSeq,
    };
    this.#recordsOf(cmd.threadId, this.#records).set(cmd.requestId, record);
    this.#recordsOf(cmd.threadId, this.#writes.records).set(cmd.requestId, record);
    const cut = requestsToKeep(cmd.now, this.#lim).dropThrough;
    const w = this.#writes.pruneThrough;
    w.set(cmd.threadId, Math.max(cut, w.get(cmd.threadId) ?? cut));
  }

  #recordsOf(
    threadId: string,
    all: Map<string, Map<string, RequestRecord>>,
  ): Map<string, RequestRecord> {
    let m = all.get(threadId);
    if (m === undefined) {
      m = new Map();
      all.set(threadId, m);
    }
    return m;
  }
}

/**
 * The messages a thread's row holds in frozen segments: its length as
 * thread-rows.ts planTrim counts it (last seq to its floor) less its owned head's.
 */
function sharedOf(r: ThreadRow): number {
  if (r.lineage === null) return 0;
  const layout = layoutOf(r);
  return r.last_seq - floorOf(layout.lineage, r.last_seq) + 1 - r.stored;
}

function emptyWrites(): BatchWrites {
  return {
    messages: [],
    threads: new Map(),
    labels: new Map(),
    records: new Map(),
    pruneThrough: new Map(),
  };
}
