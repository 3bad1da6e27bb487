/**
 * The replies a single-node connection awaits (resp-connection.ts), in the
 * order its commands were sent: Redis answers each connection in order.
 */

/** A command awaiting its reply. */
export interface Awaiting {
  resolve(reply: unknown): void;
  reject(err: Error): void;
}

/** A first-in first-out queue with O(1) push and shift. */
export class AwaitingQueue {
  #items: (Awaiting | undefined)[] = [];
  #head = 0;

  get length(): number {
    return this.#items.length - this.#head;
  }

  push(item: Awaiting): void {
    this.#items.push(item);
  }

  shift(): Awaiting | undefined {
    if (this.#head >= this.#items.length) return undefined;
    const item = this.#items[this.#head];
    this.#items[this.#head++] = undefined;
    // Drop the used front once it is most of the array.
    if (this.#head >= 1024 && this.#head * 2 >= this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return item;
  }

  /** Empties the queue, returning what it held. */
  drain(): Awaiting[] {
    const items = this.#items.slice(this.#head) as Awaiting[];
    this.#items = [];
    this.#head = 0;
    return items;
  }
}

/** Where the replies of MULTI and QUEUED go. */
export const IGNORED: Awaiting = { resolve: () => {}, reject: () => {} };

/** EXEC's reply: the commands' replies, or the first error among them. */
export function execReplies(reply: unknown): unknown[] {
  // null: the transaction was aborted (a WATCH, never set here).
  if (!Array.isArray(reply)) throw new Error("redis connection: the transaction was aborted");
  for (const item of reply) if (item instanceof Error) throw item;
  return reply;
}
