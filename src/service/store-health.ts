import type { Logger } from "../logger.js";
import type { Store, StoreHealth } from "../store/store.js";

/** What the monitor last found: whether the store can serve, and why not. */
export type StoreHealthState = Readonly<StoreHealth>;

export interface StoreHealthMonitorOptions {
  /** Pause between the end of one check and the start of the next. */
  readonly intervalMs: number;
  /** Time the store gets to answer a check (Store.health's `timeoutMs`). Default 1000. */
  readonly timeoutMs?: number;
  readonly logger: Logger;
}

export const DEFAULT_HEALTH_TIMEOUT_MS = 1_000;
// A store that honours its timeout answers first, with its own reason; the
// monitor's deadline only catches one that does not.
const OVERDUE_GRACE_MS = 250;

/**
 * Checks the store's health (Store.health) every `intervalMs`, one check at
 * a time, and tells subscribers when the store turns serving or not serving
 * (logged once per change). gRPC health and GET /readyz read `state`, so a
 * probe never costs a store call.
 *
 * A check that has not answered `timeoutMs` (plus a little) after it began
 * counts as not serving at once; the next check waits until that one has
 * settled, so a hung store never piles up checks.
 */
export class StoreHealthMonitor {
  readonly #store: Pick<Store, "health">;
  readonly #intervalMs: number;
  readonly #timeoutMs: number;
  readonly #logger: Logger;
  readonly #listeners = new Set<(state: StoreHealthState) => void>();
  #state: StoreHealthState = { serving: false, reason: "the store has not been checked yet" };
  #checked = false;
  #stopped = false;
  #started = false;
  #timer: NodeJS.Timeout | undefined;
  /** The check under way, until its outcome is published (bounded by the deadline). */
  #publishing: Promise<void> | undefined;

  constructor(store: Pick<Store, "health">, options: StoreHealthMonitorOptions) {
    this.#store = store;
    this.#intervalMs = options.intervalMs;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_HEALTH_TIMEOUT_MS;
    this.#logger = options.logger;
  }

  /** The outcome of the latest check (not serving until the first one answers). */
  get state(): StoreHealthState {
    return this.#state;
  }

  /** Calls `listener` with the new state whenever `serving` changes. Returns the unsubscribe. */
  subscribe(listener: (state: StoreHealthState) => void): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  /** Runs the first check, then keeps checking. Resolves once the first outcome is known. */
  start(): Promise<void> {
    if (this.#started) throw new Error("StoreHealthMonitor already started");
    this.#started = true;
    return this.#check();
  }

  /**
   * Stops checking: no check starts from now on and no timer is left. Waits
   * for the outcome of a check under way (at most its deadline), never for a
   * store call that hangs past it. Idempotent.
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#publishing;
  }

  #check(): Promise<void> {
    const storeCall = this.#callStore();
    let overdue: NodeJS.Timeout | undefined;
    const deadline = new Promise<StoreHealth>((resolve) => {
      overdue = setTimeout(
        () =>
          resolve({
            serving: false,
            reason: `the store did not answer a health check within ${this.#timeoutMs} ms`,
          }),
        this.#timeoutMs + OVERDUE_GRACE_MS,
      );
    });
    const publishing = Promise.race([storeCall, deadline]).then((outcome) => {
      clearTimeout(overdue);
      if (!this.#stopped) this.#publish(outcome);
    });
    this.#publishing = publishing;
    // The next check begins an interval after this one has settled, however long it hung.
    void Promise.all([storeCall, publishing]).then(() => {
      if (this.#publishing === publishing) this.#publishing = undefined;
      if (this.#stopped) return;
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        if (!this.#stopped) void this.#check();
      }, this.#intervalMs);
      // Shutdown stops the monitor; a forgotten one must not keep the process alive.
      this.#timer.unref();
    });
    return publishing;
  }

  /** Store.health, never rejecting: a throw is reported as not serving. */
  async #callStore(): Promise<StoreHealth> {
    try {
      const outcome = await this.#store.health(this.#timeoutMs);
      return outcome.serving
        ? { serving: true }
        : { serving: false, reason: outcome.reason ?? "the store reports it cannot serve" };
    } catch (err) {
      return {
        serving: false,
        reason: `the store's health check failed: ${err instanceof Error ? err.message : String(err)}`,
      };
    }
  }

  #publish(outcome: StoreHealth): void {
    const changed = !this.#checked || outcome.serving !== this.#state.serving;
    const wasChecked = this.#checked;
    this.#checked = true;
    this.#state = outcome;
    if (!changed) return;
    if (outcome.serving) {
      if (wasChecked) this.#logger.info("store serving again", {});
    } else {
      this.#logger.warn("store not serving: health NOT_SERVING, GET /readyz 503", {
        reason: outcome.reason,
      });
    }
    for (const listener of this.#listeners) {
      try {
        listener(outcome);
      } catch (err) {
        // One subscriber's bug must not stop the checks or the other subscribers.
        this.#logger.error("store health subscriber failed", { err });
      }
    }
  }
}
