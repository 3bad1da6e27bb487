import { describe, expect, it } from "vitest";
import { h2loadSpread, parseH2loadReport } from "../../bench/h2load.js";

// The end of what h2load 1.52 printed for a 1.5 s run, then the stat line of
// the `sh` that waited for it (pid, command, state, ... cutime 11, cstime 10).
const REPORT = `
finished in 1.50s, 12565.33 req/s, 1.27MB/s
requests: 18848 total, 18912 started, 18848 done, 18840 succeeded, 3 failed, 2 errored, 1 timeout
status codes: 18880 2xx, 0 3xx, 4 4xx, 1 5xx
traffic: 1.91MB (2002511) total, 92.72KB (94944) headers (space savings 96.38%), 1.30MB (1359360) data
                     min         max         mean         sd        +/- sd
time for request:      861us     44.57ms      4.98ms      4.09ms    96.08%

12783 (sh) S 12778 12778 5481 0 -1 4194304 89 853 0 4 0 0 11 10 20 0 1 0 4048403 2654208 375
`;

describe("the h2load bench driver", () => {
  it("reads the successes, the failures of every kind, the time and the CPU of h2load", () => {
    expect(parseH2loadReport(REPORT, 100)).toEqual({
      succeeded: 18840,
      // failed + errored + timeout, and responses that were not 2xx
      failed: 3 + 2 + 1 + 4 + 1,
      elapsedMs: 1500,
      childCpuMicros: 210_000,
    });
  });

  it("reads a run timed in milliseconds", () => {
    const short = REPORT.replace("finished in 1.50s", "finished in 820.50ms");
    expect(parseH2loadReport(short, 100).elapsedMs).toBe(820.5);
  });

  it("refuses output without a summary rather than report zero calls", () => {
    expect(() => parseH2loadReport("connect: Connection refused\n")).toThrow(/no summary/);
  });

  it("leaves the CPU unknown when the stat line is missing", () => {
    const cut = REPORT.slice(0, REPORT.indexOf("12783 (sh)"));
    expect(parseH2loadReport(cut).childCpuMicros).toBeUndefined();
  });

  it("spreads the calls in flight over the connections, evenly or not at all", () => {
    expect(h2loadSpread(64, 4)).toEqual({ clients: 4, streams: 16 });
    expect(h2loadSpread(1, 4)).toEqual({ clients: 1, streams: 1 });
    expect(() => h2loadSpread(10, 4)).toThrow(/do not divide/);
  });
});
