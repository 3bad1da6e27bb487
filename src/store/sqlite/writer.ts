import { randomUUID } from "node:crypto";
import Database from "better-sqlite3";
import { decideAppend, keepsSummary, newThreadState, trimCountOf } from "../../core/append.js";
import { type ErrorCode, invalidArgument, MemoryError } from "../../core/errors.js";
import { checkQuotas, messageBytes, type NamespaceUsage } from "../../core/quota.js";
import { ttlAfterAdd, ttlFields } from "../../core/ttl.js";
import type { EventBody, StoredMessage, ThreadState } from "../../core/types.js";
import type {
  AppendCommand,
  AppendResult,
  CommitSummaryCommand,
  FoldFailureCommand,
  ImportThreadCommand,
  StoreLimits,
} from "../store.js";
import { SqliteLabels } from "./labels.js";
import {
  extraOf,
  MESSAGE_QUERIES,
  type MessageRow,
  NO_USAGE,
  type RecordedResult,
  type RequestRow,
  type ThreadRow,
  toMessage,
  toThread,
} from "./schema.js";
import { SqliteTtl } from "./ttl.js";
import { Activity, type WriteGate } from "./write-gate.js";

/** A write transaction's outcome, and what to do once it has committed. */
export interface Committed<T> {
  value: T;
  /** To publish. */
  events: LoggedEvent[];
  /** How the thread's messages changed: to bring its cached tail up to date. */
  messages?: MessagesChange;
  /** Incarnations that ended: to drop from the cache. */
  ended?: string[];
}

/**
 * An event as the worker logged it, at `position` in its namespace's log.
 * The store makes its cursor (a MAC, microseconds) on the main thread when
 * something reads it, which only Watch does.
 */
export type LoggedEvent = EventBody & { position: number; threadId: string; time: number };

/** What one commit did to a thread's messages (see MessageCache.update). */
export interface MessagesChange {
  incarnation: string;
  /** The thread was created by this commit: its messages are all known. */
  created: boolean;
  lastSeqBefore: number;
  added: StoredMessage[];
  /** Every message up to this seq was trimmed; 0 when none. */
  droppedThrough: number;
}

/** Every write the store makes, as the worker receives it. */
export type WriteOp =
  | { kind: "append"; cmd: AppendCommand }
  | { kind: "commitSummary"; cmd: CommitSummaryCommand }
  | { kind: "recordFoldFailure"; cmd: FoldFailureCommand }
  | { kind: "acquireLease"; namespace: string; threadId: string; ttlMs: number }
  | { kind: "releaseLease"; namespace: string; threadId: string; token: number }
  | { kind: "clear"; namespace: string; threadId: string; now: number }
  | { kind: "clearBatch"; namespace: string; now: number; limit: number }
  | { kind: "import"; cmd: ImportThreadCommand }
  | { kind: "sweepOne"; namespace: string; threadId: string; now: number };

/** An error as it crosses from the worker: a MemoryError keeps its code and field. */
export interface WireError {
  message: string;
  code?: MemoryError["code"];
  field?: string;
  retryAfterMs?: number;
}

export interface QueuedWrite {
  id: number;
  /** Its slot in the WriteGate: whoever changes it first decides whether it runs. */
  slot: number;
  op: WriteOp;
  /** The call's deadline (ms since the epoch): not taken after it. */
  deadline?: number;
}

export type WriteOutcome =
  | { id: number; ok: true; committed: Committed<unknown> }
  | { id: number; ok: false; error: WireError };

export function toWireError(thrown: unknown): WireError {
  const err = sqliteFault(thrown) ?? thrown;
  if (err instanceof MemoryError) {
    const e: WireError = { message: err.message, code: err.code };
    if (err.field !== undefined) e.field = err.field;
    if (err.retryAfterMs !== undefined) e.retryAfterMs = err.retryAfterMs;
    return e;
  }
  return { message: err instanceof Error ? err.message : String(err) };
}

export function fromWireError(e: WireError): Error {
  if (e.code === undefined) return new Error(`sqlite store: ${e.message}`);
  const options: { field?: string; retryAfterMs?: number } = {};
  if (e.field !== undefined) options.field = e.field;
  if (e.retryAfterMs !== undefined) options.retryAfterMs = e.retryAfterMs;
  return new MemoryError(e.code, e.message, options);
}

/**
 * The store's writes on the write connection (run in the worker). `runGroup`
 * commits a group of writes as one transaction, so one fsync covers them all;
 * each write runs in its own savepoint, so one that fails (a precondition, a
 * quota) is rolled back alone and the others still commit. The connection's
 * own busy timeout is short: `busyTimeoutMs` is waited out in slices of it.
 */
export function createWriter(
  db: Database.Database,
  lim: StoreLimits,
  gate: WriteGate,
  busyTimeoutMs: number,
) {
  const sql = {
    thread: db.prepare<[string, string], ThreadRow>(
      "SELECT * FROM threads WHERE namespace = ? AND thread_id = ?",
    ),
    insertThread: db.prepare<[string, string, string, string, number, number]>(
      `INSERT INTO threads (namespace, thread_id, incarnation, strategy, last_seq,
         summarized_through_seq, summary, summary_time, create_time, update_time)
       VALUES (?, ?, ?, ?, 0, 0, '', 0, ?, ?)`,
    ),
    updateThread: db.prepare<[string, number, number, string, number, number, number]>(
      `UPDATE threads SET strategy = ?, last_seq = ?, summarized_through_seq = ?, summary = ?,
         summary_time = ?, update_time = ? WHERE id = ?`,
    ),
    firstThreads: db.prepare<[string, number], ThreadRow>(
      "SELECT * FROM threads WHERE namespace = ? ORDER BY thread_id LIMIT ?",
    ),
    addThreadBytes: db.prepare<[number, number]>(
      "UPDATE threads SET bytes = bytes + ? WHERE id = ?",
    ),
    usage: db.prepare<[string], NamespaceUsage>(
      "SELECT threads, messages, bytes FROM namespace_usage WHERE namespace = ?",
    ),
    addUsage: db.prepare<[string, number, number, number]>(
      `INSERT INTO namespace_usage (namespace, threads, messages, bytes) VALUES (?, ?, ?, ?)
       ON CONFLICT (namespace) DO UPDATE SET threads = threads + excluded.threads,
         messages = messages + excluded.messages, bytes = bytes + excluded.bytes`,
    ),
    deleteThreadByKey: db.prepare<[number]>("DELETE FROM threads WHERE id = ?"),
    messagesFrom: db.prepare<[number, number, number], MessageRow>(MESSAGE_QUERIES.from).raw(),
    insertMessage: db.prepare<[number, number, string, number, string, string | null]>(
      "INSERT INTO messages (thread, seq, role, create_time, content, extra) VALUES (?, ?, ?, ?, ?, ?)",
    ),
    oldestSeq: db.prepare<[number], number | null>(MESSAGE_QUERIES.oldestSeq).pluck(),
    deleteMessagesThrough: db.prepare<[number, number]>(MESSAGE_QUERIES.deleteThrough),
    request: db.prepare<[number, string], RequestRow>(
      "SELECT hash, result, time FROM requests WHERE thread = ? AND request_id = ?",
    ),
    recordRequest: db.prepare<[number, string, string, string, number]>(
      "INSERT OR REPLACE INTO requests (thread, request_id, hash, result, time) VALUES (?, ?, ?, ?, ?)",
    ),
    dropRequestsBefore: db.prepare<[number, number]>(
      "DELETE FROM requests WHERE thread = ? AND time <= ?",
    ),
    countRequests: db
      .prepare<[number], number>("SELECT count(*) FROM requests WHERE thread = ?")
      .pluck(),
    dropOldestRequests: db.prepare<[number, number]>(
      `DELETE FROM requests WHERE no IN
         (SELECT no FROM requests WHERE thread = ? ORDER BY time, no LIMIT ?)`,
    ),
    lease: db.prepare<[string, string], { token: number; expires_at: number }>(
      "SELECT token, expires_at FROM fold_leases WHERE namespace = ? AND thread_id = ?",
    ),
    nextLeaseToken: db
      .prepare<[], number>(
        "UPDATE meta SET value = value + 1 WHERE key = 'lease_counter' RETURNING value",
      )
      .pluck(),
    setLease: db.prepare<[string, string, number, number]>(
      "INSERT OR REPLACE INTO fold_leases (namespace, thread_id, token, expires_at) VALUES (?, ?, ?, ?)",
    ),
    releaseLease: db.prepare<[string, string, number]>(
      "DELETE FROM fold_leases WHERE namespace = ? AND thread_id = ? AND token = ?",
    ),
    countEvent: db.prepare<[string], { last_seq: number; retained: number }>(
      `INSERT INTO event_logs (namespace, last_seq, retained, dropped_through) VALUES (?, 1, 1, 0)
       ON CONFLICT (namespace) DO UPDATE SET last_seq = last_seq + 1, retained = retained + 1
       RETURNING last_seq, retained`,
    ),
    insertEvent: db.prepare<[string, number, string, number, string, string]>(
      "INSERT INTO events (namespace, seq, thread_id, time, type, body) VALUES (?, ?, ?, ?, ?, ?)",
    ),
    dropEventsThrough: db.prepare<[string, number]>(
      "DELETE FROM events WHERE namespace = ? AND seq <= ?",
    ),
    setDropped: db.prepare<[number, number, string]>(
      "UPDATE event_logs SET retained = ?, dropped_through = ? WHERE namespace = ?",
    ),
  };
  const labelRows = new SqliteLabels(db);
  const ttlRows = new SqliteTtl(db);

  /** Appends an event inside the caller's transaction and drops old ones in chunks. */
  function logEvent(
    namespace: string,
    threadId: string,
    time: number,
    body: EventBody,
  ): LoggedEvent {
    const { type, ...fields } = body;
    const log = sql.countEvent.get(namespace);
    if (log === undefined) throw new Error("sqlite store: event_logs upsert returned nothing");
    sql.insertEvent.run(namespace, log.last_seq, threadId, time, type, JSON.stringify(fields));
    // Seqs of a namespace are consecutive, so the cut is found without a scan;
    // chunks keep the delete amortised O(1) per event, as in the memory store.
    const excess = log.retained - lim.eventRetention;
    if (excess > 0 && (excess >= 64 || log.retained > lim.eventRetention * 2)) {
      const cut = log.last_seq - lim.eventRetention;
      sql.dropEventsThrough.run(namespace, cut);
      sql.setDropped.run(lim.eventRetention, cut, namespace);
    }
    return { ...body, position: log.last_seq, threadId, time };
  }

  /** The thread's messages from seq `from` on (at most `limit`), oldest first. */
  function loadMessagesFrom(key: number, from: number, limit = -1): StoredMessage[] {
    return sql.messagesFrom.all(key, from, limit).map(toMessage);
  }

  /**
   * Trims the thread, inside the caller's transaction, to its strategy's
   * max_stored. Returns what was dropped: how many, their bytes and the
   * newest dropped seq (0: none).
   */
  function trim(
    key: number,
    state: ThreadState,
  ): { count: number; bytes: number; through: number } {
    // Stored seqs are contiguous (appends add at the end, trims cut at the
    // front), so counting needs no scan, and only the front that goes is read.
    const oldest = sql.oldestSeq.get(key) ?? null;
    const count = oldest === null ? 0 : state.lastSeq - oldest + 1;
    const excess = count - state.strategy.maxStored;
    if (oldest === null || excess <= 0) return { count: 0, bytes: 0, through: 0 };
    const front: StoredMessage[] = [];
    const at = (i: number): StoredMessage | undefined => {
      while (i >= front.length && front.length < count) {
        // Pages of the excess and a few more (tool results after the cut), then doubling.
        const page = Math.max(excess + 8, front.length);
        const rows = loadMessagesFrom(key, oldest + front.length, page);
        if (rows.length === 0) break;
        for (const m of rows) front.push(m);
      }
      return front[i];
    };
    const n = trimCountOf(state.strategy, count, at, state.summarizedThroughSeq);
    const through = front[n - 1];
    if (through === undefined) return { count: 0, bytes: 0, through: 0 };
    sql.deleteMessagesThrough.run(key, through.seq);
    let bytes = 0;
    for (let i = 0; i < n; i++) bytes += messageBytes(front[i] as StoredMessage);
    return { count: n, bytes, through: through.seq };
  }

  /**
   * The oldest seq a read with `view` returns: the newest recallSize +
   * READ_SLACK messages, and a summary thread's unfolded ones (Store.read).
   * 0 or less: every message.
   */

  /** Adds `delta` to the namespace's usage (and the thread's bytes, when `key` is given). */
  function use(namespace: string, delta: NamespaceUsage, key?: number): void {
    if (key !== undefined && delta.bytes !== 0) sql.addThreadBytes.run(delta.bytes, key);
    if (delta.threads !== 0 || delta.messages !== 0 || delta.bytes !== 0) {
      sql.addUsage.run(namespace, delta.threads, delta.messages, delta.bytes);
    }
  }

  /** Deletes a thread inside the caller's transaction and gives its room back. */
  function deleteThread(namespace: string, row: ThreadRow): void {
    const oldest = sql.oldestSeq.get(row.id) ?? null;
    const messages = oldest === null ? 0 : row.last_seq - oldest + 1;
    sql.deleteThreadByKey.run(row.id);
    use(namespace, { threads: -1, messages: -messages, bytes: -row.bytes });
  }

  function saveThread(key: number, t: ThreadState): void {
    sql.updateThread.run(
      JSON.stringify(t.strategy),
      t.lastSeq,
      t.summarizedThroughSeq,
      t.summary,
      t.summaryTime,
      t.updateTime,
      key,
    );
  }

  function dropExpiredRequests(key: number, now: number): void {
    sql.dropRequestsBefore.run(key, now - lim.idempotencyRetentionMs);
    const excess = (sql.countRequests.get(key) ?? 0) - lim.idempotencyMaxPerThread;
    if (excess > 0) sql.dropOldestRequests.run(key, excess);
  }

  /**
   * The Add itself, inside appendWithTtl's savepoint; `row` is the
   * thread's row as that transaction read it (undefined: none, or expired and
   * just removed), so the Add reads it once.
   */
  function append(cmd: AppendCommand, row: ThreadRow | undefined): Committed<AppendResult> {
    if (cmd.requestId !== "" && row !== undefined) {
      const seen = sql.request.get(row.id, cmd.requestId);
      if (seen !== undefined && cmd.now - seen.time < lim.idempotencyRetentionMs) {
        if (seen.hash !== cmd.requestHash) {
          throw invalidArgument(
            "request_id",
            "was already used for a different request on this thread",
          );
        }
        const first = JSON.parse(seen.result) as RecordedResult;
        return { value: { ...first, replayed: true }, events: [] };
      }
    }
    const existing = row === undefined ? undefined : toThread(row);
    const strategy = decideAppend(existing, cmd);
    let key: number;
    let state: ThreadState;
    if (row === undefined || existing === undefined) {
      state = newThreadState(cmd.threadId, strategy, randomUUID(), cmd.now);
      key = Number(
        sql.insertThread.run(
          cmd.namespace,
          cmd.threadId,
          state.incarnation,
          JSON.stringify(strategy),
          cmd.now,
          cmd.now,
        ).lastInsertRowid,
      );
    } else {
      key = row.id;
      state = existing;
    }
    if (!keepsSummary(state.strategy, strategy)) {
      state.summary = "";
      state.summaryTime = 0;
      state.summarizedThroughSeq = 0;
    }
    state.strategy = strategy;
    const lastSeqBefore = state.lastSeq;
    const firstSeq = cmd.messages.length > 0 ? state.lastSeq + 1 : 0;
    const added: StoredMessage[] = [];
    let addedBytes = 0;
    for (const m of cmd.messages) {
      const seq = ++state.lastSeq;
      const extra = extraOf(m);
      sql.insertMessage.run(key, seq, m.role, cmd.now, m.content, extra);
      added.push(toMessage([seq, m.role, cmd.now, m.content, extra]));
      addedBytes += messageBytes(m);
    }
    const lastSeq = cmd.messages.length > 0 ? state.lastSeq : 0;
    if (cmd.messages.length > 0) state.updateTime = cmd.now;
    const trimmed = trim(key, state);
    // Checked once the Add and its trim are written: a refusal rolls it all back.
    const delta: NamespaceUsage = {
      threads: row === undefined ? 1 : 0,
      messages: added.length - trimmed.count,
      bytes: addedBytes - trimmed.bytes,
    };
    checkQuotas(lim, sql.usage.get(cmd.namespace) ?? NO_USAGE, delta);
    use(cmd.namespace, delta, key);
    saveThread(key, state);
    if (cmd.labels !== undefined) {
      labelRows.set(cmd.namespace, cmd.threadId, key, cmd.labels);
      state.labels = { ...cmd.labels };
    }
    const result: RecordedResult = { thread: state, firstSeq, lastSeq };
    if (cmd.requestId !== "") {
      sql.recordRequest.run(key, cmd.requestId, cmd.requestHash, JSON.stringify(result), cmd.now);
      dropExpiredRequests(key, cmd.now);
    }
    const events =
      cmd.messages.length > 0
        ? [
            logEvent(cmd.namespace, cmd.threadId, cmd.now, {
              type: "messages_added",
              firstSeq,
              lastSeq,
            }),
          ]
        : [];
    return {
      value: { ...result, thread: { ...state }, replayed: false },
      events,
      messages: {
        incarnation: state.incarnation,
        created: row === undefined,
        lastSeqBefore,
        added,
        droppedThrough: trimmed.through,
      },
    };
  }

  const commitSummary = (cmd: CommitSummaryCommand): Committed<ThreadState | undefined> => {
    const row = sql.thread.get(cmd.namespace, cmd.threadId);
    const lease = sql.lease.get(cmd.namespace, cmd.threadId);
    if (
      row === undefined ||
      row.incarnation !== cmd.incarnation ||
      row.summarized_through_seq !== cmd.fromSeq ||
      cmd.throughSeq <= cmd.fromSeq ||
      lease === undefined ||
      lease.token !== cmd.leaseToken
    ) {
      return { value: undefined, events: [] };
    }
    const state = toThread(row);
    state.summary = cmd.summary;
    state.summaryTime = cmd.now;
    state.summarizedThroughSeq = cmd.throughSeq;
    state.updateTime = cmd.now;
    const { count, bytes, through } = trim(row.id, state);
    use(cmd.namespace, { threads: 0, messages: -count, bytes: -bytes }, row.id);
    saveThread(row.id, state);
    const event = logEvent(cmd.namespace, cmd.threadId, cmd.now, {
      type: "summary_updated",
      summary: cmd.summary,
      summarizedThroughSeq: cmd.throughSeq,
      foldedCount: cmd.foldedCount,
    });
    return {
      value: state,
      events: [event],
      messages: {
        incarnation: state.incarnation,
        created: false,
        lastSeqBefore: state.lastSeq,
        added: [],
        droppedThrough: through,
      },
    };
  };

  const recordFoldFailure = (cmd: FoldFailureCommand): Committed<void> => {
    const row = sql.thread.get(cmd.namespace, cmd.threadId);
    if (row === undefined || row.incarnation !== cmd.incarnation) {
      return { value: undefined, events: [] };
    }
    const event = logEvent(cmd.namespace, cmd.threadId, cmd.now, {
      type: "summary_failed",
      reason: cmd.reason,
      attempt: cmd.attempt,
    });
    return { value: undefined, events: [event] };
  };

  const acquireLease = (namespace: string, threadId: string, ttlMs: number): number | undefined => {
    const now = Date.now();
    const held = sql.lease.get(namespace, threadId);
    if (held !== undefined && held.expires_at > now) return undefined;
    const token = sql.nextLeaseToken.get();
    if (token === undefined) throw new Error("sqlite store: meta.lease_counter is missing");
    sql.setLease.run(namespace, threadId, token, now + ttlMs);
    return token;
  };

  /**
   * Removes the thread if it has expired at `now`, inside the caller's
   * transaction, logging thread_cleared {reason: expired}.
   */
  function expireIfDue(
    namespace: string,
    threadId: string,
    now: number,
    row = sql.thread.get(namespace, threadId),
  ): { event: LoggedEvent; incarnation: string } | undefined {
    if (row === undefined || row.expire_at == null || row.expire_at > now) return undefined;
    deleteThread(namespace, row);
    const event = logEvent(namespace, threadId, now, { type: "thread_cleared", reason: "expired" });
    return { event, incarnation: row.incarnation };
  }

  /** An Add with retention: an expired thread goes first; the Add moves the expiry on. */
  const appendWithTtl = (cmd: AppendCommand): Committed<AppendResult> => {
    const row = sql.thread.get(cmd.namespace, cmd.threadId);
    const expired = expireIfDue(cmd.namespace, cmd.threadId, cmd.now, row);
    const before = expired === undefined ? row : undefined;
    const done = append(cmd, before);
    const ttl = ttlAfterAdd(
      cmd.ttlMs,
      before?.ttl_ms ?? undefined,
      before === undefined,
      cmd.defaultTtlMs,
    );
    // A thread without a ttl that keeps none costs no write here (the common Add).
    if (!done.value.replayed && (ttl > 0 || before?.ttl_ms != null)) {
      const fields = ttlFields(ttl, cmd.now);
      ttlRows.set.run(fields.ttlMs ?? null, fields.expireTime ?? null, cmd.namespace, cmd.threadId);
      const thread = { ...done.value.thread };
      delete thread.ttlMs;
      delete thread.expireTime;
      done.value = { ...done.value, thread: { ...thread, ...fields } };
    }
    if (expired === undefined) return done;
    return {
      ...done,
      events: [expired.event, ...done.events],
      ended: [...(done.ended ?? []), expired.incarnation],
    };
  };

  const sweepOne = (namespace: string, threadId: string, now: number): Committed<boolean> => {
    const expired = expireIfDue(namespace, threadId, now);
    if (expired === undefined) return { value: false, events: [] };
    return { value: true, events: [expired.event], ended: [expired.incarnation] };
  };

  /** Store.importThread, in its own statements so the hot path's stay as they are. */
  const insertImportedThread = db.prepare<
    [string, string, string, string, number, number, string, number, number, number]
  >(
    `INSERT INTO threads (namespace, thread_id, incarnation, strategy, last_seq,
       summarized_through_seq, summary, summary_time, create_time, update_time)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const importThread = (cmd: ImportThreadCommand): Committed<boolean> => {
    if (sql.thread.get(cmd.namespace, cmd.threadId) !== undefined) {
      return { value: false, events: [] };
    }
    let bytes = 0;
    for (const m of cmd.messages) bytes += messageBytes(m);
    const delta: NamespaceUsage = { threads: 1, messages: cmd.messages.length, bytes };
    checkQuotas(lim, sql.usage.get(cmd.namespace) ?? NO_USAGE, delta);
    const key = Number(
      insertImportedThread.run(
        cmd.namespace,
        cmd.threadId,
        randomUUID(),
        JSON.stringify(cmd.strategy),
        cmd.lastSeq,
        cmd.summarizedThroughSeq,
        cmd.summary,
        cmd.summaryTime,
        cmd.createTime,
        cmd.updateTime,
      ).lastInsertRowid,
    );
    for (const m of cmd.messages) {
      sql.insertMessage.run(key, m.seq, m.role, m.createTime, m.content, extraOf(m));
    }
    use(cmd.namespace, delta, key);
    if (cmd.labels !== undefined) labelRows.set(cmd.namespace, cmd.threadId, key, cmd.labels);
    if (cmd.ttlMs !== undefined && cmd.expireTime !== undefined) {
      ttlRows.set.run(cmd.ttlMs, cmd.expireTime, cmd.namespace, cmd.threadId);
    }
    const first = cmd.messages[0];
    const events =
      first === undefined
        ? []
        : [
            logEvent(cmd.namespace, cmd.threadId, cmd.now, {
              type: "messages_added",
              firstSeq: first.seq,
              lastSeq: cmd.lastSeq,
            }),
          ];
    return { value: true, events };
  };

  const clearThread = (namespace: string, threadId: string, now: number): Committed<boolean> => {
    const row = sql.thread.get(namespace, threadId);
    if (row === undefined) return { value: false, events: [] };
    deleteThread(namespace, row);
    return {
      value: true,
      events: [logEvent(namespace, threadId, now, { type: "thread_cleared" })],
      ended: [row.incarnation],
    };
  };

  /** One batch of clearAll: the first `limit` threads of the namespace in byte order. */
  const clearBatch = (namespace: string, now: number, limit: number): Committed<number> => {
    // SQLite's BINARY collation compares UTF-8 bytes: the order ListThreads promises.
    const threads = sql.firstThreads.all(namespace, limit);
    for (const t of threads) deleteThread(namespace, t);
    return {
      value: threads.length,
      events: threads.map((t) => logEvent(namespace, t.thread_id, now, { type: "thread_cleared" })),
      ended: threads.map((t) => t.incarnation),
    };
  };

  function runOne(op: WriteOp): Committed<unknown> {
    switch (op.kind) {
      case "append":
        return appendWithTtl(op.cmd);
      case "import":
        return importThread(op.cmd);
      case "sweepOne":
        return sweepOne(op.namespace, op.threadId, op.now);
      case "commitSummary":
        return commitSummary(op.cmd);
      case "recordFoldFailure":
        return recordFoldFailure(op.cmd);
      case "acquireLease":
        return { value: acquireLease(op.namespace, op.threadId, op.ttlMs), events: [] };
      case "releaseLease":
        sql.releaseLease.run(op.namespace, op.threadId, op.token);
        return { value: undefined, events: [] };
      case "clear":
        return clearThread(op.namespace, op.threadId, op.now);
      case "clearBatch":
        return clearBatch(op.namespace, op.now, op.limit);
    }
  }

  const begin = db.prepare("BEGIN IMMEDIATE");
  const commit = db.prepare("COMMIT");
  const rollback = db.prepare("ROLLBACK");
  const savepoint = db.prepare("SAVEPOINT write");
  const releaseSavepoint = db.prepare("RELEASE write");
  const rollbackToSavepoint = db.prepare("ROLLBACK TO write");

  /** A failure outcome; a full disk is also noted in the gate (for health). */
  function failed(id: number, err: unknown): WriteOutcome {
    if (err instanceof Database.SqliteError && err.code === "SQLITE_FULL") gate.diskFull = true;
    return { id, ok: false, error: toWireError(err) };
  }

  /**
   * Takes `w` to run it, or answers it without running it: refused by the
   * store already (its answer is ignored), or its deadline has passed.
   */
  function take(w: QueuedWrite, outcomes: WriteOutcome[]): boolean {
    if (w.deadline !== undefined && Date.now() >= w.deadline && gate.cancel(w.slot)) {
      outcomes.push({ id: w.id, ok: false, error: toWireError(queuedPastDeadline()) });
      return false;
    }
    if (gate.take(w.slot)) return true;
    outcomes.push({ id: w.id, ok: false, error: { message: "refused by the store" } });
    return false;
  }

  /**
   * BEGIN IMMEDIATE, waiting for another process's lock in slices of the
   * connection's short busy timeout up to `busyTimeoutMs`, so that between
   * slices the writes not taken yet (`untaken`, which this shortens) are
   * refused at their deadlines, and close's grace can end the wait. Undefined
   * once begun; else why not (error undefined: every write waiting was
   * answered meanwhile).
   */
  function beginWhenFree(
    untaken: QueuedWrite[] | undefined,
    outcomes: WriteOutcome[],
  ): { error: unknown } | undefined {
    const giveUpAt = Date.now() + busyTimeoutMs;
    for (;;) {
      try {
        begin.run();
        gate.activity = Activity.committing;
        return undefined;
      } catch (err) {
        if (!(err instanceof Database.SqliteError) || !err.code.startsWith("SQLITE_BUSY")) {
          return { error: err };
        }
        if (Date.now() >= giveUpAt) return { error: err };
        if (gate.abandoned) return { error: new MemoryError("unavailable", CLOSING) };
        gate.activity = Activity.waitingForLock;
        if (untaken === undefined) continue;
        const now = Date.now();
        for (let i = untaken.length - 1; i >= 0; i--) {
          const w = untaken[i] as QueuedWrite;
          if (w.deadline !== undefined && now >= w.deadline) {
            untaken.splice(i, 1);
            take(w, outcomes);
          }
        }
        if (untaken.length === 0) return { error: undefined };
      }
    }
  }

  /** One write in a transaction of its own; its outcome is what the file then holds. */
  function runAlone(w: QueuedWrite, outcomes: WriteOutcome[]): void {
    const notBegun = beginWhenFree(undefined, outcomes);
    if (notBegun !== undefined) {
      outcomes.push(failed(w.id, notBegun.error));
      return;
    }
    try {
      const committed = runOne(w.op);
      commit.run();
      gate.diskFull = false;
      outcomes.push({ id: w.id, ok: true, committed });
    } catch (err) {
      if (db.inTransaction) rollback.run();
      outcomes.push(failed(w.id, err));
    }
  }

  return {
    /**
     * Commits `writes` in one transaction (BEGIN IMMEDIATE ... COMMIT, one
     * fsync), each write in its own savepoint, and returns an outcome per
     * write that equals what the file holds afterwards:
     * - a write that fails on its own (a precondition, a quota) is rolled
     *   back to its savepoint and the others go on;
     * - when SQLite rolls back the whole transaction by itself (SQLITE_FULL,
     *   SQLITE_IOERR, SQLITE_NOMEM; `db.inTransaction` is then false), or
     *   COMMIT fails, nothing of the group is stored: every write taken is
     *   run again in a transaction of its own, and so are the rest, so no
     *   statement ever runs outside a transaction and each is answered with
     *   its own outcome (after an I/O error at COMMIT, whose frames a crash
     *   recovery might still find, as unknown: sqliteFault);
     * - a write is taken (WriteGate) only once the transaction has begun, so
     *   one still waiting for a lock at its deadline is refused unchanged.
     */
    runGroup(writes: QueuedWrite[]): WriteOutcome[] {
      const outcomes: WriteOutcome[] = [];
      gate.activity = Activity.committing;
      try {
        const untaken = [...writes];
        const notBegun = beginWhenFree(untaken, outcomes);
        if (notBegun !== undefined) {
          // Nothing ran: each write not answered yet gets the reason, unchanged.
          for (const w of untaken) {
            if (take(w, outcomes)) outcomes.push(failed(w.id, notBegun.error));
          }
          return outcomes;
        }
        const answered = new Set(outcomes.map((o) => o.id));
        const inGroup: WriteOutcome[] = [];
        const taken: QueuedWrite[] = [];
        let again: QueuedWrite[] | undefined;
        for (let i = 0; i < writes.length; i++) {
          const w = writes[i] as QueuedWrite;
          if (answered.has(w.id) || !take(w, outcomes)) continue;
          taken.push(w);
          savepoint.run();
          try {
            inGroup.push({ id: w.id, ok: true, committed: runOne(w.op) });
            releaseSavepoint.run();
          } catch (err) {
            if (!db.inTransaction) {
              // SQLite rolled the whole group back: the writes before this one too.
              again = writes.slice(i + 1);
              break;
            }
            rollbackToSavepoint.run();
            releaseSavepoint.run();
            inGroup.push(failed(w.id, err));
          }
        }
        if (again === undefined) {
          try {
            commit.run();
            if (!inGroup.some((o) => !o.ok && o.error.message.startsWith(DISK_FULL))) {
              gate.diskFull = false;
            }
            outcomes.push(...inGroup);
            return outcomes;
          } catch {
            if (db.inTransaction) rollback.run();
            again = [];
          }
        }
        // The group's transaction is gone: each write on its own, in order.
        for (const w of taken) runAlone(w, outcomes);
        for (const w of again) {
          if (!answered.has(w.id) && take(w, outcomes)) runAlone(w, outcomes);
        }
        return outcomes;
      } finally {
        gate.activity = Activity.idle;
      }
    },

    /**
     * Whether a small write can commit now (health, while the disk is full):
     * a value that needs new pages, deleted again in the same transaction.
     * Undefined when it can; else the error.
     */
    probeSpace(): unknown {
      const notBegun = beginWhenFree(undefined, []);
      if (notBegun !== undefined) return notBegun.error;
      try {
        db.prepare(
          "INSERT OR REPLACE INTO meta (key, value) VALUES ('space_probe', zeroblob(?))",
        ).run(2 * Number(db.pragma("page_size", { simple: true })));
        db.prepare("DELETE FROM meta WHERE key = 'space_probe'").run();
        commit.run();
        gate.diskFull = false;
        return undefined;
      } catch (err) {
        if (db.inTransaction) rollback.run();
        return err;
      }
    },
  };
}

/** Why the worker answered a write without running it during close. */
const CLOSING = "the SQLite store is closing; this write was not stored";

const DISK_FULL = "the SQLite store's disk is full";

/** A write still queued (not taken by a transaction) at its call's deadline. */
export function queuedPastDeadline(): MemoryError {
  return new MemoryError(
    "deadline_exceeded",
    "the SQLite write was still queued at the call's deadline; it was not stored",
  );
}

/** A SQLite failure of the file or the disk rather than of the write. */
interface SqliteFault {
  code: ErrorCode;
  /** What is wrong, with SQLite's code and message: "the SQLite store's disk is full (…)". */
  cause: string;
  /** What a refused write's caller may do. */
  advice: string;
  /** The write may be stored though it failed (an I/O error at commit). */
  outcomeUnknown?: boolean;
}

function faultOf(err: unknown): SqliteFault | undefined {
  if (!(err instanceof Database.SqliteError)) return undefined;
  const detail = `${err.code}: ${err.message}`;
  if (err.code === "SQLITE_FULL") {
    return {
      code: "resource_exhausted",
      cause: `${DISK_FULL} (${detail})`,
      advice: "; reads are still served, and writes resume once space is freed",
    };
  }
  if (err.code.startsWith("SQLITE_BUSY") || err.code.startsWith("SQLITE_LOCKED")) {
    return {
      code: "unavailable",
      cause: `the SQLite database is locked by another process (${detail})`,
      advice: "; retry with backoff",
    };
  }
  if (err.code.startsWith("SQLITE_READONLY")) {
    return {
      code: "unavailable",
      cause: `the SQLite database cannot be written (${detail})`,
      advice: "",
    };
  }
  if (err.code.startsWith("SQLITE_IOERR")) {
    // A failed fsync may leave the commit's frames in the WAL, where recovery
    // after a crash could still find them: the outcome is not known.
    return {
      code: "unavailable",
      cause: `the SQLite store's disk failed (${detail})`,
      advice: "",
      outcomeUnknown: true,
    };
  }
  return undefined;
}

/** The store's error for a SQLite fault (faultOf); undefined for anything else. */
export function sqliteFault(err: unknown): MemoryError | undefined {
  const fault = faultOf(err);
  if (fault === undefined) return undefined;
  const outcome =
    fault.outcomeUnknown === true
      ? "this write may or may not be stored; retry it with the same request_id"
      : "this write was not stored";
  return new MemoryError(fault.code, `${fault.cause}: ${outcome}${fault.advice}`);
}

/** Why a write could not proceed, for health: the fault's cause, or the error's message. */
export function writeBlockedBy(err: unknown): string {
  return faultOf(err)?.cause ?? `the SQLite write connection failed (${toWireError(err).message})`;
}
