import { describe, expect, it } from "vitest";
import { parseCompareArgs, summarize } from "../../bench/compare-builds.js";
import { UsageError } from "../../bench/options.js";

describe("the compare-builds bench", () => {
  it("reads its flags, with Add on Redis in 12 bursts of 3 s by default", () => {
    expect(parseCompareArgs(["--base-ref", "HEAD~1"])).toEqual({
      baseRef: "HEAD~1",
      store: "redis",
      call: "add",
      bursts: 12,
      burstMs: 3000,
    });
    expect(
      parseCompareArgs([
        "--base-ref",
        "v1",
        "--store",
        "memory",
        "--call",
        "get",
        "--bursts",
        "4",
        "--burst-seconds",
        "2",
      ]),
    ).toEqual({ baseRef: "v1", store: "memory", call: "get", bursts: 4, burstMs: 2000 });
  });

  it("refuses a missing base and an unknown flag or value, naming the flag", () => {
    const refusal = (argv: string[]): string => {
      try {
        parseCompareArgs(argv);
      } catch (err) {
        expect(err).toBeInstanceOf(UsageError);
        return (err as Error).message;
      }
      throw new Error("accepted");
    };
    expect(refusal([])).toMatch(/--base-ref is required/);
    expect(refusal(["--base-ref", "x", "--store", "postgres"])).toMatch(/--store must be/);
    expect(refusal(["--base-ref", "x", "--call", "fork"])).toMatch(/--call must be/);
    expect(refusal(["--base-ref", "x", "--bursts", "0"])).toMatch(/--bursts must be/);
    expect(refusal(["--base-ref", "x", "--burst-seconds", "1.5"])).toMatch(/--burst-seconds/);
    expect(refusal(["--base-ref", "x", "--rounds", "3"])).toMatch(/unknown flag --rounds/);
    expect(refusal(["--base-ref"])).toMatch(/--base-ref needs a value/);
  });

  it("says when no call succeeded, and when failed calls make CPU per call incomparable", () => {
    const none = { cpuMicros: 1000, calls: 0, failed: 5, perBurst: [Number.NaN] };
    const some = { cpuMicros: 1000, calls: 10, failed: 0, perBurst: [100] };
    expect(summarize({ base: some, head: none, headCheaper: 0 })).toMatch(/nothing to compare/);
    expect(summarize({ base: some, head: { ...some, failed: 1 }, headCheaper: 0 })).toMatch(
      /calls failed: CPU per call is not comparable/,
    );
    expect(summarize({ base: some, head: some, headCheaper: 0 })).not.toMatch(/not comparable/);
  });

  it("gives each build's CPU per call over all its bursts, their ratio and the paired count", () => {
    const text = summarize({
      base: { cpuMicros: 2_000_000, calls: 10_000, failed: 0, perBurst: [210, 190] },
      head: { cpuMicros: 1_800_000, calls: 10_000, failed: 3, perBurst: [180, 195] },
      headCheaper: 1,
    });
    expect(text).toContain("base: 10000 calls, 200.0 µs server CPU per call, 0 failed");
    expect(text).toContain("head: 10000 calls, 180.0 µs server CPU per call, 3 failed");
    expect(text).toContain("head/base: 0.900; head cheaper in 1 of 2 paired bursts");
    expect(text).toContain("210/180 190/195");
    expect(text).toContain("calls head/base: 1.000");
    expect(text).not.toContain("redis-server");
  });

  it("gives redis-server's CPU per call, and the calls each build answered in the same bursts", () => {
    const text = summarize({
      base: {
        cpuMicros: 900_000,
        storeCpuMicros: 400_000,
        calls: 10_000,
        failed: 0,
        perBurst: [90],
      },
      head: {
        cpuMicros: 990_000,
        storeCpuMicros: 330_000,
        calls: 11_000,
        failed: 0,
        perBurst: [90],
      },
      headCheaper: 0,
    });
    expect(text).toContain(
      "base: 10000 calls, 90.0 µs server CPU per call, 40.0 µs redis-server CPU per call, 0 failed",
    );
    expect(text).toContain(
      "head: 11000 calls, 90.0 µs server CPU per call, 30.0 µs redis-server CPU per call, 0 failed",
    );
    expect(text).toContain("calls head/base: 1.100");
  });
});
