import type { ThreadSchedMicros } from "./cpu-time.js";
import { type DriverKind, type LoadResult, quantile } from "./load.js";
import type { StoreKind } from "./stores.js";

/** Aggregation and printing of the benchmark's measurements. */

/** A server under test: the real server on one store, or the bare grpc-js baseline. */
export type Target = StoreKind | "bare";

/** One timed run of one scenario against one server. */
export interface Measurement {
  readonly scenario: string;
  /** Calls in flight. */
  readonly concurrency: number;
  readonly driver: DriverKind;
  readonly target: Target;
  readonly round: number;
  readonly load: LoadResult;
  /** CPU time the server process used during the run; undefined without /proc. */
  readonly serverCpuMicros: number | undefined;
  /** CPU time of this process (the load driver) during the run. */
  readonly driverCpuMicros: number;
  /** CPU time the rest of the machine used during the run; undefined without /proc. */
  readonly otherCpuMicros: number | undefined;
  /** CPU time redis-server or PostgreSQL used during the run: those stores only, and only with /proc. */
  readonly storeCpuMicros: number | undefined;
  /**
   * The server's main thread (its event loop) over the run: time on a CPU and
   * time runnable but waiting for one (schedstat); undefined without /proc.
   */
  readonly serverMainThread?: ThreadSchedMicros | undefined;
  /**
   * Commands Redis ran during the run, by name, including those run inside
   * Lua scripts (INFO commandstats); redis store only.
   */
  readonly redisCommands: Readonly<Record<string, number>> | undefined;
}

/** The commands the real server sent to Redis over a counted batch of calls (MONITOR). */
export interface RedisSentCount {
  readonly scenario: string;
  readonly driver: DriverKind;
  readonly calls: number;
  readonly errors: number;
  /** By command name; commands run inside Lua scripts are not among them. */
  readonly commands: Readonly<Record<string, number>>;
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
  /** Throughput real/bare the memory store should reach; the durable stores have no goal. */
  readonly goalRatio: number;
  /** Redis commands the server should send per Add. */
  readonly redisTargetPerAdd: number;
  /** In table order. */
  readonly targets: readonly Target[];
  readonly measurements: readonly Measurement[];
  readonly redisSent: readonly RedisSentCount[];
  readonly bytes: Readonly<Record<string, number>>;
}

// A server at this share of one core or more is taken as out of CPU (the
// real server measured 92-102 % when it was clearly the bottleneck).
const SATURATED_PERCENT = 90;

// Other work on the machine above this share of a core makes throughput
// figures of a 2-core machine unreliable.
const NOISY_OTHER_PERCENT = 20;

/** Postgres Add throughput over the memory store's the issue asks for (group commit, 64 in flight). */
export const POSTGRES_ADD_GOAL = 0.5;
const POSTGRES_GOAL_CONCURRENCY = 64;

/** Whether two rows measured the same call, driver and calls in flight. */
function sameTurn(
  a: { scenario: string; concurrency: number; driver: DriverKind },
  b: { scenario: string; concurrency: number; driver: DriverKind },
): boolean {
  return a.scenario === b.scenario && a.concurrency === b.concurrency && a.driver === b.driver;
}

/** Whether the store runs in processes of its own whose CPU the bench reads. */
function hasStoreProcess(target: Target): boolean {
  return target === "redis" || target === "postgres";
}

/** The rounds of one scenario, driver and server, merged. */
interface Row {
  readonly scenario: string;
  readonly concurrency: number;
  readonly driver: DriverKind;
  readonly target: Target;
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
  /** redis-server CPU per call (redis store only). */
  readonly storeCpuUsPerCall: number | undefined;
  /** Of the wall time, the server's main thread on a CPU, waiting for one, and the rest asleep (idle). */
  readonly mainOnCpuPercent: number | undefined;
  readonly mainWaitingPercent: number | undefined;
}

interface Ratio {
  readonly scenario: string;
  readonly concurrency: number;
  readonly driver: DriverKind;
  readonly store: StoreKind;
  /** real calls/s over bare calls/s. */
  readonly throughput: number;
  /** real server CPU per call over bare server CPU per call. */
  readonly serverCpuPerCall: number | undefined;
  /** As serverCpuPerCall, with redis-server's CPU added to the real server's (redis store only). */
  readonly serverAndStoreCpuPerCall: number | undefined;
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
    const key = `${m.scenario}/${m.concurrency}/${m.driver}`;
    groups.set(key, [...(groups.get(key) ?? []), m]);
  }
  for (const group of groups.values()) {
    for (const target of result.targets) {
      const ms = group.filter((m) => m.target === target);
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
      const mainOnCpu = sumDefined(ms.map((m) => m.serverMainThread?.onCpu));
      const mainWaiting = sumDefined(ms.map((m) => m.serverMainThread?.waiting));
      const driverCpu = sum(ms.map((m) => m.driverCpuMicros));
      const storeCpu = hasStoreProcess(target)
        ? sumDefined(ms.map((m) => m.storeCpuMicros))
        : undefined;
      // CPU microseconds over wall milliseconds * 10 is percent of one core.
      const percent = (micros: number): number => micros / (elapsedMs * 10);
      out.push({
        scenario: first.scenario,
        concurrency: first.concurrency,
        driver: first.driver,
        target,
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
        storeCpuUsPerCall: storeCpu === undefined ? undefined : storeCpu / calls,
        // Time, not CPU: of the wall time, as a share of one thread's.
        mainOnCpuPercent: mainOnCpu === undefined ? undefined : percent(mainOnCpu),
        mainWaitingPercent: mainWaiting === undefined ? undefined : percent(mainWaiting),
      });
    }
  }
  return out;
}

function ratios(all: readonly Row[]): Ratio[] {
  const out: Ratio[] = [];
  for (const real of all) {
    if (real.target === "bare") continue;
    const bare = all.find((r) => r.target === "bare" && sameTurn(r, real));
    if (bare === undefined) continue;
    const bareCpu = bare.serverCpuUsPerCall;
    out.push({
      scenario: real.scenario,
      concurrency: real.concurrency,
      driver: real.driver,
      store: real.target,
      throughput: real.callsPerSec / bare.callsPerSec,
      bareServerCpuPercent: bare.serverCpuPercent,
      serverCpuPerCall:
        real.serverCpuUsPerCall === undefined || bareCpu === undefined
          ? undefined
          : real.serverCpuUsPerCall / bareCpu,
      serverAndStoreCpuPerCall:
        real.serverCpuUsPerCall === undefined ||
        real.storeCpuUsPerCall === undefined ||
        bareCpu === undefined
          ? undefined
          : (real.serverCpuUsPerCall + real.storeCpuUsPerCall) / bareCpu,
    });
  }
  return out;
}

/** What Redis did per call of one scenario, on the redis store. */
interface RedisPerCall {
  readonly scenario: string;
  /** Commands the server sent per call (MONITOR over a counted batch): its round trips. */
  readonly sentPerCall: number | undefined;
  readonly sentByCommand: ReadonlyMap<string, number>;
  readonly countedCalls: number;
  /** Commands Redis ran per call, those inside Lua scripts included (commandstats over the timed runs). */
  readonly runPerCall: number | undefined;
  readonly runByCommand: ReadonlyMap<string, number>;
  readonly timedCalls: number;
}

function redisPerCall(result: BenchResult): RedisPerCall[] {
  const scenarios = [
    ...new Set([
      ...result.redisSent.map((c) => c.scenario),
      ...result.measurements.filter((m) => m.target === "redis").map((m) => m.scenario),
    ]),
  ];
  return scenarios.map((scenario) => {
    const sent = result.redisSent.filter((c) => c.scenario === scenario);
    const countedCalls = sum(sent.map((c) => c.calls));
    const timed = result.measurements.filter(
      (m) => m.target === "redis" && m.scenario === scenario,
    );
    const timedCalls = sum(timed.map((m) => m.load.calls));
    const sentTotals = totals(sent.map((c) => c.commands));
    const runTotals = totals(timed.map((m) => m.redisCommands ?? {}));
    return {
      scenario,
      sentPerCall: countedCalls === 0 ? undefined : sum([...sentTotals.values()]) / countedCalls,
      sentByCommand: perCall(sentTotals, countedCalls),
      countedCalls,
      runPerCall: timedCalls === 0 ? undefined : sum([...runTotals.values()]) / timedCalls,
      runByCommand: perCall(runTotals, timedCalls),
      timedCalls,
    };
  });
}

function totals(counts: readonly Readonly<Record<string, number>>[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const c of counts) {
    for (const [name, n] of Object.entries(c)) out.set(name, (out.get(name) ?? 0) + n);
  }
  return out;
}

/** Counts over `calls`, most frequent first. */
function perCall(counts: ReadonlyMap<string, number>, calls: number): Map<string, number> {
  if (calls === 0) return new Map();
  return new Map(
    [...counts.entries()].sort((a, b) => b[1] - a[1]).map(([name, n]) => [name, n / calls]),
  );
}

/** Per-call counts; rare commands (a trim every few hundred Adds) keep two significant digits. */
const byCommand = (counts: ReadonlyMap<string, number>): string =>
  [...counts.entries()]
    .map(([name, n]) => `${name} ${n >= 0.1 || n === 0 ? n.toFixed(2) : n.toPrecision(2)}`)
    .join(", ") || "none";

/**
 * Commands the server sends on its own timers, whatever the load, which a
 * counted batch of calls catches now and then: the store's incarnation check
 * (SET … NX GET, every second: src/store/redis/incarnation.ts) and the TTL
 * sweep's scan of the namespaces that have a ttl (SSCAN, clears.ts). No Add
 * sends either, so the target's count leaves them out (they stay in the
 * per-command figures).
 */
export const PERIODIC_COMMANDS: ReadonlySet<string> = new Set(["set", "sscan"]);

/** Commands the server sent per call, those of its own timers left out. */
export function sentPerCallWithoutTimers(r: {
  readonly sentPerCall: number | undefined;
  readonly sentByCommand: ReadonlyMap<string, number>;
}): number | undefined {
  if (r.sentPerCall === undefined) return undefined;
  let periodic = 0;
  for (const [name, n] of r.sentByCommand) if (PERIODIC_COMMANDS.has(name)) periodic += n;
  return r.sentPerCall - periodic;
}

/** Whether the server sends at most the target number of commands per Add. */
function meetsRedisTarget(r: RedisPerCall, target: number): boolean | undefined {
  const byCalls = sentPerCallWithoutTimers(r);
  // Quotients subtracted: 1.002 - 0.001 - 0.001 is a hair over 1 in floating point.
  return byCalls === undefined ? undefined : byCalls <= target + 1e-9;
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
    "store",
    "in flight",
    "calls/s",
    "p50 ms",
    "p99 ms",
    "srv CPU us/call",
    "srv CPU %",
    "store CPU us/call",
    "drv CPU us/call",
    "drv CPU %",
    "other CPU %",
    "main on CPU %",
    "main waits %",
    "calls",
    "errors",
    "calls/s per round",
  ];
  const body = all.map((r) => [
    r.scenario,
    r.driver,
    r.target === "bare" ? "bare" : "real",
    r.target === "bare" ? "-" : r.target,
    String(r.concurrency),
    fixed(r.callsPerSec, 0),
    fixed(r.p50Ms, 2),
    fixed(r.p99Ms, 2),
    fixed(r.serverCpuUsPerCall, 1),
    fixed(r.serverCpuPercent, 0),
    hasStoreProcess(r.target) ? fixed(r.storeCpuUsPerCall, 1) : "-",
    fixed(r.driverCpuUsPerCall, 1),
    fixed(r.driverCpuPercent, 0),
    fixed(r.otherCpuPercent, 0),
    fixed(r.mainOnCpuPercent, 0),
    fixed(r.mainWaitingPercent, 0),
    String(r.calls),
    String(r.errors),
    r.roundCallsPerSec.join(" "),
  ]);
  const widths = header.map((h, i) =>
    Math.max(h.length, ...body.map((row) => row[i]?.length ?? 0)),
  );
  // Names left-aligned, figures right-aligned, the free-form last column left.
  const leftAligned = (i: number): boolean => i < 4 || i === header.length - 1;
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
    "CPU % is of one core over the measurement: srv (the server measured), drv (the load driver:",
    "the bench's own process, or the h2load child for h2load), other (the rest of the machine:",
    "other processes, noise). A side near 100 % is the bottleneck;",
    "CPU us/call is the steadier figure when the machine is shared. store CPU is the bench's",
    "redis-server (redis store) or PostgreSQL's processes (postgres store: postmaster and",
    "backends), serving the real server (not counted in other). main on CPU % and main waits %",
    "are of the wall time, for the server's main thread (its event loop; schedstat): on a CPU,",
    "and runnable but waiting for one; the rest of the time it slept, with nothing to do.",
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
  let group = "";
  for (const r of ratios(all)) {
    if (group !== `${r.scenario}/${r.concurrency}/${r.driver}`) {
      group = `${r.scenario}/${r.concurrency}/${r.driver}`;
      const bare = r.bareServerCpuPercent;
      const bound =
        bare !== undefined && bare < SATURATED_PERCENT
          ? ` [bare server at ${bare.toFixed(0)}% CPU, not saturated: the driver or the machine held it back, so these ratios are upper bounds]`
          : "";
      out.push(`${r.scenario}, ${r.driver} driver, ${r.concurrency} in flight, real/bare${bound}:`);
    }
    const goal =
      r.store === "memory"
        ? `goal >= ${result.goalRatio}: ${r.throughput >= result.goalRatio ? "meets" : "BELOW"}`
        : "no goal: durable store";
    const cpu =
      r.serverCpuPerCall === undefined
        ? ""
        : `; server CPU per call ${r.serverCpuPerCall.toFixed(2)}x`;
    const withStore =
      r.serverAndStoreCpuPerCall === undefined
        ? ""
        : ` (${r.serverAndStoreCpuPerCall.toFixed(2)}x with ${r.store === "redis" ? "redis-server's" : "PostgreSQL's"})`;
    out.push(
      `  ${`${r.store}:`.padEnd(10)}throughput ${r.throughput.toFixed(3)} (${goal})${cpu}${withStore}`,
    );
  }
  out.push(...storeOverMemory(all));
  const redis = redisPerCall(result);
  if (redis.length > 0) {
    out.push(
      "",
      `Redis commands per call, redis store (target: at most ${result.redisTargetPerAdd} sent per Add):`,
    );
    for (const r of redis) {
      const periodic = [...r.sentByCommand.keys()].filter((name) => PERIODIC_COMMANDS.has(name));
      const apart =
        periodic.length === 0
          ? ""
          : ` (${fixed(sentPerCallWithoutTimers(r), 2)} without ${periodic.join(" and ")}, sent on the server's own timers)`;
      const verdict =
        r.scenario === "Add"
          ? `: ${meetsRedisTarget(r, result.redisTargetPerAdd) ? "meets the target" : "ABOVE the target"}${apart}`
          : "";
      out.push(
        `  ${r.scenario}: sent by the server ${fixed(r.sentPerCall, 2)} per call (${byCommand(r.sentByCommand)}; ` +
          `MONITOR over ${r.countedCalls} calls)${verdict}`,
        `  ${" ".repeat(r.scenario.length)}  run by Redis ${fixed(r.runPerCall, 2)} per call, counting the commands ` +
          `inside Lua scripts (${byCommand(r.runByCommand)}; INFO commandstats over ${r.timedCalls} timed calls)`,
      );
    }
  }
  return out.join("\n");
}

/**
 * Each durable store's throughput over the memory store's, per scenario and
 * driver, measured side by side; Postgres Add against POSTGRES_ADD_GOAL.
 */
function storeOverMemory(all: readonly Row[]): string[] {
  const out: string[] = [];
  for (const memory of all.filter((r) => r.target === "memory")) {
    const others = all.filter(
      (r) => sameTurn(r, memory) && r.target !== "memory" && r.target !== "bare",
    );
    if (others.length === 0) continue;
    const parts = others.map((r) => {
      const ratio = r.callsPerSec / memory.callsPerSec;
      const goal =
        r.target === "postgres" && r.scenario === "Add"
          ? ` (goal >= ${POSTGRES_ADD_GOAL} at ${POSTGRES_GOAL_CONCURRENCY} in flight${r.concurrency === POSTGRES_GOAL_CONCURRENCY ? `: ${ratio >= POSTGRES_ADD_GOAL ? "meets" : "BELOW"}` : ""})`
          : "";
      return `${r.target} ${ratio.toFixed(3)}${goal}`;
    });
    out.push(
      "",
      `${memory.scenario}, ${memory.driver} driver, ${memory.concurrency} in flight, throughput over the memory store's: ${parts.join("; ")}`,
    );
  }
  return out;
}

/** One JSON line with every figure, for the README to quote. */
export function formatJson(result: BenchResult): string {
  const all = rows(result);
  const round = (n: number | undefined, digits: number): number | null =>
    n === undefined || !Number.isFinite(n) ? null : Number(n.toFixed(digits));
  return JSON.stringify({
    benchmark: "windlass-memory real (per store) vs bare grpc-js",
    command: result.command,
    design: result.design,
    machine: result.machine,
    settings: result.settings,
    bytes: result.bytes,
    results: all.map((r) => ({
      scenario: r.scenario,
      concurrency: r.concurrency,
      driver: r.driver,
      server: r.target === "bare" ? "bare" : "real",
      store: r.target === "bare" ? null : r.target,
      callsPerSec: round(r.callsPerSec, 0),
      p50Ms: round(r.p50Ms, 3),
      p99Ms: round(r.p99Ms, 3),
      serverCpuUsPerCall: round(r.serverCpuUsPerCall, 1),
      serverCpuPercent: round(r.serverCpuPercent, 0),
      driverCpuUsPerCall: round(r.driverCpuUsPerCall, 1),
      driverCpuPercent: round(r.driverCpuPercent, 0),
      otherCpuPercent: round(r.otherCpuPercent, 0),
      mainOnCpuPercent: round(r.mainOnCpuPercent, 0),
      mainWaitingPercent: round(r.mainWaitingPercent, 0),
      storeCpuUsPerCall: round(r.storeCpuUsPerCall, 1),
      calls: r.calls,
      errors: r.errors,
      roundCallsPerSec: r.roundCallsPerSec,
    })),
    ratios: ratios(all).map((r) => ({
      scenario: r.scenario,
      concurrency: r.concurrency,
      driver: r.driver,
      store: r.store,
      throughputRealOverBare: round(r.throughput, 3),
      serverCpuPerCallRealOverBare: round(r.serverCpuPerCall, 2),
      serverAndStoreCpuPerCallRealOverBare: round(r.serverAndStoreCpuPerCall, 2),
      goal: r.store === "memory" ? result.goalRatio : null,
      meetsGoal: r.store === "memory" ? r.throughput >= result.goalRatio : null,
      bareServerCpuPercent: round(r.bareServerCpuPercent, 0),
      bareSaturated:
        r.bareServerCpuPercent === undefined ? null : r.bareServerCpuPercent >= SATURATED_PERCENT,
    })),
    redis: redisPerCall(result).map((r) => ({
      scenario: r.scenario,
      sentPerCall: round(r.sentPerCall, 3),
      sentPerCallByCommand: roundedRecord(r.sentByCommand),
      countedCalls: r.countedCalls,
      runPerCall: round(r.runPerCall, 3),
      runPerCallByCommand: roundedRecord(r.runByCommand),
      timedCalls: r.timedCalls,
      target: r.scenario === "Add" ? result.redisTargetPerAdd : null,
      meetsTarget:
        r.scenario === "Add" ? (meetsRedisTarget(r, result.redisTargetPerAdd) ?? null) : null,
    })),
  });
}

function roundedRecord(counts: ReadonlyMap<string, number>): Record<string, number> {
  return Object.fromEntries([...counts.entries()].map(([name, n]) => [name, Number(n.toFixed(3))]));
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
