import { startRedisCluster } from "../test/support/redis-cluster.js";
// The tests' own launchers (tsc compiles them into dist as well).
import { startRedisServer } from "../test/support/redis-server.js";
import { cpuCap } from "./cpu-cap.js";
import { machineBusyMicros, processCpuMicros } from "./cpu-time.js";
import { type Connections, openConnections, quantile, runLoad } from "./load.js";
import type { ScenarioOutcome } from "./results.js";
import type { ScenarioContext } from "./run.js";
import { ADD_PATH, addRequests } from "./scenarios.js";
import { type ServerProcess, serveArgs, startServerProcess } from "./server-process.js";

/**
 * Redis Cluster: does Add throughput grow with the primaries? The same Add
 * load (one ~100-byte message to one of THREADS threads per call,
 * `--cluster-concurrency` calls in flight spread over the service
 * processes' connections) against
 * - one redis-server (`redis://`, no replica), and
 * - a 3-primary cluster with a replica each (`redis-cluster://`, the test
 *   harness's six nodes), the load's one namespace in one slot (so on one
 *   primary), and
 * - another such cluster with the namespace split into 3 shards
 *   (`--redis-namespace-shards 3`: a shard on each primary),
 * each driven by `--cluster-servers` service processes (`windlass-memory
 * serve`) sharing the store. The two take turns, `--cluster-rounds` of
 * `--cluster-seconds` each. Beside the throughput it reads the CPU of the
 * service processes (each, in % of one core) and of the redis-server
 * processes (summed), and how busy the whole machine was, to tell which of
 * them limited the figure. Goal (issue 19): cluster Add >= 2 x one
 * primary's with the service processes not CPU-bound.
 */

const THREADS = 256;
const CONNECTIONS_PER_SERVER = 2;
const CALL_TIMEOUT_MS = 30_000;
const START_TIMEOUT_MS = 20_000;
const WARMUP_MS = 1_000;
const GOAL = 2;

interface Target {
  readonly name: string;
  readonly servers: readonly ServerProcess[];
  readonly connections: Connections;
  /** The redis-server processes behind the store now. */
  redisPids(): number[];
  stop(): Promise<void>;
}

interface Measured {
  calls: number;
  errors: number;
  elapsedMs: number;
  latencies: number[];
  firstError: string | undefined;
  /** CPU each service process used, microseconds, summed over the rounds. */
  serverCpu: number[];
  redisCpu: number;
  /** CPU of this process, the load driver. */
  driverCpu: number;
  machineBusy: number;
}

async function startTarget(
  ctx: ScenarioContext,
  name: string,
  storeFlag: string,
  redisPids: () => number[],
  stopStore: () => Promise<void>,
  storeArgs: readonly string[] = [],
): Promise<Target> {
  const servers: ServerProcess[] = [];
  try {
    for (let i = 0; i < ctx.options.size("cluster-servers"); i++) {
      servers.push(
        await startServerProcess({
          label: `windlass ${i + 1} (${name})`,
          script: `${ctx.root}bin/windlass-memory.js`,
          args: serveArgs(storeFlag, ["--log-level", "warn", ...storeArgs]),
          startTimeoutMs: START_TIMEOUT_MS,
        }),
      );
    }
  } catch (err) {
    for (const s of servers) await s.stop();
    await stopStore();
    throw err;
  }
  const opened = servers.map((s) =>
    openConnections("h2", `127.0.0.1:${s.grpcPort}`, CONNECTIONS_PER_SERVER),
  );
  // Round-robin over the servers' connections: the calls spread evenly.
  const connections: Connections = {
    driver: "h2",
    connections: Array.from({ length: CONNECTIONS_PER_SERVER }, (_, c) =>
      opened.map((o) => o.connections[c]),
    )
      .flat()
      .filter((c) => c !== undefined),
    close: () => {
      for (const o of opened) o.close();
    },
  };
  return {
    name,
    servers,
    connections,
    redisPids,
    async stop() {
      connections.close();
      for (const s of servers) await s.stop();
      await stopStore();
    },
  };
}

/**
 * With --cluster-redis-cpu-percent P > 0, every redis-server of a target
 * is capped at P % of one core (cpu-cap.ts), so the primaries, not the
 * machine, limit the Adds; its cgroups go when the target stops.
 */
function capped(
  ctx: ScenarioContext,
  label: string,
  pids: () => number[],
  stop: () => Promise<void>,
) {
  const percent = ctx.options.size("cluster-redis-cpu-percent");
  if (percent <= 0) return stop;
  const cap = cpuCap(percent, label);
  for (const pid of pids()) cap.add(pid);
  return async () => {
    await stop();
    cap.release();
  };
}

async function startTargets(ctx: ScenarioContext): Promise<Target[]> {
  const single = await startRedisServer();
  const singlePids = () => (single.pid === undefined ? [] : [single.pid]);
  const targets = [
    await startTarget(
      ctx,
      "Redis, 1 primary",
      single.url,
      singlePids,
      capped(ctx, "single", singlePids, () => single.stop()),
    ),
  ];
  try {
    for (const shards of [1, 3]) {
      const cluster = await startRedisCluster();
      const clusterPids = () => cluster.nodes.flatMap((n) => (n.pid === undefined ? [] : [n.pid]));
      targets.push(
        await startTarget(
          ctx,
          shards === 1
            ? "Redis Cluster, 3 primaries + 3 replicas, namespace in 1 slot"
            : "Redis Cluster, 3 primaries + 3 replicas, namespace in 3 shards",
          cluster.url,
          clusterPids,
          capped(ctx, `cluster${shards}`, clusterPids, () => cluster.stop()),
          ["--redis-namespace-shards", String(shards)],
        ),
      );
    }
  } catch (err) {
    for (const t of targets) await t.stop();
    throw err;
  }
  return targets;
}

const sum = (values: readonly number[]): number => values.reduce((a, b) => a + b, 0);
const cpuOf = (pids: readonly number[]): number => sum(pids.map((p) => processCpuMicros(p) ?? 0));

async function measure(ctx: ScenarioContext, target: Target, m: Measured, round: number) {
  const concurrency = ctx.options.size("cluster-concurrency");
  const durationMs = ctx.options.size("cluster-seconds") * 1000;
  const adds = addRequests(THREADS);
  const serverBefore = target.servers.map((s) => s.cpuMicros() ?? 0);
  const redisBefore = cpuOf(target.redisPids());
  const busyBefore = machineBusyMicros() ?? 0;
  const driverBefore = processCpuMicros(process.pid) ?? 0;
  const r = await runLoad(target.connections, ADD_PATH, adds, {
    concurrency,
    durationMs,
    callTimeoutMs: CALL_TIMEOUT_MS,
  });
  target.servers.forEach((s, i) => {
    m.serverCpu[i] = (m.serverCpu[i] ?? 0) + (s.cpuMicros() ?? 0) - (serverBefore[i] ?? 0);
  });
  m.redisCpu += cpuOf(target.redisPids()) - redisBefore;
  m.machineBusy += (machineBusyMicros() ?? 0) - busyBefore;
  m.driverCpu += (processCpuMicros(process.pid) ?? 0) - driverBefore;
  m.calls += r.calls;
  m.errors += r.errors;
  m.elapsedMs += r.elapsedMs;
  m.firstError ??= r.firstError;
  for (const l of r.latenciesMs) m.latencies.push(l);
  process.stdout.write(
    `measured  ${target.name} round ${round + 1}: Add ${((r.calls * 1000) / r.elapsedMs).toFixed(0)}/s ` +
      `(${concurrency} in flight over ${target.servers.length} service processes), ${r.errors} errors\n`,
  );
}

async function run(ctx: ScenarioContext): Promise<ScenarioOutcome> {
  const o = ctx.options;
  const targets = await startTargets(ctx);
  const measured = new Map<Target, Measured>();
  try {
    for (const t of targets) {
      // Warm-up, not timed: connections, JIT, the store's scripts loaded.
      await runLoad(t.connections, ADD_PATH, addRequests(THREADS), {
        concurrency: o.size("cluster-concurrency"),
        durationMs: WARMUP_MS,
        callTimeoutMs: CALL_TIMEOUT_MS,
      });
      measured.set(t, {
        calls: 0,
        errors: 0,
        elapsedMs: 0,
        latencies: [],
        firstError: undefined,
        serverCpu: [],
        redisCpu: 0,
        driverCpu: 0,
        machineBusy: 0,
      });
    }
    // Taking turns, the order flipped each round: a change in the machine's load falls on both.
    for (let round = 0; round < o.size("cluster-rounds"); round++) {
      const order = round % 2 === 0 ? targets : [...targets].reverse();
      for (const t of order) await measure(ctx, t, measured.get(t) as Measured, round);
    }
  } finally {
    for (const t of targets) await t.stop();
  }
  return report(ctx, [...measured.entries()]);
}

function report(ctx: ScenarioContext, rows: readonly [Target, Measured][]): ScenarioOutcome {
  const o = ctx.options;
  const rate = (m: Measured): number => (m.elapsedMs > 0 ? (m.calls * 1000) / m.elapsedMs : 0);
  const pct = (micros: number, m: Measured): string =>
    `${((100 * micros) / (m.elapsedMs * 1000)).toFixed(0)} %`;
  const lines = [
    `Add (one ~100-byte message to one of ${THREADS} threads) at ${o.size("cluster-concurrency")} calls ` +
      `in flight over ${o.size("cluster-servers")} service processes (${CONNECTIONS_PER_SERVER} h2 ` +
      `connections each, calls spread round-robin); ${o.size("cluster-rounds")} x ` +
      `${o.size("cluster-seconds")} s per target, taking turns. Redis without persistence; the cluster's ` +
      "replicas replicate asynchronously (--redis-min-replicas 0, the default). CPU columns in % of one " +
      "core over the timed runs (driver: this process); the machine has " +
      `${ctx.options.quick ? "(quick run) " : ""}the cores nproc says, shared by the driver, the service ` +
      `processes and redis-server. ${capNote(ctx)}Goal: cluster Add >= ${GOAL} x one primary's, service processes not CPU-bound.`,
    "",
    "| target | Add calls/s | p50 ms | p99 ms | errors | service processes' CPU (each) | redis-server CPU (all) | driver CPU | machine busy |",
    "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
  ];
  for (const [t, m] of rows) {
    const sorted = Float64Array.from(m.latencies).sort();
    lines.push(
      `| ${t.name} | ${rate(m).toFixed(0)} | ${quantile(sorted, 0.5).toFixed(2)} | ` +
        `${quantile(sorted, 0.99).toFixed(2)} | ${m.errors} | ` +
        `${m.serverCpu.map((c) => pct(c, m)).join(", ")} | ${pct(m.redisCpu, m)} | ` +
        `${pct(m.driverCpu, m)} | ${pct(m.machineBusy, m)} |`,
    );
  }
  const [single, ...clusters] = rows;
  const errors = sum(rows.map(([, m]) => m.errors));
  if (single !== undefined && clusters.length > 0) {
    lines.push("", "| goal | measured | verdict |", "| --- | ---: | --- |");
    for (const [t, m] of clusters) {
      const ratio = rate(m) / rate(single[1]);
      lines.push(
        `| ${t.name}: Add / one primary's Add >= ${GOAL} | ${ratio.toFixed(2)} | ${ratio >= GOAL ? "meets" : "**misses**"} |`,
      );
    }
  }
  if (errors > 0)
    lines.push("", `First error: ${rows.find(([, m]) => m.firstError)?.[1].firstError}`);
  return { markdown: lines.join("\n"), valid: errors === 0 };
}

function capNote(ctx: ScenarioContext): string {
  const percent = ctx.options.size("cluster-redis-cpu-percent");
  return percent > 0
    ? `Every redis-server capped at ${percent} % of one core (a cgroup each, --cluster-redis-cpu-percent), so the primaries, not the machine, are the limit. `
    : "";
}

export const clusterAddScenario = {
  title: "cluster-add: Add throughput on one Redis primary vs a 3-primary Redis Cluster",
  budgetMs(ctx: ScenarioContext): number {
    const o = ctx.options;
    const timed =
      o.size("cluster-rounds") * 3 * (o.size("cluster-seconds") * 1000 + CALL_TIMEOUT_MS);
    return timed + 3 * o.size("cluster-servers") * START_TIMEOUT_MS + 180_000;
  },
  redisServerOf: (ctx: ScenarioContext): string => ctx.redisServer,
  run,
};
