import {
  DEFAULT_STORE_LIMITS,
  type EventLog,
  type FoldStore,
  type Store,
  type StoreAdmin,
  type StoreLimits,
  type ThreadStore,
} from "../store.js";
import { clear, clearAll, sweepExpired } from "./clears.js";
import { EventCursors } from "./events.js";
import { commitSummary, recordFoldFailure } from "./folds.js";
import { fork } from "./forks.js";
import { MemoryState } from "./namespaces.js";
import { getThread, listThreads, read } from "./reads.js";
import { rewind } from "./rewind.js";
import { append, importThread } from "./writes.js";

export { compareBytes } from "./sorted-ids.js";

/**
 * The in-process store: one node, and the reference implementation of the
 * Store contract. Every method runs synchronously to completion inside the
 * event loop, which is what makes each one atomic (clearAll: each batch).
 * Its history lives and dies with the process (events.ts EventCursors).
 *
 * Where things happen: writes.ts (Add, import), rewind.ts, forks.ts with
 * segments.ts (the frozen segments forks share), clears.ts
 * (Clear, clear all, the TTL sweep), folds.ts (summary commits) with
 * leases.ts, reads.ts, events.ts (the log and Watch), requests.ts
 * (request-id records); namespaces.ts holds the state.
 *
 * The store is a plain object of functions (no `this`), so a caller may
 * spread it or wrap some of its methods.
 */
export function createMemoryStore(limits: Partial<StoreLimits> = {}): Store {
  const m = new MemoryState({ ...DEFAULT_STORE_LIMITS, ...limits }, new EventCursors());
  return { ...threadStore(m), ...foldStore(m), ...eventLog(m), ...storeAdmin(m) };
}

function threadStore(m: MemoryState): ThreadStore {
  return {
    append: async (cmd) => append(m, cmd),
    rewind: async (cmd) => rewind(m, cmd),
    fork: async (cmd) => fork(m, cmd),
    read: async (namespace, threadId, view) => read(m, namespace, threadId, view),
    getThread: async (namespace, threadId) => getThread(m, namespace, threadId),
    clear: async (namespace, threadId, now) => clear(m, namespace, threadId, now),
    listThreads: (namespace, after, limit, labels, forksOf) =>
      listThreads(m, namespace, after, limit, labels, forksOf),
  };
}

function foldStore(m: MemoryState): FoldStore {
  return {
    commitSummary: async (cmd) => commitSummary(m, cmd),
    recordFoldFailure: async (cmd) => recordFoldFailure(m, cmd),
    acquireFoldLease: async (namespace, threadId, ttlMs) =>
      m.leases.take(namespace, threadId, ttlMs, Date.now()),
    releaseFoldLease: async (namespace, threadId, token) =>
      m.leases.release(namespace, threadId, token),
  };
}

function eventLog(m: MemoryState): EventLog {
  const { tokens } = m.cursors;
  return {
    readEvents: async (namespace, cursor, limit) => {
      const no = m.cursors.open(namespace, cursor);
      return m.open(namespace).log.after(no, limit);
    },
    headCursor: async (namespace) => tokens.issue(namespace, m.open(namespace).log.head),
    compareCursors: (a, b) => tokens.positionOf(a) - tokens.positionOf(b),
    subscribe: (namespace, listener) => m.open(namespace).log.subscribe(listener),
  };
}

function storeAdmin(m: MemoryState): StoreAdmin {
  return {
    importThread: async (cmd) => importThread(m, cmd),
    clearAll: (namespace, now) => clearAll(m, namespace, now),
    sweepExpired: async (now, limit) => sweepExpired(m, now, limit),
    // In-process: it serves as long as the process does.
    health: async () => ({ serving: true }),
    close: async () => m.close(),
  };
}
