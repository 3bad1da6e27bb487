import type { LineageEntry } from "../../core/lineage.js";
import type { NamespaceUsage } from "../../core/quota.js";
import type {
  ChatMessage,
  EventBody,
  ForkOrigin,
  Labels,
  Role,
  StoredMessage,
  ThreadState,
} from "../../core/types.js";
import type { AppendResult, RewindResult } from "../store.js";
import { strategyFromJson } from "../strategy-json.js";

/** A row of `threads` (schema.ts), with the columns labels.ts and ttl.ts add. */
export interface ThreadRow {
  id: number;
  namespace: string;
  thread_id: string;
  incarnation: string;
  strategy: string;
  last_seq: number;
  summarized_through_seq: number;
  summary: string;
  summary_time: number;
  create_time: number;
  update_time: number;
  bytes: number;
  /** JSON of the labels (sqlite/labels.ts); NULL for none. */
  labels?: string | null;
  /** Retention (sqlite/ttl.ts); NULL for none. */
  ttl_ms?: number | null;
  expire_at?: number | null;
  /** The owned segment (schema.ts LINEAGE_COLUMNS): NULL the thread's own key, 0 none. */
  head?: number | null;
  /** JSON of the frozen entries (LineageEntry[]); NULL for none. */
  lineage?: string | null;
  /** JSON of the ForkOrigin; NULL when not a fork. */
  parent?: string | null;
}

/** seq, role, create_time, content, extra: read raw, as arrays, which is faster than objects. */
export type MessageRow = [number, Role, number, string, string | null];

/** The optional fields of a message, stored as JSON in `messages.extra`. */
export type MessageExtra = Omit<ChatMessage, "role" | "content">;

export interface RequestRow {
  hash: string;
  result: string;
  time: number;
}

/**
 * What an idempotency record keeps: the first call's result, an Add's or a
 * Rewind's (one request id names one request of either kind).
 */
export type RecordedResult = Omit<AppendResult, "replayed">;
export type RecordedRewind = Omit<RewindResult, "replayed">;
/** A Fork's record: a replay answers with the fork as it is now and these. */
export interface RecordedFork {
  sharedCount: number;
  summaryInherited: boolean;
}

export interface EventRow {
  seq: number;
  thread_id: string;
  time: number;
  type: EventBody["type"];
  body: string;
}

export const NO_USAGE: NamespaceUsage = { threads: 0, messages: 0, bytes: 0 };

export function toThread(row: ThreadRow): ThreadState {
  return {
    threadId: row.thread_id,
    incarnation: row.incarnation,
    // Written by saveThread from a Strategy.
    strategy: strategyFromJson(row.strategy),
    lastSeq: row.last_seq,
    summarizedThroughSeq: row.summarized_through_seq,
    summary: row.summary,
    summaryTime: row.summary_time,
    createTime: row.create_time,
    updateTime: row.update_time,
    // Written by SqliteLabels.set from Labels.
    ...(row.labels == null ? {} : { labels: JSON.parse(row.labels) as Labels }),
    ...(row.ttl_ms == null || row.expire_at == null
      ? {}
      : { ttlMs: row.ttl_ms, expireTime: row.expire_at }),
    // Written by the Fork (or an import) from a ForkOrigin.
    ...(row.parent == null ? {} : { parent: JSON.parse(row.parent) as ForkOrigin }),
  };
}

/** The segment id of the thread's owned head; undefined when it has none. */
export function headSegmentOf(row: ThreadRow): number | undefined {
  if (row.head == null) return row.id;
  return row.head === 0 ? undefined : row.head;
}

/** The thread's frozen entries (segment ids as strings, as core/lineage.ts has them). */
export function entriesOf(row: ThreadRow): LineageEntry[] {
  // Written by ThreadRows.saveLineage from LineageEntry[].
  return row.lineage == null ? [] : (JSON.parse(row.lineage) as LineageEntry[]);
}

/** The row's retention as core/ttl.ts isExpired takes it, without decoding the rest. */
export function expiryOf(row: ThreadRow): { expireTime?: number } {
  return row.expire_at == null ? {} : { expireTime: row.expire_at };
}

/** A stored message, frozen: the cache shares it with every caller. */
export function toMessage([seq, role, createTime, content, extra]: MessageRow): StoredMessage {
  const m: StoredMessage = { role, content, seq, createTime };
  // Written by extraOf from the optional fields of a ChatMessage.
  if (extra !== null) Object.assign(m, JSON.parse(extra) as MessageExtra);
  return Object.freeze(m);
}

/** The optional fields of `m` as JSON, or null when it has none (the common case). */
export function extraOf(m: ChatMessage): string | null {
  const extra: MessageExtra = {};
  if (m.name !== undefined) extra.name = m.name;
  if (m.toolCalls !== undefined) extra.toolCalls = m.toolCalls;
  if (m.toolCallId !== undefined) extra.toolCallId = m.toolCallId;
  if (m.metadata !== undefined) extra.metadata = m.metadata;
  // The token count travels here too; rows written before it existed have none (counted on read).
  if (m.tokens !== undefined) extra.tokens = m.tokens;
  if (m.tokenEncoding !== undefined) extra.tokenEncoding = m.tokenEncoding;
  return Object.keys(extra).length === 0 ? null : JSON.stringify(extra);
}
