import { type DriverKind, type LoadResult, quantile } from "./load.js";

/** Aggregation and printing of the benchmark's measurements. */

export type ServerName = "real" | "bare";

/** One timed run of one scenario against one server. */
export interface Measurement {
  readonly scenario: string;
  readonly driver: DriverKind;
  readonly server: ServerName;
  readonly round: number;
  readonly load: LoadResult;
  /** CPU time the server process used during the run; undefined without /proc. */
  readonly serverCpuMicros: number | undefined;
  /** CPU time of this process (the load driver) during the run. */
  readonly driverCpuMicros: number;
  /** CPU time the rest of the machine used during the run; undefined without /proc. */
  readonly otherCpuMicros: number | undefined;
}

export interface BenchResult {
  readonly command: string;
  readonly design: string;
  readonly machine: {
    readonly node: string;
    readonly cpuCount: number;
    readonly cpuModel: string;
    readonly platform: string;
  };
  readonly settings: Readonly<Record<string, number | string>>;
  readonly goalRatio: number;
  readonly measurements: readonly Measurement[];
  readonly bytes: Readonly<Record<string, number>>;
}

// A server at this share of one core or more is taken as out of CPU (the
// real server measured 92-102 % when it was clearly the bottleneck).
const SATURATED_PERCENT = 90;

// Other work on the machine above this share of a core makes throughput
// figures of a 2-core machine unreliable.
const NOISY_OTHER_PERCENT = 20;

/** The rounds of one scenario and server, merged. */
interface Row {
  readonly scenario: string;
  readonly driver: DriverKind;
  readonly server: ServerName;
  readonly calls: number;
  readonly errors: number;
  readonly callsPerSec: number;
  readonly roundCallsPerSec: number[];
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly serverCpuUsPerCall: number | undefined;
  /** Server CPU time over wall time: 100 is one core kept busy. */
  readonly serverCpuPercent: number | undefined;
  readonly driverCpuUsPerCall: number;
  readonly driverCpuPercent: number;
  /** CPU the rest of the machine used meanwhile (other processes), 100 = one core. */
  readonly otherCpuPercent: number | undefined;
}

interface Ratio {
  readonly scenario: string;
  readonly driver: DriverKind;
  /** real calls/s over bare calls/s. */
  readonly throughput: number;
  /** real server CPU per call over bare server CPU per call. */
  readonly serverCpuPerCall: number | undefined;
  /**
   * Bare server CPU % over the measurements. Well under 100, the baseline was
   * held back by the driver or the machine rather than by grpc-js, and the
   * throughput ratio is an upper bound on the servers' capacity ratio.
   */
  readonly bareServerCpuPercent: number | undefined;
}

function rows(result: BenchResult): Row[] {
  const out: Row[] = [];
  const groups = new Map<string, Measurement[]>();
  for (const m of result.measurements) {
    const key = `${m.scenario}/${m.driver}`;
    groups.set(key, [...(groups.get(key) ?? []), m]);
  }
  for (const group of groups.values()) {
    for (const server of ["real", "bare"] as const) {
      const ms = group.filter((m) => m.server === server);
      const first = ms[0];
      if (first === undefined) continue;
      const calls = sum(ms.map((m) => m.load.calls));
      const elapsedMs = sum(ms.map((m) => m.load.elapsedMs));
      const latencies = new Float64Array(calls);
      let at = 0;
      for (const m of ms) {
        latencies.set(m.load.latenciesMs, at);
        at += m.load.latenciesMs.length;
      }
      latencies.sort();
      const serverCpu = sumDefined(ms.map((m) => m.serverCpuMicros));
      const otherCpu = sumDefined(ms.map((m) => m.otherCpuMicros));
      const driverCpu = sum(ms.map((m) => m.driverCpuMicros));
      // CPU microseconds over wall milliseconds * 10 is percent of one core.
      const percent = (micros: number): number => micros / (elapsedMs * 10);
      out.push({
        scenario: first.scenario,
        driver: first.driver,
        server,
        calls,
        errors: sum(ms.map((m) => m.load.errors)),
        callsPerSec: (calls * 1000) / elapsedMs,
        roundCallsPerSec: ms.map((m) => Math.round((m.load.calls * 1000) / m.load.elapsedMs)),
        p50Ms: quantile(latencies, 0.5),
        p99Ms: quantile(latencies, 0.99),
        serverCpuUsPerCall: serverCpu === undefined ? undefined : serverCpu / calls,
        serverCpuPercent: serverCpu === undefined ? undefined : percent(serverCpu),
        driverCpuUsPerCall: driverCpu / calls,
        driverCpuPercent: percent(driverCpu),
        otherCpuPercent: otherCpu === undefined ? undefined : percent(otherCpu),
      });
    }
  }
  return out;
}

function ratios(all: readonly Row[]): Ratio[] {
  const out: Ratio[] = [];
  for (const real of all.filter((r) => r.server === "real")) {
    const bare = all.find(
      (r) => r.server === "bare" && r.scenario === real.scenario && r.driver === real.driver,
    );
    if (bare === undefined) continue;
    out.push({
      scenario: real.scenario,
      driver: real.driver,
      throughput: real.callsPerSec / bare.callsPerSec,
      bareServerCpuPercent: bare.serverCpuPercent,
      serverCpuPerCall:
        real.serverCpuUsPerCall === undefined || bare.serverCpuUsPerCall === undefined
          ? undefined
          : real.serverCpuUsPerCall / bare.serverCpuUsPerCall,
    });
  }
  return out;
}

const fixed = (n: number | undefined, digits: number): string =>
  n === undefined || !Number.isFinite(n) ? "n/a" : n.toFixed(digits);

/** The human-readable table, with the ratio per scenario and driver against the goal. */
export function formatTable(result: BenchResult): string {
  const all = rows(result);
  const header = [
    "scenario",
    "driver",
    "server",
    "calls/s",
    "p50 ms",
    "p99 ms",
    "srv CPU us/call",
    "srv CPU %",
    "drv CPU us/call",
    "drv CPU %",
    "other CPU %",
    "calls",
    "errors",
    "calls/s per round",
  ];
  const body = all.map((r) => [
    r.scenario,
    r.driver,
    r.server,
    fixed(r.callsPerSec, 0),
    fixed(r.p50Ms, 2),
    fixed(r.p99Ms, 2),
    fixed(r.serverCpuUsPerCall, 1),
    fixed(r.serverCpuPercent, 0),
    fixed(r.driverCpuUsPerCall, 1),
    fixed(r.driverCpuPercent, 0),
    fixed(r.otherCpuPercent, 0),
    String(r.calls),
    String(r.errors),
    r.roundCallsPerSec.join(" "),
  ]);
  const widths = header.map((h, i) =>
    Math.max(h.length, ...body.map((row) => row[i]?.length ?? 0)),
  );
  // Names left-aligned, figures right-aligned, the free-form last column left.
  const leftAligned = (i: number): boolean => i < 3 || i === header.length - 1;
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) => (leftAligned(i) ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0)))
      .join("  ")
      .trimEnd();
  const out = [
    line(header),
    line(widths.map((w) => "-".repeat(w))),
    ...body.map(line),
    "",
    "CPU % is of one core over the measurement: srv (the server measured), drv (this load driver),",
    "other (the rest of the machine: other processes, noise). A side near 100 % is the bottleneck;",
    "CPU us/call is the steadier figure when the machine is shared.",
    "",
  ];
  const busiest = Math.max(0, ...all.map((r) => r.otherCpuPercent ?? 0));
  if (busiest > NOISY_OTHER_PERCENT) {
    out.push(
      `WARNING: other processes used up to ${busiest.toFixed(0)}% of a core during a measurement; ` +
        "calls/s and latencies are unreliable, rerun on an idle machine.",
      "",
    );
  }
  for (const r of ratios(all)) {
    const verdict = r.throughput >= result.goalRatio ? "meets" : "BELOW";
    const cpu =
      r.serverCpuPerCall === undefined
        ? ""
        : `; server CPU per call real/bare = ${r.serverCpuPerCall.toFixed(2)}x`;
    const bare = r.bareServerCpuPercent;
    const bound =
      bare !== undefined && bare < SATURATED_PERCENT
        ? ` [bare server at ${bare.toFixed(0)}% CPU, not saturated: the driver or the machine held it back, so this ratio is an upper bound]`
        : "";
    out.push(
      `${r.scenario} (${r.driver} driver): throughput real/bare = ${r.throughput.toFixed(3)} ` +
        `(goal >= ${result.goalRatio}: ${verdict})${cpu}${bound}`,
    );
  }
  return out.join("\n");
}

/** One JSON line with every figure, for the README to quote. */
export function formatJson(result: BenchResult): string {
  const all = rows(result);
  const round = (n: number | undefined, digits: number): number | null =>
    n === undefined || !Number.isFinite(n) ? null : Number(n.toFixed(digits));
  return JSON.stringify({
    benchmark: "windlass-memory real vs bare grpc-js",
    command: result.command,
    design: result.design,
    machine: result.machine,
    settings: result.settings,
    bytes: result.bytes,
    results: all.map((r) => ({
      scenario: r.scenario,
      driver: r.driver,
      server: r.server,
      callsPerSec: round(r.callsPerSec, 0),
      p50Ms: round(r.p50Ms, 3),
      p99Ms: round(r.p99Ms, 3),
      serverCpuUsPerCall: round(r.serverCpuUsPerCall, 1),
      serverCpuPercent: round(r.serverCpuPercent, 0),
      driverCpuUsPerCall: round(r.driverCpuUsPerCall, 1),
      driverCpuPercent: round(r.driverCpuPercent, 0),
      otherCpuPercent: round(r.otherCpuPercent, 0),
      calls: r.calls,
      errors: r.errors,
      roundCallsPerSec: r.roundCallsPerSec,
    })),
    ratios: ratios(all).map((r) => ({
      scenario: r.scenario,
      driver: r.driver,
      throughputRealOverBare: round(r.throughput, 3),
      serverCpuPerCallRealOverBare: round(r.serverCpuPerCall, 2),
      goal: result.goalRatio,
      meetsGoal: r.throughput >= result.goalRatio,
      bareServerCpuPercent: round(r.bareServerCpuPercent, 0),
      bareSaturated:
        r.bareServerCpuPercent === undefined ? null : r.bareServerCpuPercent >= SATURATED_PERCENT,
    })),
  });
}

/** The sum, or undefined when any value is unknown. */
function sumDefined(values: readonly (number | undefined)[]): number | undefined {
  let total = 0;
  for (const v of values) {
    if (v === undefined) return undefined;
    total += v;
  }
  return total;
}

function sum(values: readonly number[]): number {
  let total = 0;
  for (const v of values) total += v;
  return total;
}
