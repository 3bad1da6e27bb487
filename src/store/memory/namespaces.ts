import type { NamespaceUsage } from "../../core/quota.js";
import { isExpired } from "../../core/ttl.js";
import { removalDelta } from "../../core/usage.js";
import type { StoreLimits } from "../store.js";
import { type EventCursors, NamespaceLog } from "./events.js";
import { ExpiryQueue } from "./expiry-queue.js";
import { LabelIndex } from "./labels.js";
import { FoldLeases } from "./leases.js";
import { release, type Segments } from "./segments.js";
import { SortedIds } from "./sorted-ids.js";
import { storedCount, type ThreadRecord } from "./thread-record.js";

/** One namespace of the memory store. */
export interface NamespaceState {
  threads: Map<string, ThreadRecord>;
  /** The keys of `threads`, in byte order, for ListThreads and Clear(all). */
  ids: SortedIds;
  /** The threads by label, for a filtered ListThreads. */
  labels: LabelIndex;
  /** The frozen segments forks share (segments.ts), by id. */
  segments: Segments;
  /** Parent thread id -> its direct forks' ids, for ListThreads(forks_of). */
  forks: Map<string, SortedIds>;
  /** What the quotas count, kept up to date by every change. */
  usage: NamespaceUsage;
  log: NamespaceLog;
}

/**
 * Everything the memory store holds. Every method of the store runs
 * synchronously to completion inside the event loop, which is what makes
 * each one atomic: no state here is ever seen half changed.
 */
export class MemoryState {
  readonly lim: StoreLimits;
  readonly cursors: EventCursors;
  readonly leases = new FoldLeases();
  readonly expiries = new ExpiryQueue();
  readonly #namespaces = new Map<string, NamespaceState>();

  constructor(lim: StoreLimits, cursors: EventCursors) {
    this.lim = lim;
    this.cursors = cursors;
  }

  /** The namespace, if anything was ever written to or read from it. */
  find(name: string): NamespaceState | undefined {
    return this.#namespaces.get(name);
  }

  /** The namespace, created empty on first use. */
  open(name: string): NamespaceState {
    let s = this.#namespaces.get(name);
    if (s === undefined) {
      s = {
        threads: new Map(),
        ids: new SortedIds(),
        labels: new LabelIndex(),
        segments: new Map(),
        forks: new Map(),
        usage: { threads: 0, messages: 0, bytes: 0 },
        log: new NamespaceLog(name, this.cursors, this.lim.eventRetention),
      };
      this.#namespaces.set(name, s);
    }
    return s;
  }

  /** The thread, unless it does not exist or has expired at `now`. */
  live(namespace: string, threadId: string, now: number): ThreadRecord | undefined {
    const rec = this.#namespaces.get(namespace)?.threads.get(threadId);
    return rec === undefined || isExpired(rec.state, now) ? undefined : rec;
  }

  /** Queues the thread's expiry, when it has one. */
  scheduleExpiry(namespace: string, rec: ThreadRecord): void {
    const at = rec.state.expireTime;
    if (at === undefined) return;
    const { threadId, incarnation } = rec.state;
    this.expiries.push({ at, namespace, threadId, incarnation });
  }

  close(): void {
    for (const s of this.#namespaces.values()) s.log.close();
  }
}

/** Applies a core/usage.ts delta to the namespace's usage. */
export function addUsage(usage: NamespaceUsage, delta: NamespaceUsage): void {
  usage.threads += delta.threads;
  usage.messages += delta.messages;
  usage.bytes += delta.bytes;
}

/**
 * Takes a thread out of the namespace's labels, forks index and usage, and
 * drops its references to frozen segments (the caller deletes it). Its own
 * forks keep theirs, so they stay readable.
 */
export function forget(s: NamespaceState, rec: ThreadRecord): void {
  const { threadId, labels, parent } = rec.state;
  if (labels !== undefined) s.labels.remove(threadId, labels);
  if (parent !== undefined) removeFork(s, parent.threadId, threadId);
  const freed = release(s.segments, rec.entries);
  rec.entries = [];
  addUsage(
    s.usage,
    removalDelta({ messages: storedCount(rec) + freed.count, bytes: rec.bytes + freed.bytes }),
  );
}

/** Indexes `forkId` as a direct fork of `parentId`. */
export function addFork(s: NamespaceState, parentId: string, forkId: string): void {
  let ids = s.forks.get(parentId);
  if (ids === undefined) {
    ids = new SortedIds();
    s.forks.set(parentId, ids);
  }
  ids.add(forkId);
}

function removeFork(s: NamespaceState, parentId: string, forkId: string): void {
  const ids = s.forks.get(parentId);
  if (ids === undefined) return;
  ids.delete(forkId);
  if (ids.size === 0) s.forks.delete(parentId);
}

/** Removes a thread, logging thread_cleared (with reason expired when it expired). */
export function removeThread(
  s: NamespaceState,
  rec: ThreadRecord,
  now: number,
  reason?: "expired",
): void {
  const id = rec.state.threadId;
  s.threads.delete(id);
  s.ids.delete(id);
  forget(s, rec);
  s.log.emit(id, now, { type: "thread_cleared", ...(reason === undefined ? {} : { reason }) });
}
