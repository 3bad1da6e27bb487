import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { MemoryError } from "../../core/errors.js";
import { Activity, WriteGate } from "./write-gate.js";
import type { WriteWorkerData } from "./write-worker.js";
import type { QueuedWrite, WriteOp } from "./writes/ops.js";
import {
  type Committed,
  fromWireError,
  queuedPastDeadline,
  type WireError,
  type WriteOutcome,
} from "./writes/outcomes.js";

/**
 * After close's grace, how long the worker has to stop waiting for a lock
 * (it looks between slices of 25 ms) and then to end once terminated.
 */
const STOP_WAIT_MS = 250;

/** setTimeout fires at once for longer delays (24 days). */
const MAX_TIMER_DELAY_MS = 2_147_483_647;

/**
 * The worker's compiled file, beside this module when it runs from dist/.
 * From the sources (vitest runs them as .ts) it is the build's copy, so
 * tests need `npm run build` first.
 */
function workerFile(): string {
  const here = import.meta.url;
  const url = here.endsWith(".ts")
    ? new URL("../../../dist/src/store/sqlite/write-worker.js", here)
    : new URL("./write-worker.js", here);
  const file = fileURLToPath(url);
  if (!existsSync(file)) {
    throw new Error(`the SQLite write worker ${file} is missing: run npm run build`);
  }
  return file;
}

interface Waiting {
  resolve: (c: Committed<unknown>) => void;
  reject: (err: Error) => void;
  /** The keys of `inFlight` this write holds. */
  keys: string[];
  namespace: string;
  /** Its WriteGate slot, free again once the worker has answered. */
  slot: number;
  /** Refuses it at its call's deadline if the worker has not taken it. */
  timer?: NodeJS.Timeout;
  /** Already refused (deadline, close): the worker's answer only frees the slot. */
  refused?: boolean;
}

type WorkerMessage =
  | { type: "ready" }
  | { type: "closed" }
  | { type: "failed"; error: WireError }
  | { type: "done"; outcomes: WriteOutcome[] }
  | { type: "pong"; blockedBy?: string };

/** Resolves whether `done` settles within `ms`. */
async function within(done: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  const inTime = await Promise.race([done.then(() => true), late]);
  clearTimeout(timer);
  return inTime;
}

/**
 * The store's side of the write worker (write-worker.ts): the queue of
 * writes handed to it, bounded by the WriteGate's slots, each answered
 * once the group holding it has committed. `onCommitted` runs for each
 * committed write before its caller hears of it, in commit order (the store
 * brings its cache up to date and publishes the events there).
 */
export class WriteWorker {
  readonly #gate: WriteGate;
  readonly #worker: Worker;
  readonly #exited: Promise<void>;
  readonly #maxQueued: number;
  readonly #onCommitted: (c: Committed<unknown>, namespace: string) => void;
  /** Slots of the gate not held by a write; a write takes one, so they bound the queue. */
  readonly #freeSlots: number[];
  readonly #waiting = new Map<number, Waiting>();
  /** Writes in the worker per thread ("ns\0id") and per namespace ("ns\0*", clearAll). */
  readonly #inFlight = new Map<string, number>();
  #nextId = 1;
  #outbox: QueuedWrite[] = [];
  #closing = false;
  #closed: Promise<void> | undefined;
  /** Why the worker stopped, once it has (then every write is refused). */
  #broken: Error | undefined;
  /** The ping in flight (one at a time, shared by concurrent health calls). */
  #ping: Promise<string | undefined> | undefined;
  #answerPing: (error: string | undefined) => void = () => {};

  constructor(
    data: Omit<WriteWorkerData, "gate" | "gateCapacity">,
    maxQueued: number,
    onCommitted: (c: Committed<unknown>, namespace: string) => void,
  ) {
    const file = workerFile();
    this.#maxQueued = maxQueued;
    this.#onCommitted = onCommitted;
    this.#gate = WriteGate.allocate(maxQueued);
    this.#freeSlots = Array.from({ length: maxQueued }, (_, i) => maxQueued - 1 - i);
    const workerData: WriteWorkerData = {
      ...data,
      gate: this.#gate.shared,
      gateCapacity: maxQueued,
    };
    this.#worker = new Worker(file, { workerData });
    // Keeps the process alive only while writes wait for it (see write and settle).
    this.#worker.unref();
    this.#exited = new Promise<void>((resolve) => this.#worker.once("exit", () => resolve()));
    this.#worker.on("message", (m: WorkerMessage) => this.#received(m));
    this.#worker.on("error", (err) => this.#fail(err));
    this.#worker.on("exit", (code) =>
      this.#fail(new Error(`the write worker exited (code ${code})`)),
    );
  }

  /** Why the worker stopped, once it has. */
  get broken(): Error | undefined {
    return this.#broken;
  }

  /** Whether the last write found the disk (or the size limit) full. */
  get diskFull(): boolean {
    return this.#gate.diskFull;
  }

  /** Whether a write that may change this thread is still in the worker. */
  writing(namespace: string, threadId: string): boolean {
    return this.#inFlight.has(`${namespace}\0${threadId}`) || this.#inFlight.has(`${namespace}\0*`);
  }

  /**
   * Hands `op` to the worker; resolves once the group holding it has
   * committed. With a `deadline`, a write the worker has not taken by then
   * is refused with deadline_exceeded, unstored. `threadId`: the thread (or
   * threads, a Fork's) the write may change, held as in flight until answered.
   */
  write<T>(
    op: WriteOp,
    namespace: string,
    threadId: string | readonly string[],
    deadline?: number,
  ): Promise<Committed<T>> {
    const refused = this.#refusal(deadline);
    if (refused !== undefined) return Promise.reject(refused);
    const slot = this.#freeSlots.pop();
    if (slot === undefined) {
      return Promise.reject(
        new MemoryError(
          "unavailable",
          `the SQLite write queue is full (${this.#maxQueued} writes waiting for the disk); retry with backoff`,
        ),
      );
    }
    const id = this.#nextId++;
    if (this.#waiting.size === 0) this.#worker.ref();
    const keys = (typeof threadId === "string" ? [threadId] : threadId).map(
      (id) => `${namespace}\0${id}`,
    );
    for (const key of keys) this.#hold(key);
    this.#gate.queue(slot);
    // After this turn's I/O callbacks: the writes of every call that arrived
    // together cross to the worker in one message.
    if (this.#outbox.length === 0) setImmediate(() => this.#post());
    this.#outbox.push(deadline === undefined ? { id, slot, op } : { id, slot, op, deadline });
    return new Promise<Committed<T>>((resolve, reject) => {
      const w: Waiting = {
        resolve: resolve as (c: Committed<unknown>) => void,
        reject,
        keys,
        namespace,
        slot,
      };
      // Beyond a timer's range the worker's own check at the deadline is enough.
      if (deadline !== undefined && deadline - Date.now() <= MAX_TIMER_DELAY_MS) {
        w.timer = setTimeout(() => this.#refuse(w, queuedPastDeadline()), deadline - Date.now());
        w.timer.unref();
      }
      this.#waiting.set(id, w);
    });
  }

  /** Resolves with the worker's answer: why writes cannot proceed, when its probe failed. */
  ping(probe: boolean): Promise<string | undefined> {
    this.#ping ??= new Promise<string | undefined>((resolve) => {
      this.#answerPing = (error) => {
        this.#ping = undefined;
        this.#answerPing = () => {};
        resolve(error);
      };
      // Behind the writes queued so far: the answer says the worker got through them.
      this.#post();
      this.#worker.postMessage({ type: "ping", probe });
    });
    return this.#ping;
  }

  /** What the worker is doing, for health's reason when it does not answer. */
  activity(): string {
    switch (this.#gate.activity) {
      case Activity.waitingForLock:
        return "it is waiting for a lock another process holds on the database";
      case Activity.committing:
        return "it is inside a transaction (a slow or hung disk?)";
      default:
        return "it has no write in progress (its thread is starved, or this one is)";
    }
  }

  /**
   * Lets the worker commit and answer what it was handed within `graceMs`;
   * then it stops waiting for locks (writes it had not taken are refused,
   * unstored), is terminated, and every write still unanswered is refused
   * with unavailable. Resolves within graceMs + 2 × STOP_WAIT_MS, unless
   * the worker's thread is stuck inside SQLite (a hung fsync), which no
   * one can end: then the process is left to exit without it.
   */
  close(graceMs: number): Promise<void> {
    if (this.#closed !== undefined) return this.#closed;
    this.#closing = true;
    this.#worker.ref();
    // Writes already handed over are committed and answered first.
    this.#post();
    this.#worker.postMessage({ type: "close" });
    this.#closed = (async () => {
      if (!(await within(this.#exited, graceMs))) {
        this.#gate.abandon();
        if (!(await within(this.#exited, STOP_WAIT_MS))) {
          void this.#worker.terminate();
          await within(this.#exited, STOP_WAIT_MS);
        }
      }
      this.#fail(new Error("the store closed"));
      this.#worker.unref();
    })();
    return this.#closed;
  }

  /** Why a new write is refused at once, if it is. */
  #refusal(deadline: number | undefined): MemoryError | undefined {
    if (this.#closing) return new MemoryError("unavailable", "the store is closed");
    if (this.#broken !== undefined) {
      return new MemoryError("unavailable", `the SQLite store stopped: ${this.#broken.message}`);
    }
    if (deadline !== undefined && Date.now() >= deadline) return queuedPastDeadline();
    return undefined;
  }

  #received(m: WorkerMessage): void {
    switch (m.type) {
      case "done":
        for (const outcome of m.outcomes) this.#settle(outcome);
        break;
      case "failed":
        this.#fail(fromWireError(m.error));
        break;
      case "pong":
        this.#answerPing(m.blockedBy);
        break;
      default:
        break;
    }
  }

  /** Posts every write queued since the last post as one message. */
  #post(): void {
    const writes = this.#outbox;
    this.#outbox = [];
    if (writes.length > 0) this.#worker.postMessage({ type: "writes", writes });
  }

  #settle(outcome: WriteOutcome): void {
    const w = this.#waiting.get(outcome.id);
    if (w === undefined) return;
    this.#waiting.delete(outcome.id);
    clearTimeout(w.timer);
    this.#gate.free(w.slot);
    this.#freeSlots.push(w.slot);
    if (this.#waiting.size === 0) this.#worker.unref();
    if (w.refused === true) return;
    if (outcome.ok) {
      this.#onCommitted(outcome.committed, w.namespace);
      this.#releaseAll(w.keys);
      w.resolve(outcome.committed);
    } else {
      this.#releaseAll(w.keys);
      w.reject(fromWireError(outcome.error));
    }
  }

  /**
   * Answers every write still waiting once the worker is gone (or given up
   * on): one it never took was not stored; one it took may have committed
   * just before, so its outcome is unknown (a retry with its request_id is
   * safe).
   */
  #fail(err: Error): void {
    this.#broken ??= err;
    const broken = this.#broken;
    for (const [id, w] of this.#waiting) {
      this.#waiting.delete(id);
      clearTimeout(w.timer);
      if (w.refused === true) continue;
      this.#releaseAll(w.keys);
      const outcome = this.#gate.cancel(w.slot)
        ? "this write was not stored"
        : "this write's outcome is unknown";
      w.reject(
        new MemoryError("unavailable", `the SQLite store stopped (${broken.message}): ${outcome}`),
      );
    }
  }

  /** Refuses a write the worker has not taken; it stays in `waiting` until the worker answers. */
  #refuse(w: Waiting, err: MemoryError): void {
    if (w.refused === true || !this.#gate.cancel(w.slot)) return;
    w.refused = true;
    this.#releaseAll(w.keys);
    w.reject(err);
  }

  #hold(key: string): void {
    this.#inFlight.set(key, (this.#inFlight.get(key) ?? 0) + 1);
  }

  #releaseAll(keys: readonly string[]): void {
    for (const key of keys) this.#release(key);
  }

  #release(key: string): void {
    const n = (this.#inFlight.get(key) ?? 1) - 1;
    if (n <= 0) this.#inFlight.delete(key);
    else this.#inFlight.set(key, n);
  }
}
