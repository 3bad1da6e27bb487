import type { ImportShare } from "../core/fork.js";
import type { QuotaLimits } from "../core/quota.js";
import type {
  ChatMessage,
  ForkOrigin,
  Labels,
  StoredMessage,
  Strategy,
  ThreadState,
} from "../core/types.js";

/**
 * The inputs and results of the Store contract's methods (store.ts), its
 * limits and its constants, apart from the interfaces so each file stays one
 * concern; store.ts re-exports them, so callers import from there.
 */

/** What Store.health found. */
export interface StoreHealth {
  serving: boolean;
  /** Why not, when not serving: for logs and GET /readyz; never a secret or a URL. */
  reason?: string;
}

/** Store.rewind's input. */
export interface RewindCommand {
  namespace: string;
  threadId: string;
  toSeq: number;
  expectedLastSeq: number | undefined;
  /** Empty: no idempotency. */
  requestId: string;
  /** Digest of the request's payload (to_seq, expected_last_seq). */
  requestHash: string;
  now: number;
  /** As AppendCommand.deadline. */
  deadline?: number;
}

export interface RewindResult {
  thread: ThreadState;
  /** Stored messages dropped; 0 when toSeq was already last_seq. */
  removedCount: number;
  summaryDropped: boolean;
  /** True when this was a retry of an earlier request_id. */
  replayed: boolean;
}

/** Store.fork's input. */
export interface ForkCommand {
  namespace: string;
  /** The parent. */
  threadId: string;
  newThreadId: string;
  /** Undefined: the parent's last_seq. */
  atSeq: number | undefined;
  expectedLastSeq: number | undefined;
  /** The fork's strategy, resolved; undefined: the parent's. */
  strategy: Strategy | undefined;
  /** Never empty; undefined: the parent's. */
  labels: Labels | undefined;
  /** ms; 0: none; undefined: the parent's. */
  ttlMs: number | undefined;
  /** Empty: no idempotency. Recorded on the new thread. */
  requestId: string;
  /** Digest of the request's payload (every field but request_id and new_thread_id). */
  requestHash: string;
  now: number;
  /** As AppendCommand.deadline. */
  deadline?: number;
}

export interface ForkResult {
  /** The new thread as the Fork wrote it (a replay: as it is now). */
  thread: ThreadState;
  /** The parent's stored messages up to atSeq the fork took over (shared or copied), before its own max_stored trim. */
  sharedCount: number;
  summaryInherited: boolean;
  /** True when this was a retry of an earlier request_id. */
  replayed: boolean;
}

/** A whole thread to write as it is (Store.importThread). */
export interface ImportThreadCommand {
  namespace: string;
  threadId: string;
  strategy: Strategy;
  lastSeq: number;
  summarizedThroughSeq: number;
  summary: string;
  summaryTime: number;
  createTime: number;
  updateTime: number;
  /** Oldest first; seqs consecutive, the newest equal to lastSeq. */
  messages: StoredMessage[];
  /** Absent or not empty. */
  labels?: Labels;
  /** Retention, both or neither (an expire time already past makes the thread due at once). */
  ttlMs?: number;
  expireTime?: number;
  /** Where the thread was forked from, kept as exported (the parent need not exist). */
  parent?: ForkOrigin;
  /**
   * Set: the thread shares its parent's stored messages through
   * shareFrom.throughSeq, and `messages` starts after it (see importThread).
   * shareFrom.threadId is parent.threadId.
   */
  shareFrom?: ImportShare;
  /** Time of the messages_added event. */
  now: number;
}

export interface AppendCommand {
  namespace: string;
  threadId: string;
  messages: ChatMessage[];
  /** The request's strategy, resolved; undefined when the request left it out. */
  strategy: Strategy | undefined;
  /** Used when the thread is created and the request left the strategy out. */
  defaultStrategy: Strategy;
  replaceStrategy: boolean;
  /** Empty: no idempotency. */
  requestId: string;
  /** Digest of the request's payload, to tell a retry from a different request. */
  requestHash: string;
  expectedLastSeq: number | undefined;
  now: number;
  /**
   * When given (never empty), the thread's labels after the Add, replacing
   * those it had, in the same atomic step; absent: the labels stay.
   */
  labels?: Labels;
  /**
   * The thread's ttl from this Add on, ms (0: none); absent: the thread
   * keeps its own, a new one takes defaultTtlMs (core/ttl.ts ttlAfterAdd).
   * Either way the Add moves expireTime to now + ttl.
   */
  ttlMs?: number;
  defaultTtlMs?: number;
  /**
   * The call's deadline, ms since the epoch: a store that queues writes
   * refuses one still queued then with deadline_exceeded, storing nothing.
   */
  deadline?: number;
}

export interface AppendResult {
  thread: ThreadState;
  /** 0 when no message was added. */
  firstSeq: number;
  lastSeq: number;
  /** True when this was a retry of an earlier request_id. */
  replayed: boolean;
}

export interface ThreadSnapshot {
  thread: ThreadState;
  messages: StoredMessage[];
  /** False when `read` with a view left out older messages. */
  complete: boolean;
}

/** What a read is for: a Get with this limit (undefined: the strategy's size). */
export interface ReadView {
  limit: number | undefined;
}

/**
 * Extra messages a windowed read returns beyond the recall size, so a window
 * widened backwards over a few tool results rarely needs a second read.
 */
export const READ_SLACK = 16;

/** Threads Store.clearAll removes per atomic batch. */
export const CLEAR_BATCH = 500;

export interface CommitSummaryCommand {
  namespace: string;
  threadId: string;
  incarnation: string;
  leaseToken: number;
  /** The summarized_through_seq the fold started from. */
  fromSeq: number;
  /** The newest seq folded into `summary`. */
  throughSeq: number;
  summary: string;
  foldedCount: number;
  now: number;
}

export interface FoldFailureCommand {
  namespace: string;
  threadId: string;
  incarnation: string;
  reason: string;
  attempt: number;
  now: number;
}

/** Limits every store applies; the namespace quotas are core/quota.ts QuotaLimits. */
export interface StoreLimits extends QuotaLimits {
  /** Events kept per namespace for Watch resume. */
  eventRetention: number;
  /** How long a request_id is remembered, in ms. */
  idempotencyRetentionMs: number;
  /** How many request_ids are remembered per thread. */
  idempotencyMaxPerThread: number;
}

/** The limits a store applies unless configured otherwise (config.ts sets the flags' values). */
export const DEFAULT_STORE_LIMITS: StoreLimits = {
  eventRetention: 10_000,
  idempotencyRetentionMs: 24 * 60 * 60 * 1000,
  idempotencyMaxPerThread: 1000,
  maxThreadsPerNamespace: 10_000,
  maxMessagesPerNamespace: 1_000_000,
  maxBytesPerNamespace: 1024 * 1024 * 1024,
};
