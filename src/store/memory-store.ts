import { randomUUID } from "node:crypto";
import {
  decideAppend,
  keepsSummary,
  newThreadState,
  requestIdReusedError,
  trimCountOf,
} from "../core/append.js";
import { invalidArgument, MemoryError } from "../core/errors.js";
import { importedState } from "../core/import.js";
import { checkQuotas, messageBytes, type NamespaceUsage } from "../core/quota.js";
import { recallSize } from "../core/recall.js";
import { isExpired, ttlAfterAdd, ttlFields } from "../core/ttl.js";
import type {
  ChatMessage,
  EventBody,
  Labels,
  MemoryEvent,
  StoredMessage,
  Strategy,
  ThreadState,
} from "../core/types.js";
import { livePage } from "./live-page.js";
import { ExpiryQueue } from "./memory/expiry-queue.js";
import { LabelIndex } from "./memory/labels.js";
import { SortedIds } from "./memory/sorted-ids.js";
import { newStoreId, newTokenSecret, ResumeTokens } from "./resume-token.js";
import { rewindPending } from "./rewind-pending.js";
import {
  type AppendCommand,
  type AppendResult,
  CLEAR_BATCH,
  type CommitSummaryCommand,
  DEFAULT_STORE_LIMITS,
  type FoldFailureCommand,
  type ImportThreadCommand,
  READ_SLACK,
  type ReadView,
  type Store,
  type StoreHealth,
  type StoreLimits,
  type ThreadSnapshot,
} from "./store.js";

/** Defaults shared by the stores (see StoreLimits). */

interface IdempotencyRecord {
  hash: string;
  result: AppendResult;
  time: number;
}

interface ThreadRecord {
  state: ThreadState;
  /**
   * The stored messages, oldest first, are messages[head..]: a trim moves
   * `head` instead of shifting a long array, and the dropped front is cut off
   * once it is as long as the rest (amortised O(1) per dropped message).
   */
  messages: (StoredMessage | undefined)[];
  head: number;
  /** request_id -> first result; Map keeps insertion order, so the oldest go first. */
  requests: Map<string, IdempotencyRecord>;
  /** Sum of quota.ts messageBytes over `messages`. */
  bytes: number;
}

interface Lease {
  token: number;
  expiresAt: number;
}

interface NamespaceState {
  name: string;
  threads: Map<string, ThreadRecord>;
  /** The keys of `threads`, in byte order, for ListThreads and Clear(all). */
  ids: SortedIds;
  /** The threads by label, for a filtered ListThreads. */
  labels: LabelIndex;
  /** What the quotas count, kept up to date by every change. */
  usage: NamespaceUsage;
  /** Retained events; events[i] has number firstEventNo + i. */
  events: MemoryEvent[];
  firstEventNo: number;
  nextEventNo: number;
  listeners: Set<(events: MemoryEvent[]) => void>;
}

/**
 * The in-process store: one node, and the reference implementation of the
 * Store contract. Every method runs synchronously to completion inside the
 * event loop, which is what makes each one atomic.
 *
 * Cursors (resume-token.ts) carry the event's number in its namespace and a
 * MAC under a key random per process; the store id is random per process too,
 * so a cursor from before a restart refers to history this process never had:
 * out_of_range, never silently resumed from somewhere else.
 */
export function createMemoryStore(limits: Partial<StoreLimits> = {}): Store {
  const lim = { ...DEFAULT_STORE_LIMITS, ...limits };
  const tokens = new ResumeTokens(
    newStoreId(),
    newTokenSecret(),
    "the history it refers to is no longer retained (the server restarted)",
    /^[0-9a-f]{8}\.\d{1,15}$/,
  );
  const namespaces = new Map<string, NamespaceState>();
  const leases = new Map<string, Lease>();
  const issued = new IssuedCursors(ISSUED_CURSORS_KEPT);
  let leaseCounter = 0;
  const expiries = new ExpiryQueue();

  function ns(name: string): NamespaceState {
    let s = namespaces.get(name);
    if (s === undefined) {
      s = {
        name,
        threads: new Map(),
        ids: new SortedIds(),
        labels: new LabelIndex(),
        usage: { threads: 0, messages: 0, bytes: 0 },
        events: [],
        firstEventNo: 1,
        nextEventNo: 1,
        listeners: new Set(),
      };
      namespaces.set(name, s);
    }
    return s;
  }

  function log(s: NamespaceState, threadId: string, time: number, body: EventBody): MemoryEvent {
    const no = s.nextEventNo++;
    const name = s.name;
    let cursor: string | undefined;
    // The cursor's MAC costs microseconds and only Watch reads it: made on first read.
    const event: MemoryEvent = {
      ...body,
      get cursor() {
        if (cursor === undefined) {
          cursor = tokens.issue(name, no);
          issued.remember(cursor, name, no);
        }
        return cursor;
      },
      threadId,
      time,
    };
    s.events.push(event);
    // Drop a whole retention's worth at once, so trimming costs O(1) per event
    // amortised; the log keeps between 1x and 2x eventRetention events.
    if (s.events.length >= lim.eventRetention * 2) {
      const excess = s.events.length - lim.eventRetention;
      s.events.splice(0, excess);
      s.firstEventNo += excess;
    }
    return event;
  }

  function publish(s: NamespaceState, events: MemoryEvent[]): void {
    if (events.length === 0) return;
    for (const listener of s.listeners) listener(events);
  }

  const copyThread = (t: ThreadState): ThreadState => ({ ...t });

  function dropExpiredRequests(rec: ThreadRecord, now: number): void {
    for (const [id, r] of rec.requests) {
      if (
        rec.requests.size <= lim.idempotencyMaxPerThread &&
        now - r.time < lim.idempotencyRetentionMs
      )
        break;
      rec.requests.delete(id);
    }
  }

  /** Trims the thread to its strategy's max_stored and gives the room back. */
  function trim(s: NamespaceState, rec: ThreadRecord): void {
    const n = dropCount(rec, rec.state.strategy, rec.state.summarizedThroughSeq);
    if (n === 0) return;
    const bytes = sumBytes(rec.messages, rec.head, rec.head + n);
    dropOldest(rec, n);
    rec.bytes -= bytes;
    s.usage.messages -= n;
    s.usage.bytes -= bytes;
  }

  /** Takes a thread out of the namespace's ids and usage (it is deleted by the caller). */
  function forget(s: NamespaceState, rec: ThreadRecord): void {
    if (rec.state.labels !== undefined) s.labels.remove(rec.state.threadId, rec.state.labels);
    s.usage.threads -= 1;
    s.usage.messages -= storedCount(rec);
    s.usage.bytes -= rec.bytes;
  }

  /** Removes an expired thread, logging thread_cleared {reason: expired}. */
  function expire(s: NamespaceState, rec: ThreadRecord, now: number): void {
    const id = rec.state.threadId;
    s.threads.delete(id);
    s.ids.delete(id);
    forget(s, rec);
    publish(s, [log(s, id, now, { type: "thread_cleared", reason: "expired" })]);
  }

  /** The thread, unless it does not exist or has expired. */
  function live(namespace: string, threadId: string): ThreadRecord | undefined {
    const rec = namespaces.get(namespace)?.threads.get(threadId);
    return rec === undefined || isExpired(rec.state, Date.now()) ? undefined : rec;
  }

  return {
    rewind: rewindPending,
    async append(cmd: AppendCommand): Promise<AppendResult> {
      const s = ns(cmd.namespace);
      const found = s.threads.get(cmd.threadId);
      if (found !== undefined && isExpired(found.state, cmd.now)) expire(s, found, cmd.now);
      const existing = s.threads.get(cmd.threadId);
      if (cmd.requestId !== "" && existing !== undefined) {
        const seen = existing.requests.get(cmd.requestId);
        if (seen !== undefined && cmd.now - seen.time < lim.idempotencyRetentionMs) {
          if (seen.hash !== cmd.requestHash) {
            throw requestIdReusedError();
          }
          return { ...seen.result, thread: copyThread(seen.result.thread), replayed: true };
        }
      }
      const strategy = decideAppend(existing?.state, cmd);
      // The thread after the Add, trim included, is worked out before anything
      // changes, so a refusal by a quota leaves everything as it was.
      const keeps = existing !== undefined && keepsSummary(existing.state.strategy, strategy);
      const through = keeps ? (existing?.state.summarizedThroughSeq ?? 0) : 0;
      const lastSeqBefore = existing?.state.lastSeq ?? 0;
      const added = cmd.messages.map(
        (m, i): StoredMessage =>
          Object.freeze({ ...m, seq: lastSeqBefore + i + 1, createTime: cmd.now }),
      );
      const rec: ThreadRecord = existing ?? {
        state: newThreadState(cmd.threadId, strategy, randomUUID(), cmd.now),
        messages: [],
        head: 0,
        requests: new Map(),
        bytes: 0,
      };
      const list = rec.messages;
      const before = list.length;
      for (const m of added) list.push(m);
      const dropped = dropCount(rec, strategy, through);
      const delta: NamespaceUsage = {
        threads: existing === undefined ? 1 : 0,
        messages: added.length - dropped,
        bytes: sumBytes(added, 0, added.length) - sumBytes(list, rec.head, rec.head + dropped),
      };
      try {
        checkQuotas(lim, s.usage, delta);
      } catch (err) {
        list.length = before;
        throw err;
      }

      if (existing === undefined) {
        s.threads.set(cmd.threadId, rec);
        s.ids.add(cmd.threadId);
      }
      if (!keeps) {
        rec.state.summary = "";
        rec.state.summaryTime = 0;
        rec.state.summarizedThroughSeq = 0;
      }
      rec.state.strategy = strategy;
      if (cmd.labels !== undefined) {
        s.labels.replace(cmd.threadId, rec.state.labels, cmd.labels);
        rec.state.labels = { ...cmd.labels };
      }
      if (dropped > 0) dropOldest(rec, dropped);
      const hadExpiry = rec.state.expireTime !== undefined;
      const ttl = ttlAfterAdd(cmd.ttlMs, rec.state.ttlMs, existing === undefined, cmd.defaultTtlMs);
      delete rec.state.ttlMs;
      delete rec.state.expireTime;
      Object.assign(rec.state, ttlFields(ttl, cmd.now));
      if (rec.state.expireTime !== undefined && !hadExpiry) {
        expiries.push({
          at: rec.state.expireTime,
          namespace: cmd.namespace,
          threadId: cmd.threadId,
          incarnation: rec.state.incarnation,
        });
      }
      rec.bytes += delta.bytes;
      s.usage.threads += delta.threads;
      s.usage.messages += delta.messages;
      s.usage.bytes += delta.bytes;
      const firstSeq = added.length > 0 ? lastSeqBefore + 1 : 0;
      const lastSeq = added.length > 0 ? lastSeqBefore + added.length : 0;
      if (added.length > 0) {
        rec.state.lastSeq = lastSeq;
        rec.state.updateTime = cmd.now;
      }
      const result: AppendResult = {
        thread: copyThread(rec.state),
        firstSeq,
        lastSeq,
        replayed: false,
      };
      const kept = cmd.requestId !== "";
      if (kept) {
        rec.requests.set(cmd.requestId, { hash: cmd.requestHash, result, time: cmd.now });
        dropExpiredRequests(rec, cmd.now);
      }
      if (cmd.messages.length > 0) {
        publish(s, [log(s, cmd.threadId, cmd.now, { type: "messages_added", firstSeq, lastSeq })]);
      }
      // A kept result is the store's own, for replays: the caller gets a copy.
      return kept ? { ...result, thread: copyThread(rec.state) } : result;
    },

    async read(
      namespace: string,
      threadId: string,
      view?: ReadView,
    ): Promise<ThreadSnapshot | undefined> {
      const rec = live(namespace, threadId);
      if (rec === undefined) return undefined;
      // Only what the view needs is copied, so a Get costs its window, not the thread.
      const start = view === undefined ? 0 : viewStart(rec, view);
      const messages = rec.messages.slice(rec.head + start) as StoredMessage[];
      return { thread: copyThread(rec.state), messages, complete: start === 0 };
    },

    async getThread(namespace: string, threadId: string): Promise<ThreadState | undefined> {
      const rec = live(namespace, threadId);
      return rec === undefined ? undefined : copyThread(rec.state);
    },

    async commitSummary(cmd: CommitSummaryCommand): Promise<ThreadState | undefined> {
      const s = namespaces.get(cmd.namespace);
      const rec = s?.threads.get(cmd.threadId);
      const lease = leases.get(leaseKey(cmd.namespace, cmd.threadId));
      if (
        s === undefined ||
        rec === undefined ||
        rec.state.incarnation !== cmd.incarnation ||
        rec.state.summarizedThroughSeq !== cmd.fromSeq ||
        cmd.throughSeq <= cmd.fromSeq ||
        lease === undefined ||
        lease.token !== cmd.leaseToken
      ) {
        return undefined;
      }
      rec.state.summary = cmd.summary;
      rec.state.summaryTime = cmd.now;
      rec.state.summarizedThroughSeq = cmd.throughSeq;
      rec.state.updateTime = cmd.now;
      trim(s, rec);
      publish(s, [
        log(s, cmd.threadId, cmd.now, {
          type: "summary_updated",
          summary: cmd.summary,
          summarizedThroughSeq: cmd.throughSeq,
          foldedCount: cmd.foldedCount,
        }),
      ]);
      return copyThread(rec.state);
    },

    async recordFoldFailure(cmd: FoldFailureCommand): Promise<void> {
      const s = namespaces.get(cmd.namespace);
      const rec = s?.threads.get(cmd.threadId);
      if (s === undefined || rec === undefined || rec.state.incarnation !== cmd.incarnation) return;
      publish(s, [
        log(s, cmd.threadId, cmd.now, {
          type: "summary_failed",
          reason: cmd.reason,
          attempt: cmd.attempt,
        }),
      ]);
    },

    async acquireFoldLease(namespace, threadId, ttlMs) {
      const key = leaseKey(namespace, threadId);
      const now = Date.now();
      const held = leases.get(key);
      if (held !== undefined && held.expiresAt > now) return undefined;
      const token = ++leaseCounter;
      leases.set(key, { token, expiresAt: now + ttlMs });
      return token;
    },

    async releaseFoldLease(namespace, threadId, token) {
      const key = leaseKey(namespace, threadId);
      if (leases.get(key)?.token === token) leases.delete(key);
    },

    async clear(namespace: string, threadId: string, now: number): Promise<boolean> {
      const s = namespaces.get(namespace);
      const rec = s?.threads.get(threadId);
      if (s === undefined || rec === undefined) return false;
      s.threads.delete(threadId);
      s.ids.delete(threadId);
      forget(s, rec);
      publish(s, [log(s, threadId, now, { type: "thread_cleared" })]);
      return true;
    },

    async clearAll(namespace: string, now: number): Promise<number> {
      const s = namespaces.get(namespace);
      if (s === undefined) return 0;
      let total = 0;
      for (;;) {
        // Each batch runs to completion inside one turn of the event loop (atomic).
        const ids = s.ids.shift(CLEAR_BATCH);
        for (const id of ids) {
          const rec = s.threads.get(id);
          if (rec !== undefined) forget(s, rec);
          s.threads.delete(id);
        }
        publish(
          s,
          ids.map((id) => log(s, id, now, { type: "thread_cleared" })),
        );
        total += ids.length;
        if (ids.length < CLEAR_BATCH) return total;
        await new Promise((resolve) => setImmediate(resolve));
      }
    },

    async listThreads(
      namespace: string,
      after: string,
      limit: number,
      labels?: Labels,
    ): Promise<string[]> {
      const s = namespaces.get(namespace);
      if (s === undefined || limit <= 0) return [];
      const fetch =
        labels !== undefined && Object.keys(labels).length > 0
          ? async (from: string, n: number) =>
              s.labels.list(labels, from, n, (id) => s.threads.get(id)?.state.labels)
          : async (from: string, n: number) => s.ids.after(from, n);
      const now = Date.now();
      return livePage(after, limit, fetch, async (ids) =>
        ids.map((id) => {
          const t = s.threads.get(id);
          return t !== undefined && isExpired(t.state, now);
        }),
      );
    },

    async readEvents(namespace: string, cursor: string, limit: number): Promise<MemoryEvent[]> {
      // Every watcher of a namespace reads on from the cursor of the event it
      // sent last, which this process issued: checked by equality, not a MAC.
      const no = issued.positionOf(cursor, namespace) ?? tokens.open(namespace, cursor);
      const s = ns(namespace);
      if (no >= s.nextEventNo) {
        throw invalidArgument("resume_token", "refers to an event this server never logged");
      }
      if (no + 1 < s.firstEventNo) {
        throw new MemoryError(
          "out_of_range",
          "resume_token: the events after it are no longer retained; re-read with Get and watch from now",
          { field: "resume_token" },
        );
      }
      const from = no + 1 - s.firstEventNo;
      return s.events.slice(from, from + limit);
    },

    async headCursor(namespace: string): Promise<string> {
      return tokens.issue(namespace, ns(namespace).nextEventNo - 1);
    },

    compareCursors(a: string, b: string): number {
      return tokens.positionOf(a) - tokens.positionOf(b);
    },

    subscribe(namespace: string, listener: (events: MemoryEvent[]) => void): () => void {
      const s = ns(namespace);
      s.listeners.add(listener);
      return () => {
        s.listeners.delete(listener);
      };
    },

    async importThread(cmd: ImportThreadCommand): Promise<boolean> {
      const s = ns(cmd.namespace);
      if (s.threads.has(cmd.threadId)) return false;
      const messages = cmd.messages.map((m): StoredMessage => Object.freeze({ ...m }));
      const delta: NamespaceUsage = {
        threads: 1,
        messages: messages.length,
        bytes: sumBytes(messages, 0, messages.length),
      };
      checkQuotas(lim, s.usage, delta);
      const state = importedState(cmd, randomUUID());
      s.threads.set(cmd.threadId, {
        state,
        messages,
        head: 0,
        requests: new Map(),
        bytes: delta.bytes,
      });
      s.ids.add(cmd.threadId);
      s.labels.replace(cmd.threadId, undefined, state.labels);
      if (state.expireTime !== undefined) {
        expiries.push({
          at: state.expireTime,
          namespace: cmd.namespace,
          threadId: cmd.threadId,
          incarnation: state.incarnation,
        });
      }
      s.usage.threads += delta.threads;
      s.usage.messages += delta.messages;
      s.usage.bytes += delta.bytes;
      const first = messages[0];
      if (first !== undefined) {
        publish(s, [
          log(s, cmd.threadId, cmd.now, {
            type: "messages_added",
            firstSeq: first.seq,
            lastSeq: cmd.lastSeq,
          }),
        ]);
      }
      return true;
    },

    async sweepExpired(now: number, limit: number): Promise<number> {
      let removed = 0;
      while (removed < limit) {
        const due = expiries.popDue(now);
        if (due === undefined) break;
        const s = namespaces.get(due.namespace);
        const rec = s?.threads.get(due.threadId);
        if (s === undefined || rec?.state.incarnation !== due.incarnation) continue;
        const at = rec.state.expireTime;
        if (at === undefined) continue;
        if (at > now) {
          // Written since it was queued: due again at its new time.
          expiries.push({ ...due, at });
          continue;
        }
        expire(s, rec, now);
        removed++;
      }
      return removed;
    },

    // In-process: it serves as long as the process does.
    async health(): Promise<StoreHealth> {
      return { serving: true };
    },

    async close(): Promise<void> {
      for (const s of namespaces.values()) s.listeners.clear();
    },
  };
}

/** Cursors of the newest events kept for IssuedCursors. */
const ISSUED_CURSORS_KEPT = 4096;

/**
 * Cursors this store issued lately, with their namespace and position: a
 * cursor given back exactly as issued, for the namespace it was issued for,
 * needs no MAC check (Watch reads on from its last event's cursor once per
 * event and watcher). Bounded; oldest out.
 */
class IssuedCursors {
  readonly #byCursor = new Map<string, { namespace: string; position: number }>();
  constructor(readonly max: number) {}

  remember(cursor: string, namespace: string, position: number): void {
    if (this.#byCursor.size >= this.max) {
      const oldest = this.#byCursor.keys().next();
      if (oldest.done !== true) this.#byCursor.delete(oldest.value);
    }
    this.#byCursor.set(cursor, { namespace, position });
  }

  positionOf(cursor: string, namespace: string): number | undefined {
    const known = this.#byCursor.get(cursor);
    return known !== undefined && known.namespace === namespace ? known.position : undefined;
  }
}

function sumBytes(
  messages: readonly (ChatMessage | undefined)[],
  from: number,
  to: number,
): number {
  let n = 0;
  for (let i = from; i < to; i++) n += messageBytes(messages[i] as ChatMessage);
  return n;
}

function storedCount(rec: ThreadRecord): number {
  return rec.messages.length - rec.head;
}

/** core/append.ts trimCount over the thread's stored messages, reading only the front it drops. */
function dropCount(rec: ThreadRecord, strategy: Strategy, summarizedThroughSeq: number): number {
  const { messages, head } = rec;
  return trimCountOf(
    strategy,
    messages.length - head,
    (i) => messages[head + i],
    summarizedThroughSeq,
  );
}

/** Drops the `n` oldest stored messages in O(n) amortised, whatever the thread's length. */
function dropOldest(rec: ThreadRecord, n: number): void {
  const end = rec.head + n;
  // Released now, so a dropped message is not kept alive until the next cut.
  for (let i = rec.head; i < end; i++) rec.messages[i] = undefined;
  rec.head = end;
  if (rec.head >= 1024 && rec.head * 2 >= rec.messages.length) {
    rec.messages = rec.messages.slice(rec.head);
    rec.head = 0;
  }
}

/**
 * Index (among the stored messages) of the oldest one a read with `view`
 * returns: the newest recallSize + READ_SLACK, and for the summary strategy
 * every message after summarized_through_seq too (store.ts Store.read).
 */
function viewStart(rec: ThreadRecord, view: ReadView): number {
  const count = storedCount(rec);
  const size = recallSize(rec.state.strategy, view.limit);
  if (size <= 0) return 0;
  let start = Math.max(0, count - size - READ_SLACK);
  if (rec.state.strategy.kind === "summary") {
    start = Math.min(start, firstAfter(rec, rec.state.summarizedThroughSeq));
  }
  return start;
}

/** Index of the oldest stored message with a seq above `seq` (binary search: seqs ascend). */
function firstAfter(rec: ThreadRecord, seq: number): number {
  let lo = 0;
  let hi = storedCount(rec);
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((rec.messages[rec.head + mid]?.seq ?? Infinity) <= seq) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function leaseKey(namespace: string, threadId: string): string {
  return `${namespace}\u0000${threadId}`;
}

/** Byte order of UTF-8, which is the order ListThreads promises. */
export function compareBytes(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}
