import type { StoredMessage } from "../../core/types.js";

/** The most messages one thread's entry holds; beyond it the oldest half goes. */
export const CACHED_TAIL_MAX = 1024;

/** A thread's newest stored messages, as the cache holds them. */
export interface CachedTail {
  /** Consecutive seqs, oldest first, ending at `lastSeq` (empty when the thread is). */
  readonly messages: readonly StoredMessage[];
  /** Whether `messages` starts at the thread's oldest stored message. */
  readonly whole: boolean;
  /** The thread's last_seq when the entry was last brought up to date. */
  readonly lastSeq: number;
}

interface Entry {
  messages: StoredMessage[];
  whole: boolean;
  lastSeq: number;
  size: number;
}

/**
 * The newest messages of recently used threads (at most CACHED_TAIL_MAX
 * each), least recently used dropped first once the heap they hold passes a
 * budget in bytes (messageSize: what V8 really holds for each, not a guess
 * from character counts). A windowed read (a Get) is served from here when the entry reaches
 * back far enough, so it costs its window, not the thread; every commit that
 * changes a thread's messages updates its entry in O(messages added or
 * dropped), never by copying the thread. The store may cache at all only
 * because its process is the file's sole writer (one process per file).
 *
 * Entries are keyed by incarnation, which is never reused, so an entry can
 * never be mistaken for a later incarnation of its thread; the store drops the
 * entry of an ended incarnation (Clear) and checks `lastSeq` against the
 * thread row before using one. Messages are frozen: callers receive them shared.
 */
export class MessageCache {
  private readonly entries = new Map<string, Entry>();
  private size = 0;

  /** @param budget bytes of heap; 0 disables the cache. */
  constructor(private readonly budget: number) {}

  /** The heap the entries hold, in bytes, as counted against the budget. */
  get bytes(): number {
    return this.size;
  }

  get(incarnation: string): CachedTail | undefined {
    const entry = this.entries.get(incarnation);
    if (entry === undefined) return undefined;
    // Map keeps insertion order: re-inserting marks the entry most recently used.
    this.entries.delete(incarnation);
    this.entries.set(incarnation, entry);
    return entry;
  }

  /**
   * Replaces the thread's entry with (the newest CACHED_TAIL_MAX of)
   * `messages`, which end at `lastSeq`; `whole` when they start at the
   * thread's oldest stored message. The array is copied, never kept.
   */
  set(
    incarnation: string,
    messages: readonly StoredMessage[],
    whole: boolean,
    lastSeq: number,
  ): void {
    this.delete(incarnation);
    if (this.budget <= 0) return;
    const kept = messages.slice(-CACHED_TAIL_MAX);
    const entry: Entry = {
      messages: kept,
      whole: whole && kept.length === messages.length,
      lastSeq,
      size: ENTRY_OVERHEAD,
    };
    for (const m of kept) entry.size += messageSize(m);
    this.entries.set(incarnation, entry);
    this.size += entry.size;
    this.evict();
  }

  /**
   * Brings the entry, if any, up to date with a commit that appended `added`
   * (seqs after `lastSeqBefore`) and then dropped every message up to
   * `droppedThrough` (0: none). An entry that does not end at `lastSeqBefore`
   * is dropped instead: it can never be served stale.
   */
  update(
    incarnation: string,
    lastSeqBefore: number,
    added: readonly StoredMessage[],
    droppedThrough: number,
  ): void {
    const entry = this.entries.get(incarnation);
    if (entry === undefined) return;
    if (entry.lastSeq !== lastSeqBefore) {
      this.delete(incarnation);
      return;
    }
    const sizeBefore = entry.size;
    for (const m of added) {
      entry.messages.push(m);
      entry.size += messageSize(m);
    }
    entry.lastSeq = lastSeqBefore + added.length;
    let cut = 0;
    while (cut < entry.messages.length && (entry.messages[cut]?.seq ?? 0) <= droppedThrough) cut++;
    // The oldest half goes at once, so the copy costs O(1) per added message amortised.
    if (entry.messages.length - cut > CACHED_TAIL_MAX) {
      cut = entry.messages.length - CACHED_TAIL_MAX / 2;
      entry.whole = false;
    }
    if (cut > 0) {
      for (let i = 0; i < cut; i++) entry.size -= messageSize(entry.messages[i] as StoredMessage);
      entry.messages = entry.messages.slice(cut);
    }
    this.size += entry.size - sizeBefore;
    this.evict();
  }

  /**
   * Brings the entry, if any, up to date with a Rewind that dropped every
   * message after `toSeq` from a thread whose last seq was `lastSeqBefore`.
   * The next Add reuses those seqs for other messages, so none of them may
   * stay. An entry that does not end at `lastSeqBefore` is dropped instead.
   */
  rewind(incarnation: string, lastSeqBefore: number, toSeq: number): void {
    const entry = this.entries.get(incarnation);
    if (entry === undefined) return;
    if (entry.lastSeq !== lastSeqBefore) {
      this.delete(incarnation);
      return;
    }
    let kept = entry.messages.length;
    while (kept > 0 && (entry.messages[kept - 1]?.seq ?? 0) > toSeq) kept--;
    // Cut in place, in O(messages dropped): callers only ever get copies of the array.
    for (const m of entry.messages.splice(kept)) {
      const size = messageSize(m);
      entry.size -= size;
      this.size -= size;
    }
    entry.lastSeq = toSeq;
  }

  delete(incarnation: string): void {
    const entry = this.entries.get(incarnation);
    if (entry === undefined) return;
    this.entries.delete(incarnation);
    this.size -= entry.size;
  }

  clear(): void {
    this.entries.clear();
    this.size = 0;
  }

  private evict(): void {
    for (const [key, entry] of this.entries) {
      if (this.size <= this.budget) break;
      this.entries.delete(key);
      this.size -= entry.size;
    }
  }
}

/**
 * Bytes of V8 heap a string of this text holds: a 16-byte header and one byte
 * per character when every character fits in Latin-1, else two, rounded up
 * to 8. (Checked by a regex without backtracking: linear in the text.)
 */
export function stringBytes(s: string): number {
  const perChar = NOT_LATIN1.test(s) ? 2 : 1;
  return (16 + s.length * perChar + 7) & ~7;
}

const NOT_LATIN1 = /[\u0100-\uffff]/;

/**
 * Heap one cached message holds beyond its strings: its object (map, 4
 * fields), its role string (a copy per row read), its create_time (a heap
 * number: ms since 1970 is beyond a small integer) and its array slot.
 * test/store/message-cache.test.ts measures messages against it.
 */
const MESSAGE_OVERHEAD = 112;

/** Heap one entry holds beyond its messages: the map's slot, its key, the entry and its array. */
export const ENTRY_OVERHEAD = 200;

/** The heap, in bytes, a cached message holds (measured: within a few % of V8's figure). */
export function messageSize(m: StoredMessage): number {
  let size = MESSAGE_OVERHEAD + stringBytes(m.content);
  if (m.name !== undefined) size += 16 + stringBytes(m.name);
  if (m.toolCallId !== undefined) size += 16 + stringBytes(m.toolCallId);
  if (m.toolCalls !== undefined) {
    size += 32;
    for (const c of m.toolCalls) {
      size += 48 + stringBytes(c.id) + stringBytes(c.name) + stringBytes(c.arguments);
    }
  }
  if (m.metadata !== undefined) {
    size += 64;
    for (const [k, v] of Object.entries(m.metadata)) size += 24 + stringBytes(k) + stringBytes(v);
  }
  return size;
}
