import { MemoryError } from "./errors.js";

/**
 * How a fork shares its parent's messages without copying them: the storage
 * model every store follows (docs/forks.md), as pure functions over seqs.
 *
 * Messages live in segments. A thread's messages are its lineage: frozen
 * segments it references (`entries`), oldest first, then at most one segment
 * it owns (`head`). An owned segment has one holder and changes as today
 * (appends, in-place trims and rewinds); a frozen one never changes again and
 * is deleted whole when the last entry naming it goes (its reference count,
 * kept by the store, reaches 0). A thread that never forked and was never
 * forked from has only its owned head: today's layout and today's cost.
 *
 * Fork freezes the parent's head when the fork point lies in it (the parent's
 * next Add then opens a fresh head), unless the fork takes at most
 * FORK_COPY_MAX of its messages, which it copies into a head of its own
 * instead. So every entry but a thread's first covers more than
 * FORK_COPY_MAX seqs when a Fork makes it, which bounds a lineage by its
 * thread's stored messages, not by how many forks were made.
 */

/** A Fork copies up to this many messages of the parent's head instead of freezing it. */
export const FORK_COPY_MAX = 128;

/** A thread references at most this many frozen segments; a Fork past it is refused. */
export const MAX_LINEAGE = 63;

/** A frozen segment a thread references for seqs [low, through]. */
export interface LineageEntry {
  /** The store's id of the segment. */
  segment: string;
  low: number;
  through: number;
}

/** The owned segment of a thread: seqs [low, last_seq]. */
export interface OwnedHead {
  segment: string;
  /** The oldest seq it stores; above last_seq when it stores none. */
  low: number;
}

/**
 * A thread's messages: `entries` (through strictly increasing, each low the
 * previous through + 1, the first's the thread's oldest stored seq) and
 * `head` (its low the last entry's through + 1). No head: the thread's next
 * Add opens one at last_seq + 1.
 */
export interface Lineage {
  entries: readonly LineageEntry[];
  head: OwnedHead | undefined;
}

/** The oldest seq the thread stores (above lastSeq when none). */
export function floorOf(lineage: Lineage, lastSeq: number): number {
  return lineage.entries[0]?.low ?? lineage.head?.low ?? lastSeq + 1;
}

/** One range read of a segment. */
export interface SegmentRange {
  segment: string;
  from: number;
  to: number;
}

/** Where seqs [from, to] of the thread are stored, oldest first (empty parts left out). */
export function rangesFor(
  lineage: Lineage,
  lastSeq: number,
  from: number,
  to: number,
): SegmentRange[] {
  const out: SegmentRange[] = [];
  const entries = lineage.entries;
  // Binary search for the first entry whose through is at least `from`.
  let lo = 0;
  let hi = entries.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((entries[mid]?.through ?? 0) < from) lo = mid + 1;
    else hi = mid;
  }
  for (let i = lo; i < entries.length; i++) {
    const e = entries[i] as LineageEntry;
    if (e.low > to) return out;
    const a = Math.max(from, e.low);
    const b = Math.min(to, e.through);
    if (a <= b) out.push({ segment: e.segment, from: a, to: b });
  }
  const head = lineage.head;
  if (head !== undefined) {
    const a = Math.max(from, head.low);
    const b = Math.min(to, lastSeq);
    if (a <= b) out.push({ segment: head.segment, from: a, to: b });
  }
  return out;
}

/** What a store writes for a Fork's messages (after core/fork.ts decideFork). */
export interface ForkLineagePlan {
  /** The fork's frozen entries; the store adds one reference per entry. */
  forkEntries: LineageEntry[];
  /** Seqs of the parent's head the store copies into the fork's new head. */
  copy: SegmentRange | undefined;
  /**
   * The parent's lineage after the Fork: unchanged, or with its head frozen
   * (then the head segment is referenced by the parent's new last entry and
   * the fork's; the store records it as frozen with those references).
   */
  parent: Lineage;
  headFrozen: boolean;
  /** The parent's stored messages up to atSeq (shared or copied), before the fork's own trim. */
  sharedCount: number;
}

/**
 * The lineage of a fork of a thread at `atSeq` (at least the parent's floor
 * minus one). Throws failed_precondition when the fork would reference more
 * than MAX_LINEAGE segments.
 */
export function planForkLineage(parent: Lineage, lastSeq: number, atSeq: number): ForkLineagePlan {
  const floor = floorOf(parent, lastSeq);
  const forkEntries: LineageEntry[] = [];
  for (const e of parent.entries) {
    if (e.low > atSeq) break;
    forkEntries.push({ ...e, through: Math.min(e.through, atSeq) });
  }
  let copy: SegmentRange | undefined;
  let next = parent;
  let headFrozen = false;
  const head = parent.head;
  if (head !== undefined && atSeq >= head.low) {
    if (atSeq - head.low + 1 <= FORK_COPY_MAX) {
      copy = { segment: head.segment, from: head.low, to: atSeq };
    } else {
      const frozen = { segment: head.segment, low: head.low, through: lastSeq };
      next = { entries: [...parent.entries, frozen], head: undefined };
      headFrozen = true;
      forkEntries.push({ segment: head.segment, low: head.low, through: atSeq });
    }
  }
  if (forkEntries.length > MAX_LINEAGE) {
    throw new MemoryError(
      "failed_precondition",
      `thread_id: its messages up to at_seq span ${forkEntries.length} segments; a fork may reference at most ${MAX_LINEAGE}`,
      { field: "thread_id" },
    );
  }
  return {
    forkEntries,
    copy,
    parent: next,
    headFrozen,
    sharedCount: Math.max(0, atSeq - floor + 1),
  };
}

/** What a store does to a thread's segments when its oldest stored seq rises. */
export interface FloorPlan {
  lineage: Lineage;
  /** Entries dropped: one reference less on each of their segments. */
  released: LineageEntry[];
  /** Delete the owned head's messages up to this seq (in place, as today's trim). */
  headDropThrough: number | undefined;
}

/** The thread's segments once it stores nothing below `newFloor` (a trim). */
export function raiseFloor(lineage: Lineage, newFloor: number): FloorPlan {
  const released: LineageEntry[] = [];
  const entries: LineageEntry[] = [];
  for (const e of lineage.entries) {
    if (e.through < newFloor) released.push(e);
    else entries.push(e.low < newFloor ? { ...e, low: newFloor } : e);
  }
  let head = lineage.head;
  let headDropThrough: number | undefined;
  if (head !== undefined && newFloor > head.low) {
    headDropThrough = newFloor - 1;
    head = { segment: head.segment, low: newFloor };
  }
  return { lineage: { entries, head }, released, headDropThrough };
}

/** What a store does to a thread's segments for a Rewind to `toSeq`. */
export interface CutPlan {
  lineage: Lineage;
  /** Entries dropped: one reference less on each of their segments. */
  released: LineageEntry[];
  /** Delete the owned head's messages after this seq, in place (as today's Rewind). */
  headDropAfter: number | undefined;
  /** Delete the owned head whole: it holds only seqs after toSeq. */
  headDropped: boolean;
}

/** The thread's segments after a Rewind to `toSeq` (checked by core/rewind.ts). */
export function cutLineage(lineage: Lineage, lastSeq: number, toSeq: number): CutPlan {
  const released: LineageEntry[] = [];
  const entries: LineageEntry[] = [];
  for (const e of lineage.entries) {
    if (e.low > toSeq) released.push(e);
    else entries.push(e.through > toSeq ? { ...e, through: toSeq } : e);
  }
  const head = lineage.head;
  if (head === undefined || toSeq >= lastSeq) {
    return { lineage: { entries, head }, released, headDropAfter: undefined, headDropped: false };
  }
  if (toSeq >= head.low) {
    return { lineage: { entries, head }, released, headDropAfter: toSeq, headDropped: false };
  }
  return {
    lineage: { entries, head: undefined },
    released,
    headDropAfter: undefined,
    headDropped: true,
  };
}
