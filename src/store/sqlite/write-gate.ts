/**
 * What the SQLite store and its write worker share without messages, in one
 * SharedArrayBuffer: a slot per queued write, so that exactly one side decides
 * whether a write runs (the worker takes it) or is refused before it ran (the
 * store cancels it at its deadline, or at the end of close's grace); and a few
 * flags the worker keeps up to date while it is too busy to read messages.
 *
 * A slot is free again only once the worker has answered its write, so the
 * slots also bound the writes the worker may still see (the store's queue).
 */

const FREE = 0;
const QUEUED = 1;
const TAKEN = 2;
const CANCELLED = 3;

/** What the worker is doing, for health's reason when it does not answer. */
export const Activity = { idle: 0, committing: 1, waitingForLock: 2 } as const;
export type Activity = (typeof Activity)[keyof typeof Activity];

/** Indexes of the flags after the slots. */
const ABANDON = 0;
const ACTIVITY = 1;
const DISK_FULL = 2;
const FLAGS = 3;

export class WriteGate {
  private readonly slots: Int32Array;
  private readonly flags: Int32Array;

  /** `shared` from WriteGate.allocate, on both sides. */
  constructor(
    readonly shared: SharedArrayBuffer,
    readonly capacity: number,
  ) {
    this.slots = new Int32Array(shared, 0, capacity);
    this.flags = new Int32Array(shared, capacity * 4, FLAGS);
  }

  static allocate(capacity: number): WriteGate {
    return new WriteGate(new SharedArrayBuffer((capacity + FLAGS) * 4), capacity);
  }

  /** Store: the write in `slot` is on its way to the worker. */
  queue(slot: number): void {
    Atomics.store(this.slots, slot, QUEUED);
  }

  /** Store: refuses the write if the worker has not taken it; true when refused. */
  cancel(slot: number): boolean {
    return Atomics.compareExchange(this.slots, slot, QUEUED, CANCELLED) === QUEUED;
  }

  /** Whether the worker has taken the write (its outcome is then the worker's to tell). */
  taken(slot: number): boolean {
    return Atomics.load(this.slots, slot) === TAKEN;
  }

  /** Store: the worker has answered the write in `slot`. */
  free(slot: number): void {
    Atomics.store(this.slots, slot, FREE);
  }

  /** Worker: takes the write to run it; false when the store already refused it. */
  take(slot: number): boolean {
    return Atomics.compareExchange(this.slots, slot, QUEUED, TAKEN) === QUEUED;
  }

  /** Store, at the end of close's grace: the worker stops waiting for locks. */
  abandon(): void {
    Atomics.store(this.flags, ABANDON, 1);
  }

  get abandoned(): boolean {
    return Atomics.load(this.flags, ABANDON) === 1;
  }

  get activity(): Activity {
    return Atomics.load(this.flags, ACTIVITY) as Activity;
  }

  set activity(a: Activity) {
    Atomics.store(this.flags, ACTIVITY, a);
  }

  /** Set by the worker when a write found the disk (or the size limit) full; cleared by a commit. */
  get diskFull(): boolean {
    return Atomics.load(this.flags, DISK_FULL) === 1;
  }

  set diskFull(full: boolean) {
    Atomics.store(this.flags, DISK_FULL, full ? 1 : 0);
  }
}
