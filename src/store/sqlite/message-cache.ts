import type { StoredMessage } from "../../core/types.js";

/**
 * The stored messages of recently used threads, least recently used dropped
 * first once their approximate size passes a budget. The SQLite store keeps
 * it because reading a thread row by row costs about a microsecond per
 * message, every Get reads the whole thread, and trimming needs the oldest
 * messages' roles; the store may cache at all only because its process is the
 * file's sole writer (one process per file).
 *
 * Entries are keyed by incarnation, which is never reused, so an entry can
 * never be mistaken for a later incarnation of its thread. Messages are
 * frozen: callers receive them shared.
 */
export class MessageCache {
  private readonly entries = new Map<
    string,
    { messages: readonly StoredMessage[]; size: number }
  >();
  private size = 0;

  /** @param budget approximate size in characters; 0 disables the cache. */
  constructor(private readonly budget: number) {}

  get(incarnation: string): readonly StoredMessage[] | undefined {
    const entry = this.entries.get(incarnation);
    if (entry === undefined) return undefined;
    // Map keeps insertion order: re-inserting marks the entry most recently used.
    this.entries.delete(incarnation);
    this.entries.set(incarnation, entry);
    return entry.messages;
  }

  /** Replaces the thread's messages; a thread larger than the whole budget is not kept. */
  set(incarnation: string, messages: readonly StoredMessage[]): void {
    this.delete(incarnation);
    let size = 0;
    for (const m of messages) size += messageSize(m);
    if (size > this.budget) return;
    this.entries.set(incarnation, { messages, size });
    this.size += size;
    for (const [key, entry] of this.entries) {
      if (this.size <= this.budget) break;
      this.entries.delete(key);
      this.size -= entry.size;
    }
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
}

/** Roughly the memory a message holds: its text plus a fixed overhead. */
function messageSize(m: StoredMessage): number {
  let size = 100 + m.content.length + (m.name?.length ?? 0) + (m.toolCallId?.length ?? 0);
  for (const c of m.toolCalls ?? []) size += 50 + c.id.length + c.name.length + c.arguments.length;
  for (const [k, v] of Object.entries(m.metadata ?? {})) size += 20 + k.length + v.length;
  return size;
}
