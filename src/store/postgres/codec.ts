import pg from "pg";
import { floorOf, type Lineage, type LineageEntry } from "../../core/lineage.js";
import type {
  ChatMessage,
  EventBody,
  Labels,
  MemoryEvent,
  Role,
  StoredMessage,
  ThreadState,
} from "../../core/types.js";
import { strategyFromJson } from "../strategy-json.js";

/**
 * Rows and values as the Postgres store keeps them. Times and counts are
 * bigint columns; node-postgres hands int8 back as strings (it cannot know
 * they fit a double), so this store's connections parse them as numbers:
 * every one of them (ms times, seqs, counts) stays below 2^53.
 */
export const PG_TYPES = {
  getTypeParser(oid: number, format?: "text" | "binary") {
    if (oid === pg.types.builtins.INT8) return (v: string) => Number(v);
    return pg.types.getTypeParser(oid, format);
  },
} as unknown as pg.CustomTypesConfig;

export interface ThreadRow {
  thread_id: string;
  incarnation: string;
  strategy: string;
  last_seq: number;
  summarized_through_seq: number;
  /** UTF-8 (bytea). */
  summary: Buffer;
  summary_time: number;
  create_time: number;
  update_time: number;
  stored: number;
  bytes: number;
  labels: Labels | null;
  ttl_ms: number | null;
  expire_at: number | null;
  /** The owned head's segment id; null: the thread's own id (schema.ts version 3). */
  head: string | null;
  /** The frozen entries, JSON [[segment, low, through], …]; null: none. */
  lineage: string | null;
  parent_thread_id: string | null;
  parent_at_seq: number | null;
  parent_fork_time: number | null;
  parent_create_time: number | null;
}

/** Where a thread's messages are, as its row says (schema.ts version 3). */
export interface Layout {
  /** The owned head's segment id (the messages' thread_id column). */
  headId: string;
  lineage: Lineage;
  lastSeq: number;
}

export function layoutOf(
  row: Pick<ThreadRow, "thread_id" | "head" | "lineage" | "last_seq" | "stored">,
): Layout {
  const entries =
    row.lineage === null
      ? []
      : (JSON.parse(row.lineage) as [string, number, number][]).map(
          ([segment, low, through]): LineageEntry => ({ segment, low, through }),
        );
  const headId = row.head ?? row.thread_id;
  return {
    headId,
    lineage: { entries, head: { segment: headId, low: row.last_seq - row.stored + 1 } },
    lastSeq: row.last_seq,
  };
}

/** The lineage column of `entries` (null when none: the layout of a thread that shares nothing). */
export function lineageColumn(entries: readonly LineageEntry[]): string | null {
  return entries.length === 0
    ? null
    : JSON.stringify(entries.map((e) => [e.segment, e.low, e.through]));
}

export interface MessageRow {
  seq: number;
  role: Role;
  create_time: number;
  /** UTF-8 (bytea). */
  content: Buffer;
  /** JSON of the optional fields (extraOf). */
  extra: string | null;
}

/** A message's optional fields (everything but role and content), kept as jsonb. */
export type MessageExtra = Omit<ChatMessage, "role" | "content">;

export interface EventRow {
  seq: number;
  thread_id: string;
  time: number;
  type: EventBody["type"];
  /** JSON of the fields beyond the type (eventBody). */
  body: string;
}

export function toThread(row: ThreadRow): ThreadState {
  return {
    threadId: row.thread_id,
    incarnation: row.incarnation,
    strategy: strategyFromJson(row.strategy),
    lastSeq: row.last_seq,
    summarizedThroughSeq: row.summarized_through_seq,
    summary: row.summary.toString("utf8"),
    summaryTime: row.summary_time,
    createTime: row.create_time,
    updateTime: row.update_time,
    ...(row.labels === null ? {} : { labels: row.labels }),
    ...(row.ttl_ms === null || row.expire_at === null
      ? {}
      : { ttlMs: row.ttl_ms, expireTime: row.expire_at }),
    ...(row.parent_thread_id === null
      ? {}
      : {
          parent: {
            threadId: row.parent_thread_id,
            atSeq: row.parent_at_seq ?? 0,
            forkTime: row.parent_fork_time ?? 0,
            parentCreateTime: row.parent_create_time ?? 0,
          },
        }),
  };
}

/**
 * The oldest stored seq of a thread (stored seqs are consecutive up to
 * last_seq, across its segments; above last_seq when it stores none).
 */
export function oldestSeq(
  row: Pick<ThreadRow, "thread_id" | "head" | "lineage" | "last_seq" | "stored">,
): number {
  if (row.lineage === null) return row.last_seq - row.stored + 1;
  return floorOf(layoutOf(row).lineage, row.last_seq);
}

/** How many messages the thread stores, shared ones included (what max_stored counts). */
export function storedCount(
  row: Pick<ThreadRow, "thread_id" | "head" | "lineage" | "last_seq" | "stored">,
): number {
  return row.last_seq - oldestSeq(row) + 1;
}

export function toMessage(row: MessageRow): StoredMessage {
  const m: StoredMessage = {
    role: row.role,
    content: row.content.toString("utf8"),
    seq: row.seq,
    createTime: row.create_time,
  };
  // Written by extraOf from a message's optional fields.
  if (row.extra !== null) Object.assign(m, JSON.parse(row.extra) as MessageExtra);
  return Object.freeze(m);
}

/** The optional fields of a stored message, as JSON, or null when it has none (the common case). */
export function extraOf(m: StoredMessage): string | null {
  const { role: _r, content: _c, seq: _s, createTime: _t, ...rest } = m;
  const extra = Object.fromEntries(Object.entries(rest).filter(([, v]) => v !== undefined));
  return Object.keys(extra).length === 0 ? null : JSON.stringify(extra);
}

/** Columns of messages as arrays, for one INSERT … SELECT FROM unnest(…) per write. */
export function messageColumns(messages: readonly StoredMessage[]): unknown[] {
  return [
    messages.map((m) => m.seq),
    messages.map((m) => m.role),
    messages.map((m) => m.createTime),
    messages.map((m) => Buffer.from(m.content, "utf8")),
    messages.map(extraOf),
  ];
}

export const INSERT_MESSAGES = `INSERT INTO messages (namespace, thread_id, seq, role, create_time, content, extra)
  SELECT $1, $2, * FROM unnest($3::bigint[], $4::text[], $5::bigint[], $6::bytea[], $7::text[])`;

/** An event row as the log's event, with its cursor. */
export function toEvent(row: EventRow, cursor: string): MemoryEvent {
  return {
    type: row.type,
    // Written by eventBody from an EventBody of this type.
    ...(JSON.parse(row.body) as Record<string, unknown>),
    cursor,
    threadId: row.thread_id,
    time: row.time,
  } as MemoryEvent;
}

/** An event's fields beyond its type, as the JSON text of its body. */
export function eventBody(body: EventBody): string {
  const { type: _type, ...fields } = body;
  return JSON.stringify(fields);
}
