import { describe, expect, it } from "vitest";
import { h2loadSpread, parseH2loadReport } from "../../bench/h2load.js";

// What h2load 1.52 printed (its summary lines) for a 1.5 s run against the
// bare server, then the stat line of the `sh` that waited for it (pid,
// command, state, ..., cutime 11 and cstime 10 ticks). h2load counts the
// status codes of answers that came after its time was up, hence 2xx > done.
const SUCCESS = `
finished in 1.50s, 12565.33 req/s, 1.27MB/s
requests: 18848 total, 18912 started, 18848 done, 18848 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 18880 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 1.91MB (2002511) total, 92.72KB (94944) headers (space savings 96.38%), 1.30MB (1359360) data
                     min         max         mean         sd        +/- sd
time for request:      861us     44.57ms      4.98ms      4.09ms    96.08%

12783 (sh) S 12778 12778 5481 0 -1 4194304 89 853 0 4 0 0 11 10 20 0 1 0 4048403 2654208 375
`;

// What it printed for 10 calls (-n 10) to a port nobody listens on.
const REFUSED = `
finished in 3.38ms, 0.00 req/s, 0B/s
requests: 10 total, 0 started, 0 done, 0 succeeded, 10 failed, 10 errored, 0 timeout
status codes: 0 2xx, 0 3xx, 0 4xx, 0 5xx
`;

describe("the h2load bench driver", () => {
  it("reads the calls that succeeded, the time, and h2load's CPU from its shell's stat line", () => {
    expect(parseH2loadReport(SUCCESS, 100)).toEqual({
      succeeded: 18848,
      failed: 0,
      elapsedMs: 1500,
      childCpuMicros: 210_000,
    });
    // The clock rate is the machine's (getconf CLK_TCK), not assumed.
    expect(parseH2loadReport(SUCCESS, 1000).childCpuMicros).toBe(21_000);
  });

  it("counts h2load's failed calls once: its errored ones are among them", () => {
    const report = parseH2loadReport(REFUSED, 100);
    expect(report.succeeded).toBe(0);
    expect(report.failed).toBe(10);
    expect(report.elapsedMs).toBeCloseTo(3.38, 5);
  });

  it("counts a 3xx answer, which h2load calls succeeded, as a failed gRPC call", () => {
    // Edited from SUCCESS: 5 of the answers were redirects.
    const redirected = SUCCESS.replace("18880 2xx, 0 3xx", "18875 2xx, 5 3xx");
    const report = parseH2loadReport(redirected, 100);
    expect(report.succeeded).toBe(18843);
    expect(report.failed).toBe(5);
  });

  it("refuses output without a summary rather than report zero calls", () => {
    expect(() => parseH2loadReport("h2load: unknown option -- z\n", 100)).toThrow(/no summary/);
  });

  it("leaves the CPU unknown when the stat line is missing", () => {
    const cut = SUCCESS.slice(0, SUCCESS.indexOf("12783 (sh)"));
    expect(parseH2loadReport(cut, 100).childCpuMicros).toBeUndefined();
  });

  it("spreads the calls in flight over the connections, evenly or not at all", () => {
    expect(h2loadSpread(64, 4)).toEqual({ clients: 4, streams: 16 });
    expect(h2loadSpread(1, 4)).toEqual({ clients: 1, streams: 1 });
    expect(() => h2loadSpread(10, 4)).toThrow(/do not divide/);
  });
});
