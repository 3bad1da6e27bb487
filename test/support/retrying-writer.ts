/**
 * A client writing to one thread as an agent platform would while its store
 * fails: one Add of one message at a time, each with a request_id, retried
 * with the same request_id after UNAVAILABLE or DEADLINE_EXCEEDED until it
 * is acknowledged. It checks each acknowledged Add got the next seq (so a
 * retry of an Add that was stored replays it instead of storing it twice)
 * and counts what it learned, for the fault tests' audits.
 */
import { randomUUID } from "node:crypto";
import { Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { CallFailed, type Driver } from "../integration/drivers.js";

export class RetryingWriter {
  /** Adds acknowledged: the thread's messages m1 … m<acknowledged>. */
  acknowledged = 0;
  /** Attempts that failed (and were retried). */
  failures = 0;
  /** Longest a failed attempt took to fail, in ms. */
  slowestFailureMs = 0;
  /** The last failure ("CODE: message"), for a test's diagnostics. */
  lastFailure = "";
  #stop = false;
  #abandon = false;
  #running: Promise<void> | undefined;

  constructor(
    readonly driver: Driver,
    readonly threadId: string,
    readonly deadlineMs: number,
  ) {}

  start(): void {
    this.#running = this.#run();
  }

  /** Stops after the Add in flight is acknowledged; rejects if the writer met anything but a retryable failure. */
  async stop(): Promise<void> {
    this.#stop = true;
    await this.#running;
  }

  /** Gives up at once, the Add in flight unacknowledged: a failed test's clean-up. */
  async abandon(): Promise<void> {
    this.#stop = true;
    this.#abandon = true;
    await this.#running?.catch(() => {});
  }

  async #run(): Promise<void> {
    while (!this.#stop) {
      const requestId = randomUUID();
      const content = `m${this.acknowledged + 1}`;
      for (;;) {
        const began = Date.now();
        try {
          const r = await this.driver.add(
            { threadId: this.threadId, messages: [{ role: Role.USER, content }], requestId },
            { timeoutMs: this.deadlineMs },
          );
          if (Number(r.lastSeq) !== this.acknowledged + 1) {
            throw new Error(`${content} acknowledged at seq ${r.lastSeq}`);
          }
          this.acknowledged += 1;
          break;
        } catch (err) {
          const code = err instanceof CallFailed ? err.code : "";
          if (code !== "UNAVAILABLE" && code !== "DEADLINE_EXCEEDED") throw err;
          this.failures += 1;
          this.lastFailure = String(err instanceof Error ? err.message : err);
          this.slowestFailureMs = Math.max(this.slowestFailureMs, Date.now() - began);
          if (this.#abandon) return;
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    }
  }
}
