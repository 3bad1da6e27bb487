/**
 * How the Redis store writes its records and reads Redis's replies: message
 * list entries, thread hashes, append results and stream events (the layout
 * is in keys.ts), with the cache of decoded entries. Pure: no connection.
 */
import { randomUUID } from "node:crypto";
import { strategyKey } from "../../core/strategy.js";
import type {
  ChatMessage,
  EventBody,
  ForkOrigin,
  Labels,
  MemoryEvent,
  StoredMessage,
  Strategy,
  ThreadState,
} from "../../core/types.js";
import type { AppendResult, RewindResult } from "../store.js";
import { strategyFromJson } from "../strategy-json.js";

/** A stream id this store writes: "0-<n>", n the event's number in its namespace. */
const STREAM_ID = /^0-(0|[1-9]\d{0,14})$/;

// --- Encoding ----------------------------------------------------------------

const NO_STRATEGY_ARGS: readonly string[] = ["", "", "", "", ""];

/**
 * A strategy's script arguments, kept per strategy object: every Add that
 * names none passes the server's default, the same object each time (a
 * strategy is a value: nothing changes one once made).
 */
const strategyArgsOf = new WeakMap<Strategy, readonly string[]>();

export function strategyArgs(s: Strategy | undefined): readonly string[] {
  if (s === undefined) return NO_STRATEGY_ARGS;
  let args = strategyArgsOf.get(s);
  if (args === undefined) {
    args = [
      JSON.stringify(s),
      strategyKey(s),
      s.kind,
      String(s.maxStored),
      s.excludeSystem ? "1" : "0",
    ];
    strategyArgsOf.set(s, args);
  }
  return args;
}

/** This process's part of the incarnations it gives new threads. */
const INCARNATION_PREFIX = randomUUID();
let incarnationsGiven = 0;

/**
 * The incarnation of a thread a script may create: unique across processes
 * (a random prefix per process) and within one (a counter), as a fresh UUID
 * per call would be, for less.
 */
export function newThreadIncarnation(): string {
  incarnationsGiven += 1;
  return `${INCARNATION_PREFIX}.${incarnationsGiven.toString(36)}`;
}

/** The message's JSON, `role` first: the scripts recognise a tool result by its first bytes. */
export function encodeMessage(m: ChatMessage, now: number): string {
  const out: Record<string, unknown> = { role: m.role, content: m.content };
  if (m.name !== undefined) out.name = m.name;
  if (m.toolCalls !== undefined) out.toolCalls = m.toolCalls;
  if (m.toolCallId !== undefined) out.toolCallId = m.toolCallId;
  if (m.metadata !== undefined) out.metadata = m.metadata;
  // Entries written before token counts existed have none: counted on read.
  if (m.tokens !== undefined) out.tokens = m.tokens;
  if (m.tokenEncoding !== undefined) out.tokenEncoding = m.tokenEncoding;
  out.createTime = now;
  return JSON.stringify(out);
}

/**
 * A list entry `"<seq> <bytes> <json>"` (or `"<seq> <json>"`, written before
 * quotas) back into a message (the store wrote it: no schema check).
 */
export function decodeMessage(entry: string): StoredMessage {
  const space = entry.indexOf(" ");
  const seq = Number(entry.slice(0, space));
  const brace = entry.indexOf("{", space);
  if (space <= 0 || !Number.isSafeInteger(seq) || brace < 0) {
    throw new Error("redis store: a stored message is not in the store's format");
  }
  const body = JSON.parse(entry.slice(brace)) as Omit<StoredMessage, "seq">;
  return { ...body, seq };
}

/** Decoded list entries kept for reuse across reads (see DecodedMessages). */
export const DECODED_MESSAGES_KEPT = 20_000;

/**
 * Every Get of a window reads the same recent entries again, and parsing
 * them was most of a Get's CPU. An entry's text fully determines the message
 * (seq, time and content are in it), so decoded messages are kept and handed
 * out again while the entry read is the same text — which also hands the
 * service the same objects each time, so their wire form is encoded once
 * (service/pre-encoded.ts). They are found by the thread's incarnation and
 * the entry's seq (hashing each whole entry, a new string on every read,
 * cost most of what decoding saved), and the text is compared on a hit, so
 * an entry that differs (a database restored to an older state, then
 * written again) is decoded afresh. Bounded by `max` messages; the thread
 * first seen goes first.
 */
export class DecodedMessages {
  /** Per incarnation, by seq; `count` bounds the total. */
  readonly #byThread = new Map<string, Map<number, { entry: string; message: StoredMessage }>>();
  #count = 0;
  constructor(readonly max: number) {}

  /** Messages kept. */
  get size(): number {
    return this.#count;
  }

  clear(): void {
    this.#byThread.clear();
    this.#count = 0;
  }

  get(incarnation: string, entry: string): StoredMessage {
    let thread = this.#byThread.get(incarnation);
    const seq = leadingSeq(entry);
    const hit = thread?.get(seq);
    if (hit !== undefined && hit.entry === entry) return hit.message;
    const message = Object.freeze(decodeMessage(entry));
    if (hit === undefined) {
      if (this.#count >= this.max) {
        this.#dropOldestThread();
        // Possibly this very thread: it starts again from this message.
        thread = this.#byThread.get(incarnation);
      }
      this.#count += 1;
    }
    if (thread === undefined) {
      thread = new Map();
      this.#byThread.set(incarnation, thread);
    }
    thread.set(seq, { entry, message });
    return message;
  }

  /** Drops the thread seen first (its messages go together: a thread's Gets read them together). */
  #dropOldestThread(): void {
    const oldest = this.#byThread.entries().next();
    if (oldest.done === true) return;
    this.#byThread.delete(oldest.value[0]);
    this.#count -= oldest.value[1].size;
  }
}

/** The seq an entry `"<seq> ..."` starts with, read without making a string; -1 when there is none. */
function leadingSeq(entry: string): number {
  let seq = 0;
  let i = 0;
  for (; i < entry.length && i < 16; i++) {
    const c = entry.charCodeAt(i);
    if (c < 48 || c > 57) break;
    seq = seq * 10 + (c - 48);
  }
  return i === 0 || entry.charCodeAt(i) !== 32 ? -1 : seq;
}

/** Field/value pairs of a flat array (HGETALL, stream entry fields). */
function pairs(flat: unknown): Map<string, string> {
  const list = asArray(flat);
  const map = new Map<string, string>();
  for (let i = 0; i + 1 < list.length; i += 2) map.set(asString(list[i]), asString(list[i + 1]));
  return map;
}

function field(map: Map<string, string>, name: string): string {
  const v = map.get(name);
  if (v === undefined) throw new Error(`redis store: a record has no field ${name}`);
  return v;
}

/**
 * The thread hash fields a ThreadState is made of, in the order
 * decodeThreadValues reads them: what an HMGET of a thread asks for (a Get
 * reads the thread this way, with half the strings of an HGETALL and no
 * map), and where decodeThread puts an HGETALL's fields. `lineage` comes
 * last: no ThreadState field, but a read must know whether the thread has
 * frozen segments (forks.ts).
 */
export const THREAD_FIELDS = [
  "thread_id",
  "incarnation",
  "strategy",
  "last_seq",
  "summarized_through_seq",
  "summary",
  "summary_time",
  "create_time",
  "update_time",
  "labels",
  "ttl_ms",
  "expire_at",
  "parent",
  "lineage",
] as const;

/** Where each of THREAD_FIELDS is in decodeThreadValues' array. */
const THREAD_FIELD_INDEX = new Map<string, number>(THREAD_FIELDS.map((name, i) => [name, i]));

function at(name: (typeof THREAD_FIELDS)[number]): number {
  return THREAD_FIELDS.indexOf(name);
}

const THREAD_ID = at("thread_id");
const INCARNATION = at("incarnation");
const STRATEGY = at("strategy");
const LAST_SEQ = at("last_seq");
const SUMMARIZED_THROUGH_SEQ = at("summarized_through_seq");
const SUMMARY = at("summary");
const SUMMARY_TIME = at("summary_time");
const CREATE_TIME = at("create_time");
const UPDATE_TIME = at("update_time");
const LABELS = at("labels");
const TTL_MS = at("ttl_ms");
const EXPIRE_AT = at("expire_at");
const PARENT = at("parent");
/** THREAD_FIELDS' index of `lineage`: a value there means the thread has frozen segments. */
export const LINEAGE_INDEX = at("lineage");

/** A thread hash as HGETALL's flat field/value array. */
export function decodeThread(flat: unknown): ThreadState {
  const list = asArray(flat);
  const values = new Array<unknown>(THREAD_FIELDS.length).fill(null);
  for (let i = 0; i + 1 < list.length; i += 2) {
    const index = THREAD_FIELD_INDEX.get(asString(list[i]));
    if (index !== undefined) values[index] = asString(list[i + 1]);
  }
  return decodeThreadValues(values);
}

/**
 * A thread hash as an HMGET of THREAD_FIELDS replies: each value in its
 * field's place, null for a field the hash does not have (false where a
 * script encoded the HMGET as JSON: Lua's nil).
 */
export function decodeThreadValues(values: readonly unknown[]): ThreadState {
  const labels = optionalValue(values, LABELS);
  const expireAt = optionalValue(values, EXPIRE_AT);
  const parent = optionalValue(values, PARENT);
  return {
    threadId: requiredValue(values, THREAD_ID),
    incarnation: requiredValue(values, INCARNATION),
    strategy: strategyFromJson(requiredValue(values, STRATEGY)),
    lastSeq: Number(requiredValue(values, LAST_SEQ)),
    summarizedThroughSeq: Number(requiredValue(values, SUMMARIZED_THROUGH_SEQ)),
    summary: requiredValue(values, SUMMARY),
    summaryTime: Number(requiredValue(values, SUMMARY_TIME)),
    createTime: Number(requiredValue(values, CREATE_TIME)),
    updateTime: Number(requiredValue(values, UPDATE_TIME)),
    // Written by the scripts' set_labels from Labels.
    ...(labels === undefined ? {} : { labels: JSON.parse(labels) as Labels }),
    ...(expireAt === undefined
      ? {}
      : { ttlMs: Number(requiredValue(values, TTL_MS)), expireTime: Number(expireAt) }),
    // Written by FORK and IMPORT_THREAD from ForkOrigin.
    ...(parent === undefined ? {} : { parent: JSON.parse(parent) as ForkOrigin }),
  };
}

function requiredValue(values: readonly unknown[], index: number): string {
  const v = values[index];
  if (typeof v !== "string") {
    throw new Error(`redis store: a record has no field ${THREAD_FIELDS[index]}`);
  }
  return v;
}

function optionalValue(values: readonly unknown[], index: number): string | undefined {
  const v = values[index];
  return v === null || v === undefined || v === false ? undefined : asString(v);
}

/** The `lineage` field of a thread hash as a flat field array (keys.ts); "" when none. */
export function lineageField(flat: unknown): string {
  return pairs(flat).get("lineage") ?? "";
}

/** The '=' before an append result's HMGET values. */
const EQUALS = 61;

/**
 * An append result (lua/append.ts): `"<first>\n<last>\n<thread>"`, the thread
 * as the JSON of HGETALL's flat pairs (what a request record holds, so
 * every release can replay it), or, for an Add without a request id, `=`
 * and the JSON of THREAD_FIELDS' values (false for a field the hash lacks).
 */
export function decodeResult(text: string, replayed: boolean): AppendResult {
  const a = text.indexOf("\n");
  const b = text.indexOf("\n", a + 1);
  const thread =
    text.charCodeAt(b + 1) === EQUALS
      ? decodeThreadValues(asArray(JSON.parse(text.slice(b + 2))))
      : decodeThread(JSON.parse(text.slice(b + 1)) as unknown);
  return {
    thread,
    firstSeq: Number(text.slice(0, a)),
    lastSeq: Number(text.slice(a + 1, b)),
    replayed,
  };
}

/**
 * A Rewind's result as the script records it (lua/idempotency.ts):
 * `"rewind\n<removed>\n<summary dropped 1/0>\n<thread as JSON array>"`.
 */
export function decodeRewindResult(text: string, replayed: boolean): RewindResult {
  const [kind, removed, dropped] = text.split("\n", 3);
  if (kind !== "rewind" || removed === undefined || dropped === undefined) {
    throw new Error("redis store: a recorded Rewind result is not in the store's format");
  }
  const json = text.slice(kind.length + removed.length + dropped.length + 3);
  return {
    thread: decodeThread(JSON.parse(json) as unknown),
    removedCount: Number(removed),
    summaryDropped: dropped === "1",
    replayed,
  };
}

/** An event entry of a log; `cursorOf` makes the cursor of its position in that log. */
export function decodeEvent(entry: unknown, cursorOf: (position: number) => string): MemoryEvent {
  const [id, flat] = asArray(entry);
  const f = pairs(flat);
  const type = field(f, "type");
  let body: EventBody;
  switch (type) {
    case "messages_added":
      body = {
        type,
        firstSeq: Number(field(f, "first_seq")),
        lastSeq: Number(field(f, "last_seq")),
      };
      break;
    case "summary_updated":
      body = {
        type,
        summary: field(f, "summary"),
        summarizedThroughSeq: Number(field(f, "summarized_through_seq")),
        foldedCount: Number(field(f, "folded_count")),
      };
      break;
    case "thread_cleared":
      body = f.get("reason") === "expired" ? { type, reason: "expired" } : { type };
      break;
    case "summary_failed":
      body = { type, reason: field(f, "reason"), attempt: Number(field(f, "attempt")) };
      break;
    case "thread_rewound":
      body = {
        type,
        toSeq: Number(field(f, "to_seq")),
        removedCount: Number(field(f, "removed_count")),
        summaryDropped: field(f, "summary_dropped") === "1",
      };
      break;
    case "thread_forked":
      body = {
        type,
        parentThreadId: field(f, "parent_thread_id"),
        atSeq: Number(field(f, "at_seq")),
        sharedCount: Number(field(f, "shared_count")),
        summaryInherited: field(f, "summary_inherited") === "1",
      };
      break;
    default:
      throw new Error(`redis store: an event has the unknown type ${type}`);
  }
  return {
    ...body,
    cursor: cursorOf(streamPosition(asString(id))),
    threadId: field(f, "thread_id"),
    time: Number(field(f, "time")),
  };
}

// --- Cursors -------------------------------------------------------------------

/** The event number of a stream id this store wrote ("0-<n>"). */
export function streamPosition(id: string): number {
  const m = STREAM_ID.exec(id);
  if (m === null) throw new Error(`redis store: the stream id ${id} is not one this store writes`);
  return Number(m[1]);
}

// --- Replies -------------------------------------------------------------------

export function asArray(value: unknown): unknown[] {
  if (!Array.isArray(value)) throw new Error("redis store: unexpected reply (not an array)");
  return value;
}

export function asString(value: unknown): string {
  if (typeof value !== "string") throw new Error("redis store: unexpected reply (not a string)");
  return value;
}
