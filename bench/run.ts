import * as os from "node:os";
import { fileURLToPath } from "node:url";
import { fromBinary } from "@bufbuild/protobuf";
import { AddResponseSchema, GetResponseSchema } from "../gen/ts/windlass/memory/v1/memory_pb.js";
import { machineBusyMicros } from "./cpu-time.js";
import {
  type Connections,
  callOnce,
  type DriverKind,
  openConnections,
  quantile,
  runLoad,
} from "./load.js";
import {
  type BenchResult,
  formatJson,
  formatTable,
  type Measurement,
  type ServerName,
} from "./report.js";
import {
  ADD_PATH,
  addRequests,
  GET_PATH,
  GET_SEED_MESSAGES,
  GET_WINDOW,
  getRequest,
  getSeedRequests,
} from "./scenarios.js";
import { type ServerProcess, startServerProcess } from "./server-process.js";

/**
 * The first benchmark: the real windlass-memory gRPC server against a bare
 * @grpc/grpc-js server that returns the same response bytes, on the Add and
 * Get paths, at a fixed number of calls in flight. It prints figures; it is
 * not a test. Run with `npm run bench`; settings are BENCH_* variables (see
 * SETTINGS below).
 *
 * Design: each server runs in its own node child process and the load driver
 * runs here, so on a 2-core machine the driver and the server under test
 * each get a core and the server's CPU time per call can be read from /proc.
 * Both servers are started the same way, stay up for the whole run, and are
 * measured alternately (real, bare, bare, real, ...) after a warm-up.
 */

interface NumberSetting {
  readonly env: string;
  readonly fallback: number;
  readonly min: number;
  readonly max: number;
  readonly integer: boolean;
  readonly help: string;
}

const SETTINGS = {
  seconds: {
    env: "BENCH_SECONDS",
    fallback: 5,
    min: 0.5,
    max: 600,
    integer: false,
    help: "length of one measurement",
  },
  warmupSeconds: {
    env: "BENCH_WARMUP_SECONDS",
    fallback: 2,
    min: 0,
    max: 600,
    integer: false,
    help: "warm-up per server, scenario and driver",
  },
  rounds: {
    env: "BENCH_ROUNDS",
    fallback: 2,
    min: 1,
    max: 20,
    integer: true,
    help: "measurements per server, scenario and driver",
  },
  concurrency: {
    env: "BENCH_CONCURRENCY",
    fallback: 64,
    min: 1,
    max: 10_000,
    integer: true,
    help: "unary calls in flight",
  },
  // Four connections rather than one: a server has several clients, and over
  // one connection the two sides wait on each other so neither gets busy
  // (measured with the h2 driver: bare grpc-js 8-10k calls/s on 1, 12-20k on 4).
  connections: {
    env: "BENCH_CONNECTIONS",
    fallback: 4,
    min: 1,
    max: 64,
    integer: true,
    help: "client channels (HTTP/2 connections) per server and driver",
  },
  threads: {
    env: "BENCH_THREADS",
    fallback: 300,
    min: 1,
    max: 100_000,
    integer: true,
    help: "threads the Add scenario writes to, round-robin",
  },
} satisfies Record<string, NumberSetting>;

const DRIVERS_ENV = "BENCH_DRIVERS";
const ALL_DRIVERS: readonly DriverKind[] = ["grpc-js", "h2"];
const SCENARIOS_ENV = "BENCH_SCENARIOS";
const ALL_SCENARIOS: readonly ScenarioName[] = ["Add", "Get"];
/** A directory: both servers run with `node --cpu-prof` and write their profiles there on exit. */
const CPU_PROF_ENV = "BENCH_CPU_PROF_DIR";
/** Extra node flags for both servers, space-separated, e.g. "--max-semi-space-size=64". */
const SERVER_NODE_ARGS_ENV = "BENCH_SERVER_NODE_ARGS";

type ScenarioName = "Add" | "Get";

type Settings = { readonly [K in keyof typeof SETTINGS]: number } & {
  readonly drivers: readonly DriverKind[];
  readonly scenarios: readonly ScenarioName[];
  readonly cpuProfDir: string | undefined;
  readonly serverNodeArgs: readonly string[];
};

const CALL_TIMEOUT_MS = 10_000;
const SERVER_START_TIMEOUT_MS = 15_000;
// Lets the previous measurement's garbage and stragglers settle.
const PAUSE_BETWEEN_MS = 250;
const GOAL_RATIO = 0.85;

class UsageError extends Error {}

function readSettings(env: NodeJS.ProcessEnv): Settings {
  const numbers: Record<string, number> = {};
  for (const [key, s] of Object.entries(SETTINGS) as [string, NumberSetting][]) {
    const text = env[s.env];
    const value = text === undefined || text === "" ? s.fallback : Number(text);
    if (
      !Number.isFinite(value) ||
      value < s.min ||
      value > s.max ||
      (s.integer && !Number.isInteger(value))
    ) {
      throw new UsageError(
        `${s.env}="${text}": expected ${s.integer ? "a whole number" : "a number"} from ${s.min} to ${s.max} (${s.help})`,
      );
    }
    numbers[key] = value;
  }
  const cpuProfDir = env[CPU_PROF_ENV];
  return {
    ...(numbers as { [K in keyof typeof SETTINGS]: number }),
    drivers: listSetting(env, DRIVERS_ENV, ALL_DRIVERS),
    scenarios: listSetting(env, SCENARIOS_ENV, ALL_SCENARIOS),
    cpuProfDir: cpuProfDir === undefined || cpuProfDir === "" ? undefined : cpuProfDir,
    serverNodeArgs: (env[SERVER_NODE_ARGS_ENV] ?? "").split(/\s+/).filter((a) => a !== ""),
  };
}

/** A comma-separated subset of `all`, in the order of `all`; unset: all of them. */
function listSetting<T extends string>(
  env: NodeJS.ProcessEnv,
  name: string,
  all: readonly T[],
): readonly T[] {
  const text = env[name];
  if (text === undefined || text === "") return all;
  const wanted = text.split(",").map((item) => item.trim());
  for (const item of wanted) {
    if (!(all as readonly string[]).includes(item)) {
      throw new UsageError(`${name}="${text}": "${item}" is not one of ${all.join(", ")}`);
    }
  }
  return all.filter((item) => wanted.includes(item));
}

/** The command line that reproduces this run. */
function commandLine(env: NodeJS.ProcessEnv): string {
  const vars = [
    ...Object.values(SETTINGS).map((s: NumberSetting) => s.env),
    DRIVERS_ENV,
    SCENARIOS_ENV,
    CPU_PROF_ENV,
    SERVER_NODE_ARGS_ENV,
  ]
    .filter((name) => env[name] !== undefined && env[name] !== "")
    .map((name) => `${name}=${env[name]}`);
  const tail =
    env.npm_lifecycle_event === "bench"
      ? "npm run bench   # = npm run build && node dist/bench/run.js"
      : "node dist/bench/run.js";
  return [...vars, tail].join(" ");
}

interface Scenario {
  readonly name: ScenarioName;
  readonly path: string;
  readonly requests: readonly Buffer[];
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function measure(
  server: ServerProcess,
  target: Connections,
  scenario: Scenario,
  settings: Settings,
  durationMs: number,
): Promise<Omit<Measurement, "scenario" | "server" | "driver" | "round">> {
  const machineBefore = machineBusyMicros();
  const serverBefore = server.cpuMicros();
  const driverBefore = process.cpuUsage();
  const load = await runLoad(target, scenario.path, scenario.requests, {
    concurrency: settings.concurrency,
    durationMs,
    callTimeoutMs: CALL_TIMEOUT_MS,
  });
  const driverUsage = process.cpuUsage(driverBefore);
  const serverAfter = server.cpuMicros();
  const machineAfter = machineBusyMicros();
  const serverCpuMicros =
    serverBefore === undefined || serverAfter === undefined
      ? undefined
      : serverAfter - serverBefore;
  const driverCpuMicros = driverUsage.user + driverUsage.system;
  return {
    load,
    serverCpuMicros,
    driverCpuMicros,
    // The other server is idle meanwhile, so what is left is other work on the machine.
    otherCpuMicros:
      machineBefore === undefined || machineAfter === undefined || serverCpuMicros === undefined
        ? undefined
        : Math.max(0, machineAfter - machineBefore - serverCpuMicros - driverCpuMicros),
  };
}

/** Seeds the real server, captures its Add and Get responses and checks them. */
async function captureResponses(
  address: string,
  adds: readonly Buffer[],
): Promise<{ add: Buffer; get: Buffer }> {
  for (const seed of getSeedRequests()) await callOnce(address, ADD_PATH, seed, CALL_TIMEOUT_MS);
  const add = await callOnce(address, ADD_PATH, adds[0] as Buffer, CALL_TIMEOUT_MS);
  const get = await callOnce(address, GET_PATH, getRequest(), CALL_TIMEOUT_MS);
  const added = fromBinary(AddResponseSchema, add);
  if (added.lastSeq < 1n) throw new Error("real Add answered without a last_seq");
  const got = fromBinary(GetResponseSchema, get);
  if (got.messages.length !== GET_WINDOW || got.thread?.lastSeq !== BigInt(GET_SEED_MESSAGES)) {
    throw new Error(
      `real Get returned ${got.messages.length} messages of last_seq ${got.thread?.lastSeq}; expected ${GET_WINDOW} of ${GET_SEED_MESSAGES}`,
    );
  }
  return { add, get };
}

async function checkBare(address: string, expected: { add: Buffer; get: Buffer }): Promise<void> {
  const add = await callOnce(address, ADD_PATH, Buffer.alloc(0), CALL_TIMEOUT_MS);
  const get = await callOnce(address, GET_PATH, Buffer.alloc(0), CALL_TIMEOUT_MS);
  if (!add.equals(expected.add) || !get.equals(expected.get)) {
    throw new Error("the bare server does not answer with the captured bytes");
  }
}

async function run(settings: Settings): Promise<number> {
  const root = fileURLToPath(new URL("../../", import.meta.url));
  const realScript = `${root}bin/windlass-memory.js`;
  const bareScript = fileURLToPath(new URL("./bare-server.js", import.meta.url));
  const cpus = os.cpus();
  const machine = {
    node: process.version,
    cpuCount: cpus.length,
    cpuModel: cpus[0]?.model ?? "unknown",
    platform: `${os.platform()} ${os.release()}`,
  };
  const command = commandLine(process.env);
  const design =
    "child processes: each server runs alone in its own node process (real: bin/windlass-memory.js serve " +
    "--port 0 --http-port 0 with default settings and the memory store; bare: dist/bench/bare-server.js), " +
    "this process drives the load (pre-encoded requests, responses not decoded) with two clients: " +
    "grpc-js channels (what a Node client costs) and a minimal gRPC client on node:http2 " +
    "(about a third of grpc-js's CPU per call, so the server rather than the driver runs out of CPU)" +
    (settings.serverNodeArgs.length === 0
      ? ""
      : `; both servers run with node ${settings.serverNodeArgs.join(" ")}`);

  process.stdout.write(
    [
      "windlass-memory benchmark: real server vs bare grpc-js returning the same bytes",
      `command:  ${command}`,
      `machine:  node ${machine.node}, ${machine.cpuCount} CPUs, ${machine.cpuModel}, ${machine.platform}`,
      `design:   ${design}`,
      `load:     ${settings.concurrency} unary calls in flight over ${settings.connections} connection(s) ` +
        `per server; drivers ${settings.drivers.join(", ")}; ${settings.rounds} x ${settings.seconds} s ` +
        `per server, scenario and driver, alternating, after ${settings.warmupSeconds} s warm-up each`,
      `workload: Add = 1 user message (100 B) per call to ${settings.threads} threads round-robin; ` +
        `Get = window ${GET_WINDOW} of a thread holding ${GET_SEED_MESSAGES} messages (100-200 B)`,
      "",
    ].join("\n"),
  );

  // Profiling slows the servers; the figures of such a run are for finding
  // hot spots, not for quoting.
  const nodeArgs = [
    ...settings.serverNodeArgs,
    ...(settings.cpuProfDir === undefined
      ? []
      : ["--cpu-prof", `--cpu-prof-dir=${settings.cpuProfDir}`]),
  ];
  if (settings.cpuProfDir !== undefined) {
    process.stdout.write(`profiling: servers write .cpuprofile files to ${settings.cpuProfDir}\n`);
  }
  const servers: ServerProcess[] = [];
  const open: Connections[] = [];
  try {
    const real = await startServerProcess({
      label: "real server",
      nodeArgs,
      script: realScript,
      args: ["serve", "--port", "0", "--http-port", "0"],
      startTimeoutMs: SERVER_START_TIMEOUT_MS,
    });
    servers.push(real);
    const realAddress = `127.0.0.1:${real.grpcPort}`;
    const adds = addRequests(settings.threads);
    const captured = await captureResponses(realAddress, adds);

    const bare = await startServerProcess({
      label: "bare server",
      nodeArgs,
      script: bareScript,
      args: ["--add", captured.add.toString("base64"), "--get", captured.get.toString("base64")],
      startTimeoutMs: SERVER_START_TIMEOUT_MS,
    });
    servers.push(bare);
    const bareAddress = `127.0.0.1:${bare.grpcPort}`;
    await checkBare(bareAddress, captured);

    process.stdout.write(
      `bytes:    Add request ${adds[0]?.length} B, response ${captured.add.length} B; ` +
        `Get request ${getRequest().length} B, response ${captured.get.length} B\n\n`,
    );

    const processes: Record<ServerName, ServerProcess> = { real, bare };
    const targets = new Map<string, Connections>();
    for (const driver of settings.drivers) {
      for (const [name, address] of [
        ["real", realAddress],
        ["bare", bareAddress],
      ] as const) {
        const connections = openConnections(driver, address, settings.connections);
        open.push(connections);
        targets.set(`${driver}/${name}`, connections);
      }
    }
    const targetOf = (driver: DriverKind, name: ServerName): Connections => {
      const t = targets.get(`${driver}/${name}`);
      if (t === undefined) throw new Error(`no connections for ${driver}/${name}`);
      return t;
    };

    const scenarios: Scenario[] = [
      { name: "Add" as const, path: ADD_PATH, requests: adds },
      { name: "Get" as const, path: GET_PATH, requests: [getRequest()] },
    ].filter((s) => settings.scenarios.includes(s.name));
    const measurements: Measurement[] = [];
    for (const scenario of scenarios) {
      for (const driver of settings.drivers) {
        if (settings.warmupSeconds > 0) {
          for (const name of ["real", "bare"] as const) {
            process.stdout.write(`warm-up   ${scenario.name} ${driver} ${name}\n`);
            const w = await measure(
              processes[name],
              targetOf(driver, name),
              scenario,
              settings,
              settings.warmupSeconds * 1000,
            );
            if (w.load.errors > 0) throw new Error(`warm-up failed: ${w.load.firstError}`);
            await sleep(PAUSE_BETWEEN_MS);
          }
        }
        for (let round = 0; round < settings.rounds; round++) {
          // ABBA order, so drift over the run (heap growth, other load) hits both alike.
          const order = round % 2 === 0 ? (["real", "bare"] as const) : (["bare", "real"] as const);
          for (const name of order) {
            const m = await measure(
              processes[name],
              targetOf(driver, name),
              scenario,
              settings,
              settings.seconds * 1000,
            );
            measurements.push({ scenario: scenario.name, driver, server: name, round, ...m });
            const rate = (m.load.calls * 1000) / m.load.elapsedMs;
            process.stdout.write(
              `measured  ${scenario.name} ${driver} ${name} round ${round + 1}: ${rate.toFixed(0)} calls/s, ` +
                `p50 ${quantile(m.load.latenciesMs.slice().sort(), 0.5).toFixed(2)} ms` +
                (m.load.errors > 0 ? `, ${m.load.errors} errors (${m.load.firstError})` : "") +
                "\n",
            );
            await sleep(PAUSE_BETWEEN_MS);
          }
        }
      }
    }

    const result: BenchResult = {
      command,
      design,
      machine,
      settings: {
        ...settings,
        drivers: settings.drivers.join(","),
        scenarios: settings.scenarios.join(","),
        cpuProfDir: settings.cpuProfDir ?? "",
        serverNodeArgs: settings.serverNodeArgs.join(" "),
      },
      goalRatio: GOAL_RATIO,
      measurements,
      bytes: {
        addRequest: adds[0]?.length ?? 0,
        addResponse: captured.add.length,
        getRequest: getRequest().length,
        getResponse: captured.get.length,
      },
    };
    process.stdout.write(`\n${formatTable(result)}\n\n${formatJson(result)}\n`);
    const errors = measurements.reduce((n, m) => n + m.load.errors, 0);
    if (errors > 0) {
      process.stderr.write(`bench: ${errors} calls failed; the figures above are not valid\n`);
      return 1;
    }
    return 0;
  } finally {
    for (const connections of open) connections.close();
    await Promise.all(servers.map((s) => s.stop()));
  }
}

async function main(): Promise<number> {
  let settings: Settings;
  try {
    settings = readSettings(process.env);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`bench: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  // A bound on the whole run: warm-ups, measurements, start and stop, with
  // generous slack. Past it something is stuck; exiting kills the children.
  const perDriverMs =
    2 * (settings.warmupSeconds + settings.rounds * settings.seconds) * 1000 +
    4 * (settings.rounds + 1) * PAUSE_BETWEEN_MS;
  const budgetMs =
    2 * (settings.scenarios.length * settings.drivers.length * perDriverMs) +
    4 * SERVER_START_TIMEOUT_MS +
    60_000;
  const watchdog = setTimeout(() => {
    process.stderr.write(`bench: still running after ${budgetMs} ms; giving up\n`);
    process.exit(1);
  }, budgetMs);
  watchdog.unref();
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    // process.exit runs the 'exit' hook of server-process.ts, which kills the children.
    process.once(signal, () => process.exit(130));
  }
  try {
    return await run(settings);
  } finally {
    clearTimeout(watchdog);
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(
      `bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exitCode = 1;
  },
);
