import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { mainThreadSchedMicros, parseSchedstat } from "../../bench/cpu-time.js";

/**
 * The unary bench's "main on CPU %" and "main waits %" (bench/report.ts):
 * the server's main thread's schedstat, read before and after a measurement.
 */
describe("the bench's main-thread schedule", () => {
  it("reads time on a CPU and time waiting for one from a schedstat line", () => {
    // What Linux 6.18 printed for a node server's main thread: ns on a CPU, ns waiting, timeslices.
    expect(parseSchedstat("8543210987 1234567890 412345\n")).toEqual({
      onCpu: 8_543_210.987,
      waiting: 1_234_567.89,
    });
    expect(parseSchedstat("")).toBeUndefined();
    expect(parseSchedstat("12 x 3")).toBeUndefined();
  });

  it("sees this process's main thread run while it works and not while it sleeps", async () => {
    const read = (): { onCpu: number; waiting: number } => {
      const sched = mainThreadSchedMicros(process.pid);
      if (sched === undefined) throw new Error("no schedstat for this process's main thread");
      return sched;
    };
    const start = read();
    const spinUntil = Date.now() + 100;
    while (Date.now() < spinUntil) {
      // Keep the CPU busy for 100 ms of wall time.
    }
    const afterWork = read();
    await sleep(200);
    const afterSleep = read();
    // 100 ms of wall time spinning: on a CPU for most of it (a busy machine may take some).
    expect(afterWork.onCpu - start.onCpu).toBeGreaterThan(50_000);
    // 200 ms asleep: well under that on a CPU (vitest's own timers run meanwhile).
    expect(afterSleep.onCpu - afterWork.onCpu).toBeLessThan(100_000);
    expect(afterSleep.waiting).toBeGreaterThanOrEqual(afterWork.waiting);
  });
});
