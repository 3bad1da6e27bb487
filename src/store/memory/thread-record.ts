import { randomUUID } from "node:crypto";
import { trimCountOf } from "../../core/append.js";
import type { LineageEntry } from "../../core/lineage.js";
import { messageBytes } from "../../core/quota.js";
import type { ChatMessage, StoredMessage, Strategy, ThreadState } from "../../core/types.js";
import type { RequestRecord } from "./requests.js";

/** One thread of the memory store: its state, stored messages and request records. */
export interface ThreadRecord {
  state: ThreadState;
  /**
   * The stored messages, oldest first, are messages[head..]: a trim moves
   * `head` instead of shifting a long array, and the dropped front is cut off
   * once it is as long as the rest (amortised O(1) per dropped message).
   */
  messages: (StoredMessage | undefined)[];
  head: number;
  /** request_id -> first result; Map keeps insertion order, so the oldest go first. */
  requests: Map<string, RequestRecord>;
  /** Sum of quota.ts messageBytes over `messages`. */
  bytes: number;
  /**
   * The frozen segments (segments.ts) holding the thread's older messages,
   * oldest first (core/lineage.ts); empty for a thread that never forked and
   * was never forked from. `messages` is the owned head after them.
   */
  entries: LineageEntry[];
  /** The owned head's segment id: frozen under this id by a Fork, then replaced. */
  segment: string;
}

/** What dropping messages took out of a thread. */
export interface Dropped {
  count: number;
  bytes: number;
}

/** A thread storing `messages`, whose messageBytes add up to `bytes`. */
export function newThreadRecord(
  state: ThreadState,
  messages: StoredMessage[] = [],
  bytes = 0,
): ThreadRecord {
  return {
    state,
    messages,
    head: 0,
    requests: new Map(),
    bytes,
    entries: [],
    segment: randomUUID(),
  };
}

/** A copy of the thread's state for a caller, who may keep or change it. */
export const copyThread = (t: ThreadState): ThreadState => ({ ...t });

export function storedCount(rec: ThreadRecord): number {
  return rec.messages.length - rec.head;
}

/** The stored messages from the `from`-th oldest on. */
export function storedFrom(rec: ThreadRecord, from: number): StoredMessage[] {
  return rec.messages.slice(rec.head + from) as StoredMessage[];
}

/** The seq of the oldest stored message; undefined when none is stored. */
export function oldestStoredSeq(rec: ThreadRecord): number | undefined {
  return rec.messages[rec.head]?.seq;
}

export function sumBytes(
  messages: readonly (ChatMessage | undefined)[],
  from: number,
  to: number,
): number {
  let n = 0;
  for (let i = from; i < to; i++) n += messageBytes(messages[i] as ChatMessage);
  return n;
}

/** core/append.ts trimCount over the thread's stored messages, reading only the front it drops. */
export function dropCount(
  rec: ThreadRecord,
  strategy: Strategy,
  summarizedThroughSeq: number,
): number {
  const { messages, head } = rec;
  return trimCountOf(
    strategy,
    messages.length - head,
    (i) => messages[head + i],
    summarizedThroughSeq,
  );
}

/** Drops the `n` oldest stored messages in O(n) amortised, whatever the thread's length. */
export function dropOldest(rec: ThreadRecord, n: number): void {
  const end = rec.head + n;
  // Released now, so a dropped message is not kept alive until the next cut.
  for (let i = rec.head; i < end; i++) rec.messages[i] = undefined;
  rec.head = end;
  if (rec.head >= 1024 && rec.head * 2 >= rec.messages.length) {
    rec.messages = rec.messages.slice(rec.head);
    rec.head = 0;
  }
}

/** Drops the stored messages with a seq above `seq` (a Rewind); keeps rec.bytes right. */
export function dropAfter(rec: ThreadRecord, seq: number): Dropped {
  const end = rec.head + firstAfter(rec, seq);
  const dropped = {
    count: rec.messages.length - end,
    bytes: sumBytes(rec.messages, end, rec.messages.length),
  };
  rec.messages.length = end;
  if (end === rec.head) {
    // Nothing stored any more: the dropped front goes too.
    rec.messages = [];
    rec.head = 0;
  }
  rec.bytes -= dropped.bytes;
  return dropped;
}

/** Index (among the stored messages) of the oldest one with a seq above `seq` (binary search: seqs ascend). */
export function firstAfter(rec: ThreadRecord, seq: number): number {
  let lo = 0;
  let hi = storedCount(rec);
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((rec.messages[rec.head + mid]?.seq ?? Infinity) <= seq) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
