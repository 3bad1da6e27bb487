import { randomUUID } from "node:crypto";
import { trimCountOf } from "../../core/append.js";
import {
  floorOf,
  type Lineage,
  type LineageEntry,
  raiseFloor,
  rangesFor,
} from "../../core/lineage.js";
import type { StoredMessage, Strategy } from "../../core/types.js";
import {
  type Dropped,
  dropOldest,
  firstAfter,
  sumBytes,
  type ThreadRecord,
} from "./thread-record.js";

/**
 * Frozen segments (core/lineage.ts): messages a fork shares with its parent,
 * immutable, kept once per namespace with the number of lineage entries
 * naming them. A thread's owned head is its record's own `messages` (today's
 * layout); its frozen entries are `rec.entries`.
 */
export interface FrozenSegment {
  /** Seqs low.. consecutively: messages[i] has seq low + i. */
  readonly low: number;
  readonly messages: readonly StoredMessage[];
  /** Sum of messageBytes over `messages`: what the usage holds for it. */
  readonly bytes: number;
  refs: number;
}

export type Segments = Map<string, FrozenSegment>;

/** A fresh segment id for an owned head, never one naming a frozen segment. */
export const newSegmentId = (): string => randomUUID();

/** The thread's lineage as core/lineage.ts reads it (the owned head always present, maybe empty). */
export function lineageOf(rec: ThreadRecord): Lineage {
  const last = rec.entries[rec.entries.length - 1];
  const low =
    rec.messages[rec.head]?.seq ?? (last === undefined ? rec.state.lastSeq : last.through) + 1;
  return { entries: rec.entries, head: { segment: rec.segment, low } };
}

/** Messages the thread stores in frozen segments. */
export function frozenCount(rec: ThreadRecord): number {
  let n = 0;
  for (const e of rec.entries) n += e.through - e.low + 1;
  return n;
}

/** Messages the thread stores, shared ones included. */
export function storedTotal(rec: ThreadRecord): number {
  return frozenCount(rec) + rec.messages.length - rec.head;
}

/** The seq of the thread's oldest stored message; undefined when it stores none. */
export function oldestSeq(rec: ThreadRecord): number | undefined {
  return storedTotal(rec) > 0 ? floorOf(lineageOf(rec), rec.state.lastSeq) : undefined;
}

/** The stored message of `seq` (undefined when the thread does not store it). */
export function messageAt(
  segs: Segments,
  rec: ThreadRecord,
  seq: number,
): StoredMessage | undefined {
  for (const e of rec.entries) {
    if (seq < e.low || seq > e.through) continue;
    const seg = segs.get(e.segment);
    return seg?.messages[seq - seg.low];
  }
  const i = firstAfter(rec, seq - 1);
  const m = rec.messages[rec.head + i];
  return m?.seq === seq ? m : undefined;
}

/** The stored messages with seqs from `fromSeq` on, oldest first: one slice per segment touched. */
export function storedFromSeq(segs: Segments, rec: ThreadRecord, fromSeq: number): StoredMessage[] {
  const out: StoredMessage[] = [];
  const lineage = { entries: rec.entries, head: undefined };
  for (const r of rangesFor(lineage, rec.state.lastSeq, fromSeq, Number.MAX_SAFE_INTEGER)) {
    const seg = segs.get(r.segment);
    if (seg === undefined) throw new Error(`memory store: frozen segment ${r.segment} missing`);
    for (let seq = r.from; seq <= r.to; seq++)
      out.push(seg.messages[seq - seg.low] as StoredMessage);
  }
  const start = rec.head + firstAfter(rec, fromSeq - 1);
  for (let i = start; i < rec.messages.length; i++) out.push(rec.messages[i] as StoredMessage);
  return out;
}

/** One reference less on each entry's segment; returns what deleting the unreferenced ones freed. */
export function release(segs: Segments, entries: readonly LineageEntry[]): Dropped {
  const freed = { count: 0, bytes: 0 };
  for (const e of entries) {
    const seg = segs.get(e.segment);
    if (seg === undefined) continue;
    seg.refs--;
    if (seg.refs > 0) continue;
    segs.delete(e.segment);
    freed.count += seg.messages.length;
    freed.bytes += seg.bytes;
  }
  return freed;
}

/** One reference more on each entry's segment. */
export function retain(segs: Segments, entries: readonly LineageEntry[]): void {
  for (const e of entries) {
    const seg = segs.get(e.segment);
    if (seg !== undefined) seg.refs++;
  }
}

/** core/append.ts trimCountOf over the whole stored thread, reading only the front it drops. */
export function trimCount(
  segs: Segments,
  rec: ThreadRecord,
  strategy: Strategy,
  summarizedThroughSeq: number,
): number {
  if (rec.entries.length === 0) {
    const { messages, head } = rec;
    return trimCountOf(
      strategy,
      messages.length - head,
      (i) => messages[head + i],
      summarizedThroughSeq,
    );
  }
  const frozen = frozenCount(rec);
  const floor = rec.entries[0]?.low ?? 0;
  return trimCountOf(
    strategy,
    frozen + rec.messages.length - rec.head,
    (i) => (i < frozen ? messageAt(segs, rec, floor + i) : rec.messages[rec.head + i - frozen]),
    summarizedThroughSeq,
  );
}

/** The usage a trim of the `n` oldest stored messages gives back, worked out before it happens. */
export function trimmedUsage(segs: Segments, rec: ThreadRecord, n: number): Dropped {
  const frozen = frozenCount(rec);
  const fromHead = Math.max(0, n - frozen);
  const out = { count: fromHead, bytes: sumBytes(rec.messages, rec.head, rec.head + fromHead) };
  if (n === 0 || rec.entries.length === 0) return out;
  const newFloor = (rec.entries[0]?.low ?? 0) + n;
  // Segments whose last reference this trim drops leave the usage whole.
  const counted = new Map<string, number>();
  for (const e of rec.entries) {
    if (e.through < newFloor) counted.set(e.segment, (counted.get(e.segment) ?? 0) + 1);
  }
  for (const [id, k] of counted) {
    const seg = segs.get(id);
    if (seg !== undefined && seg.refs <= k) {
      out.count += seg.messages.length;
      out.bytes += seg.bytes;
    }
  }
  return out;
}

/** Drops the thread's `n` oldest stored messages (core/lineage.ts raiseFloor); returns what the usage loses. */
export function dropFront(segs: Segments, rec: ThreadRecord, n: number): Dropped {
  if (n <= 0) return { count: 0, bytes: 0 };
  if (rec.entries.length === 0) {
    const bytes = sumBytes(rec.messages, rec.head, rec.head + n);
    dropOldest(rec, n);
    rec.bytes -= bytes;
    return { count: n, bytes };
  }
  const lineage = lineageOf(rec);
  const plan = raiseFloor(lineage, floorOf(lineage, rec.state.lastSeq) + n);
  rec.entries = [...plan.lineage.entries];
  const freed = release(segs, plan.released);
  if (plan.headDropThrough !== undefined) {
    const k = firstAfter(rec, plan.headDropThrough);
    const bytes = sumBytes(rec.messages, rec.head, rec.head + k);
    dropOldest(rec, k);
    rec.bytes -= bytes;
    freed.count += k;
    freed.bytes += bytes;
  }
  return freed;
}

/**
 * Freezes the thread's owned head (a Fork past FORK_COPY_MAX): its messages
 * become a frozen segment the thread's new last entry names, and the thread
 * gets a fresh, empty head under a new id. The usage does not change.
 */
export function freezeHead(segs: Segments, rec: ThreadRecord): LineageEntry {
  const messages = rec.messages.slice(rec.head) as StoredMessage[];
  const low = messages[0]?.seq ?? rec.state.lastSeq + 1;
  segs.set(rec.segment, { low, messages, bytes: rec.bytes, refs: 1 });
  const entry = { segment: rec.segment, low, through: rec.state.lastSeq };
  rec.entries = [...rec.entries, entry];
  rec.messages = [];
  rec.head = 0;
  rec.bytes = 0;
  rec.segment = newSegmentId();
  return entry;
}
