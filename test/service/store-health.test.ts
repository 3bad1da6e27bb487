import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { StoreHealthMonitor, type StoreHealthState } from "../../src/service/store-health.js";
import type { StoreHealth } from "../../src/store/store.js";
import { capturingLogger } from "../transport/harness.js";

/**
 * The monitor's own logic, over a store whose `health` the test scripts
 * (the real stores' health is tested with them, and the whole path with a
 * real redis-server in test/faults/health.test.ts). Timers are fake, so
 * "no check for ten seconds" is a statement about the clock, not a sleep.
 */

/** A Store.health whose every call waits for the test to answer it. */
class ScriptedHealth {
  readonly timeouts: number[] = [];
  readonly #answers: ((outcome: StoreHealth | Error) => void)[] = [];
  inFlight = 0;
  maxInFlight = 0;

  get calls(): number {
    return this.timeouts.length;
  }

  health(timeoutMs: number): Promise<StoreHealth> {
    this.timeouts.push(timeoutMs);
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    return new Promise<StoreHealth>((resolve, reject) => {
      this.#answers.push((outcome) => {
        this.inFlight--;
        if (outcome instanceof Error) reject(outcome);
        else resolve(outcome);
      });
    });
  }

  /** Answers call number `n` (1-based). */
  answer(n: number, outcome: StoreHealth | Error): void {
    const answer = this.#answers[n - 1];
    if (answer === undefined) throw new Error(`health call ${n} was never made`);
    answer(outcome);
  }
}

const INTERVAL_MS = 100;
const TIMEOUT_MS = 1_000;
// The monitor gives up on a check a little after the store's own timeout.
const OVERDUE_MS = TIMEOUT_MS + 250;

function monitorOf(store: ScriptedHealth) {
  const { logger, entries } = capturingLogger();
  const monitor = new StoreHealthMonitor(store, {
    intervalMs: INTERVAL_MS,
    timeoutMs: TIMEOUT_MS,
    logger,
  });
  const changes: StoreHealthState[] = [];
  monitor.subscribe((state) => changes.push(state));
  return { monitor, logs: entries, changes };
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe("StoreHealthMonitor", () => {
  it("publishes and logs each change between serving and not serving once, with the reason", async () => {
    const store = new ScriptedHealth();
    const { monitor, logs, changes } = monitorOf(store);
    const started = monitor.start();
    store.answer(1, { serving: true });
    await started;
    expect(monitor.state).toEqual({ serving: true });
    expect(store.timeouts).toEqual([TIMEOUT_MS]);

    const script: StoreHealth[] = [
      { serving: true },
      { serving: false, reason: "redis down" },
      { serving: false, reason: "redis still down" },
      { serving: true },
    ];
    for (const [i, outcome] of script.entries()) {
      await vi.advanceTimersByTimeAsync(INTERVAL_MS);
      expect(store.calls).toBe(i + 2);
      store.answer(i + 2, outcome);
      await vi.advanceTimersByTimeAsync(0);
      expect(monitor.state).toEqual(outcome);
    }

    expect(changes).toEqual([
      { serving: true },
      { serving: false, reason: "redis down" },
      { serving: true },
    ]);
    expect(logs.filter((e) => e.level !== "debug")).toEqual([
      {
        level: "warn",
        message: "store not serving: health NOT_SERVING, GET /readyz 503",
        fields: { reason: "redis down" },
      },
      { level: "info", message: "store serving again", fields: {} },
    ]);
    await monitor.stop();
  });

  it("counts a check that hangs past its timeout as not serving, and starts no other until it settles", async () => {
    const store = new ScriptedHealth();
    const { monitor, changes } = monitorOf(store);
    let firstOutcomeKnown = false;
    const started = monitor.start().then(() => {
      firstOutcomeKnown = true;
    });
    await vi.advanceTimersByTimeAsync(OVERDUE_MS - 1);
    expect(firstOutcomeKnown).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await started;
    expect(monitor.state).toEqual({
      serving: false,
      reason: `the store did not answer a health check within ${TIMEOUT_MS} ms`,
    });

    // A hundred intervals while the store call hangs: still the one call.
    await vi.advanceTimersByTimeAsync(100 * INTERVAL_MS);
    expect(store.calls).toBe(1);

    // Its late answer is stale: it does not count, but frees the next check.
    store.answer(1, { serving: true });
    await vi.advanceTimersByTimeAsync(0);
    expect(monitor.state.serving).toBe(false);
    await vi.advanceTimersByTimeAsync(INTERVAL_MS);
    expect(store.calls).toBe(2);
    store.answer(2, { serving: true });
    await vi.advanceTimersByTimeAsync(0);
    expect(monitor.state).toEqual({ serving: true });
    expect(store.maxInFlight).toBe(1);
    expect(changes.map((c) => c.serving)).toEqual([false, true]);
    await monitor.stop();
  });

  it("counts a store whose health throws, or says not serving without a reason, as not serving", async () => {
    const store = new ScriptedHealth();
    const { monitor } = monitorOf(store);
    const started = monitor.start();
    store.answer(1, new Error("socket closed"));
    await started;
    expect(monitor.state).toEqual({
      serving: false,
      reason: "the store's health check failed: socket closed",
    });
    await vi.advanceTimersByTimeAsync(INTERVAL_MS);
    store.answer(2, { serving: false });
    await vi.advanceTimersByTimeAsync(0);
    expect(monitor.state).toEqual({ serving: false, reason: "the store reports it cannot serve" });
    await monitor.stop();
  });

  it("stops: no timer left, no check started, nothing published, even with a check hanging", async () => {
    const store = new ScriptedHealth();
    const { monitor, changes } = monitorOf(store);
    const started = monitor.start();
    store.answer(1, { serving: true });
    await started;
    await vi.advanceTimersByTimeAsync(INTERVAL_MS);
    expect(store.calls).toBe(2);

    // Check 2 hangs; stop waits for its deadline at most, never for the store.
    let stopped = false;
    const stopping = monitor.stop().then(() => {
      stopped = true;
    });
    await vi.advanceTimersByTimeAsync(OVERDUE_MS);
    await stopping;
    expect(stopped).toBe(true);
    expect(vi.getTimerCount()).toBe(0);

    store.answer(2, { serving: false, reason: "closing" });
    await vi.advanceTimersByTimeAsync(100 * INTERVAL_MS);
    expect(store.calls).toBe(2);
    expect(vi.getTimerCount()).toBe(0);
    expect(changes).toEqual([{ serving: true }]);
    expect(monitor.state).toEqual({ serving: true });
  });
});
