import { fileURLToPath } from "node:url";
import { fromBinary } from "@bufbuild/protobuf";
import { AddResponseSchema, GetResponseSchema } from "../gen/ts/windlass/memory/v1/memory_pb.js";
import { machineBusyMicros } from "./cpu-time.js";
import { H2LOAD_MISSING, h2loadAvailable, h2loadSpread, rpcFailures, runH2load } from "./h2load.js";
import {
  type Connections,
  callOnce,
  type DriverKind,
  type InProcessDriver,
  type LoadResult,
  openConnections,
  quantile,
  runLoad,
} from "./load.js";
import { UsageError } from "./options.js";
import { commandDelta, openRedisProbe, type RedisProbe } from "./redis-server.js";
import {
  type BenchResult,
  formatJson,
  formatTable,
  type Measurement,
  type RedisSentCount,
  type Target,
} from "./report.js";
import { loadAverage, machineInfo, type ScenarioOutcome } from "./results.js";
import {
  ADD_PATH,
  addRequests,
  GET_PATH,
  GET_SEED_MESSAGES,
  GET_WINDOW,
  getRequest,
  getSeedRequests,
} from "./scenarios.js";
import { type ServerProcess, startServerProcess, UNLIMITED_SERVE_FLAGS } from "./server-process.js";
import { ALL_STORES, openStoreBackends, type StoreBackends, type StoreKind } from "./stores.js";

/**
 * The benchmark: the real windlass-memory gRPC server, once per store
 * (memory, sqlite, redis, postgres), against a bare @grpc/grpc-js server that returns
 * the same response bytes, on the Add and Get paths, at a fixed number of
 * calls in flight. On the redis store it also counts the Redis commands the
 * server sends per call. It prints figures; it is not a test. Run with
 * `npm run bench` (the default scenario, "unary"); settings are BENCH_*
 * variables (see SETTINGS below); `--quick` shortens the runs.
 *
 * Design: each server runs in its own node child process and the load driver
 * runs here, so on a 2-core machine the driver and the server under test
 * each get a core and the server's CPU time per call can be read from /proc.
 * All servers are started the same way, stay up for the whole run, and are
 * measured one after another in each round, the order reversed every other
 * round (memory, sqlite, redis, postgres, bare, then the reverse), after a
 * warm-up. The SQLite file, redis-server (no persistence) and PostgreSQL
 * (fsync on) are the bench's own, fresh for each run, removed and stopped
 * at the end.
 *
 * Settings (environment; the defaults take about 6.5 minutes on 2 cores, by
 * the arithmetic below with five servers and three drivers):
 *   BENCH_SECONDS=3            length of one measurement
 *   BENCH_FIRST_WARMUP_SECONDS=15
 *                              a server's first warm-up in each scenario (see
 *                              FIRST_WARMUP below)
 *   BENCH_WARMUP_SECONDS=2     every later warm-up (another driver, another
 *                              level in flight)
 *   BENCH_ROUNDS=2             measurements per server, scenario and driver
 *   BENCH_CONCURRENCY=64       unary calls in flight; a comma list (1,8,64)
 *                              measures every level on every server in turn
 *   BENCH_CONNECTIONS=4        HTTP/2 connections per server and driver
 *   BENCH_THREADS=300          threads the Add scenario writes to, round-robin
 *   BENCH_DRIVERS=grpc-js,h2,h2load
 *                              load clients (load.ts; h2load.ts, which needs
 *                              Debian's nghttp2-client)
 *   BENCH_SCENARIOS=Add,Get
 *   BENCH_STORES=memory,sqlite,redis,postgres
 *                              stores of the real server, one process each;
 *                              the bare server always runs beside them
 *   BENCH_REDIS_COUNT_CALLS=1000
 *                              calls per scenario over which MONITOR counts the
 *                              Redis commands the server sends (not timed)
 *   REDIS_SERVER=redis-server  the redis-server binary (7.0 or later)
 *   BENCH_CPU_PROF_DIR, BENCH_SERVER_NODE_ARGS: profiling and node flags of
 *                              the servers (see below)
 * Time: scenarios x levels in flight x drivers x (stores + 1) x (warm-up + rounds x seconds),
 * plus scenarios x (stores + 1) x (first warm-up - warm-up) and about 2 s per
 * server for start-up and seeding.
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
  // 3 s rather than the 5 s of the two-server bench: four servers (three
  // stores and the baseline) keep the default run under three minutes.
  seconds: {
    env: "BENCH_SECONDS",
    fallback: 3,
    min: 0.5,
    max: 600,
    integer: false,
    help: "length of one measurement",
  },
  firstWarmupSeconds: {
    env: "BENCH_FIRST_WARMUP_SECONDS",
    // FIRST_WARMUP: V8 was still compiling the real server's Add path with
    // TurboFan 5-9 s into a 64-in-flight load (its compiler threads used 16 %
    // of the server's CPU then, 0.5 % from 15 s on; perf record, Redis
    // store). A 2 s warm-up measured that compilation: 262 against 167-197 us
    // of server CPU per Add once it settled. The bare server has far less code
    // to compile; both get the same warm-up.
    fallback: 15,
    min: 0,
    max: 600,
    integer: false,
    help: "a server's first warm-up in each scenario (its JIT settles)",
  },
  warmupSeconds: {
    env: "BENCH_WARMUP_SECONDS",
    fallback: 2,
    min: 0,
    max: 600,
    integer: false,
    help: "every later warm-up per server, scenario, level in flight and driver",
  },
  rounds: {
    env: "BENCH_ROUNDS",
    fallback: 2,
    min: 1,
    max: 20,
    integer: true,
    help: "measurements per server, scenario and driver",
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
  redisCountCalls: {
    env: "BENCH_REDIS_COUNT_CALLS",
    fallback: 1000,
    min: 1,
    max: 1_000_000,
    integer: true,
    help: "calls per scenario over which the Redis commands the server sends are counted (MONITOR)",
  },
} satisfies Record<string, NumberSetting>;

/** Unary calls in flight: one level or a comma list, each measured in turn on every server. */
const CONCURRENCY_ENV = "BENCH_CONCURRENCY";
const DEFAULT_CONCURRENCY: readonly number[] = [64];
const MAX_CONCURRENCY = 10_000;
const DRIVERS_ENV = "BENCH_DRIVERS";
const ALL_DRIVERS: readonly DriverKind[] = ["grpc-js", "h2", "h2load"];
const SCENARIOS_ENV = "BENCH_SCENARIOS";
const ALL_SCENARIOS: readonly UnaryCall[] = ["Add", "Get"];
/** The stores the real server runs on, one server each, beside the bare server. */
const STORES_ENV = "BENCH_STORES";
/** The redis-server binary for the redis store (the tests read the same variable). */
const REDIS_SERVER_ENV = "REDIS_SERVER";
/** A directory: all servers run with `node --cpu-prof` and write their profiles there on exit. */
const CPU_PROF_ENV = "BENCH_CPU_PROF_DIR";
/** Extra node flags for all servers, space-separated, e.g. "--max-semi-space-size=64". */
const SERVER_NODE_ARGS_ENV = "BENCH_SERVER_NODE_ARGS";

type UnaryCall = "Add" | "Get";

export type Settings = { readonly [K in keyof typeof SETTINGS]: number } & {
  /** The levels of calls in flight, in the order given. */
  readonly concurrency: readonly number[];
  readonly drivers: readonly DriverKind[];
  readonly scenarios: readonly UnaryCall[];
  readonly stores: readonly StoreKind[];
  readonly redisServer: string;
  readonly cpuProfDir: string | undefined;
  readonly serverNodeArgs: readonly string[];
};

const CALL_TIMEOUT_MS = 10_000;
const SERVER_START_TIMEOUT_MS = 15_000;
// Lets the previous measurement's garbage and stragglers settle.
const PAUSE_BETWEEN_MS = 250;
const GOAL_RATIO = 0.85;
// A bound on the counted batch of calls (BENCH_REDIS_COUNT_CALLS); it normally takes a second or two.
const COUNT_MAX_MS = 60_000;
const REDIS_TARGET_PER_ADD = 1;

// --quick: one short round per server, scenario and driver, to see that it works.
const QUICK_FALLBACKS: Partial<Record<keyof typeof SETTINGS, number>> = {
  seconds: 1,
  firstWarmupSeconds: 0.5,
  warmupSeconds: 0.5,
  rounds: 1,
};

export function readSettings(env: NodeJS.ProcessEnv, quick = false): Settings {
  const numbers: Record<string, number> = {};
  for (const [key, s] of Object.entries(SETTINGS) as [string, NumberSetting][]) {
    const text = env[s.env];
    const fallback =
      (quick ? QUICK_FALLBACKS[key as keyof typeof SETTINGS] : undefined) ?? s.fallback;
    const value = text === undefined || text === "" ? fallback : Number(text);
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
  const concurrency = concurrencySetting(env);
  const drivers = listSetting(env, DRIVERS_ENV, ALL_DRIVERS);
  if (drivers.includes("h2load")) {
    if (!h2loadAvailable()) throw new UsageError(H2LOAD_MISSING);
    // h2load spreads its calls evenly over its connections.
    for (const level of concurrency) {
      try {
        h2loadSpread(level, numbers.connections ?? 1);
      } catch (err) {
        throw new UsageError(
          `${CONCURRENCY_ENV} and ${SETTINGS.connections.env}: ${(err as Error).message}`,
        );
      }
    }
  }
  return {
    ...(numbers as { [K in keyof typeof SETTINGS]: number }),
    concurrency,
    drivers,
    scenarios: listSetting(env, SCENARIOS_ENV, ALL_SCENARIOS),
    stores: listSetting(env, STORES_ENV, ALL_STORES),
    redisServer: env[REDIS_SERVER_ENV] || "redis-server",
    cpuProfDir: cpuProfDir === undefined || cpuProfDir === "" ? undefined : cpuProfDir,
    serverNodeArgs: (env[SERVER_NODE_ARGS_ENV] ?? "").split(/\s+/).filter((a) => a !== ""),
  };
}

/** BENCH_CONCURRENCY: whole numbers from 1 to MAX_CONCURRENCY, comma-separated, none twice. */
function concurrencySetting(env: NodeJS.ProcessEnv): readonly number[] {
  const text = env[CONCURRENCY_ENV];
  if (text === undefined || text === "") return DEFAULT_CONCURRENCY;
  const levels = text.split(",").map((item) => Number(item.trim()));
  for (const n of levels) {
    if (!Number.isInteger(n) || n < 1 || n > MAX_CONCURRENCY) {
      throw new UsageError(
        `${CONCURRENCY_ENV}="${text}": expected whole numbers from 1 to ${MAX_CONCURRENCY}, comma-separated (unary calls in flight)`,
      );
    }
  }
  if (new Set(levels).size !== levels.length) {
    throw new UsageError(`${CONCURRENCY_ENV}="${text}": a level is given twice`);
  }
  return levels;
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

/** The BENCH_* variables of this run, as a prefix of the command line. */
export function unaryEnvPrefix(env: NodeJS.ProcessEnv): string {
  return [
    ...Object.values(SETTINGS).map((s: NumberSetting) => s.env),
    CONCURRENCY_ENV,
    DRIVERS_ENV,
    SCENARIOS_ENV,
    STORES_ENV,
    REDIS_SERVER_ENV,
    CPU_PROF_ENV,
    SERVER_NODE_ARGS_ENV,
  ]
    .filter((name) => env[name] !== undefined && env[name] !== "")
    .map((name) => `${name}=${env[name]}`)
    .join(" ");
}

interface Scenario {
  readonly name: UnaryCall;
  readonly path: string;
  readonly requests: readonly Buffer[];
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** One driver's load on one server: its calls, and the driver's own CPU time meanwhile. */
type Drive = (
  scenario: Scenario,
  concurrency: number,
  durationMs: number,
) => Promise<{ load: LoadResult; driverCpuMicros: number }>;

/** A driver in this process: its CPU is this process's. */
function inProcessDrive(target: Connections): Drive {
  return async (scenario, concurrency, durationMs) => {
    const before = process.cpuUsage();
    const load = await runLoad(target, scenario.path, scenario.requests, {
      concurrency,
      durationMs,
      callTimeoutMs: CALL_TIMEOUT_MS,
    });
    const used = process.cpuUsage(before);
    return { load, driverCpuMicros: used.user + used.system };
  };
}

/**
 * h2load (h2load.ts) on one server, with the scenario's first request. A
 * real server's failed calls are read from its /metrics, since h2load sees
 * only HTTP statuses; the bare server answers every call alike.
 */
function h2loadDrive(server: ServerProcess, connections: number, real: boolean): Drive {
  return async (scenario, concurrency, durationMs) => {
    const failures = async (): Promise<number> => {
      if (!real) return 0;
      if (server.httpPort === undefined)
        throw new Error(`${server.label}: no HTTP port for /metrics`);
      return rpcFailures(server.httpPort, scenario.name);
    };
    const request = scenario.requests[0];
    if (request === undefined) throw new Error(`${scenario.name}: no request to send`);
    const before = await failures();
    const run = await runH2load(`127.0.0.1:${server.grpcPort}`, scenario.path, request, {
      concurrency,
      connections,
      durationMs,
      callTimeoutMs: CALL_TIMEOUT_MS,
    });
    const failed = (await failures()) - before;
    if (run.driverCpuMicros === undefined) throw new Error("h2load: its CPU time was not read");
    const load: LoadResult =
      failed === 0
        ? run.load
        : {
            ...run.load,
            calls: run.load.calls - failed,
            errors: run.load.errors + failed,
            firstError:
              run.load.firstError ??
              `${failed} calls failed (the server's windlass_rpc_requests_total)`,
          };
    return { load, driverCpuMicros: run.driverCpuMicros };
  };
}

/**
 * What a measurement reads of the database behind a store, when the redis
 * or postgres store is measured: its processes' CPU, and Redis's command
 * counts.
 */
interface StoreWatch {
  readonly probe: RedisProbe | undefined;
  cpuMicros(): number | undefined;
}

async function measure(
  server: ServerProcess,
  drive: Drive,
  scenario: Scenario,
  concurrency: number,
  durationMs: number,
  store: StoreWatch | undefined,
): Promise<Omit<Measurement, "scenario" | "concurrency" | "target" | "driver" | "round">> {
  const commandsBefore = await store?.probe?.commandCalls();
  const storeBefore = store?.cpuMicros();
  const machineBefore = machineBusyMicros();
  const serverBefore = server.cpuMicros();
  const schedBefore = server.mainThreadSched();
  const { load, driverCpuMicros } = await drive(scenario, concurrency, durationMs);
  const schedAfter = server.mainThreadSched();
  const serverAfter = server.cpuMicros();
  const machineAfter = machineBusyMicros();
  const storeAfter = store?.cpuMicros();
  const commandsAfter = await store?.probe?.commandCalls();
  const serverCpuMicros =
    serverBefore === undefined || serverAfter === undefined
      ? undefined
      : serverAfter - serverBefore;
  const storeCpuMicros =
    storeBefore === undefined || storeAfter === undefined ? undefined : storeAfter - storeBefore;
  return {
    load,
    serverCpuMicros,
    driverCpuMicros,
    // The other servers are idle meanwhile, so what is left is other work on the machine.
    otherCpuMicros:
      machineBefore === undefined ||
      machineAfter === undefined ||
      serverCpuMicros === undefined ||
      (store !== undefined && storeCpuMicros === undefined)
        ? undefined
        : Math.max(
            0,
            machineAfter -
              machineBefore -
              serverCpuMicros -
              driverCpuMicros -
              (storeCpuMicros ?? 0),
          ),
    storeCpuMicros,
    serverMainThread:
      schedBefore === undefined || schedAfter === undefined
        ? undefined
        : {
            onCpu: schedAfter.onCpu - schedBefore.onCpu,
            waiting: schedAfter.waiting - schedBefore.waiting,
          },
    redisCommands:
      commandsBefore === undefined || commandsAfter === undefined
        ? undefined
        : Object.fromEntries(commandDelta(commandsBefore, commandsAfter)),
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

/** Runs the unary scenario; `command` is the command line that reproduces it. */
export async function runUnary(settings: Settings, command: string): Promise<ScenarioOutcome> {
  const root = fileURLToPath(new URL("../../", import.meta.url));
  const realScript = `${root}bin/windlass-memory.js`;
  const bareScript = fileURLToPath(new URL("./bare-server.js", import.meta.url));
  const info = machineInfo();
  const machine = {
    node: info.node,
    cpuCount: info.nproc,
    cpuModel: info.cpuModel,
    platform: info.platform,
  };
  const loadBefore = loadAverage();
  const targets: readonly Target[] = [...settings.stores, "bare"];
  const storeDescriptions: Record<StoreKind, string> = {
    memory: "memory",
    sqlite: "sqlite:<file in a new temporary directory> (WAL, synchronous=FULL: an fsync per Add)",
    redis: `redis://127.0.0.1:<port>/0 (a ${settings.redisServer} started by the bench, --save "" --appendonly no)`,
    postgres:
      "postgres://…/<new database> (a PostgreSQL started by the bench: fsync on, synchronous_commit on, " +
      "shared_buffers 32MB; server default --postgres-pool-size 10)",
    "redis-cluster":
      "redis-cluster://… (the tests' six-node cluster started by the bench: 3 primaries, 3 replicas, no persistence)",
  };
  const design =
    "child processes: each server runs alone in its own node process (real: bin/windlass-memory.js serve " +
    "--port 0 --http-port 0 --store STORE, otherwise default settings, one process per store: " +
    `${settings.stores.map((store) => storeDescriptions[store]).join(", ")}; ` +
    "bare: dist/bench/bare-server.js), " +
    "load drivers (pre-encoded requests, responses not decoded): in this process grpc-js channels " +
    "(what a Node client costs) and a minimal gRPC client on node:http2 (h2: about a third of " +
    "grpc-js's CPU per call), and h2load (nghttp2's C load generator, a child process: about a " +
    "sixth of h2's CPU per call, so the machine's CPU goes to the server measured)" +
    (settings.serverNodeArgs.length === 0
      ? ""
      : `; all servers run with node ${settings.serverNodeArgs.join(" ")}`);

  process.stdout.write(
    [
      "windlass-memory benchmark: real server per store vs bare grpc-js returning the same bytes",
      `command:  ${command}`,
      `machine:  node ${machine.node}, ${machine.cpuCount} CPUs, ${machine.cpuModel}, ${machine.platform}`,
      `design:   ${design}`,
      `load:     ${settings.concurrency.join(", ")} unary calls in flight (each level in turn) over ${settings.connections} connection(s) ` +
        `per server; drivers ${settings.drivers.join(", ")}; servers ${targets.join(", ")}; ` +
        `${settings.rounds} x ${settings.seconds} s per server, scenario and driver, in turn, ` +
        `after a warm-up of ${settings.firstWarmupSeconds} s the first time in each scenario, ` +
        `${settings.warmupSeconds} s later`,
      `workload: Add = 1 user message (100 B) per call to ${settings.threads} threads round-robin; ` +
        `Get = window ${GET_WINDOW} of a thread holding ${GET_SEED_MESSAGES} messages (100-200 B)` +
        (settings.drivers.includes("h2load")
          ? "; h2load sends one request body, so its Add writes to the first thread only " +
            "(at its max_stored from the first second on: each Add also trims one message)"
          : ""),
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
  let backends: StoreBackends | undefined;
  let probe: RedisProbe | undefined;
  try {
    backends = await openStoreBackends(settings.stores, settings.redisServer);
    const storeBackends = backends;
    const redisServer = backends.redis;
    let redisWatch: StoreWatch | undefined;
    if (redisServer !== undefined) {
      probe = await openRedisProbe(redisServer.url);
      redisWatch = { probe, cpuMicros: () => redisServer.cpuMicros() };
      process.stdout.write(`redis:    redis-server pid ${redisServer.pid} at ${redisServer.url}\n`);
    }
    const postgres = backends.postgres;
    const postgresWatch: StoreWatch | undefined =
      postgres === undefined ? undefined : { probe: undefined, cpuMicros: postgres.cpuMicros };
    const adds = addRequests(settings.threads);
    const processes = new Map<Target, ServerProcess>();
    let captured: { add: Buffer; get: Buffer } | undefined;
    for (const store of settings.stores) {
      const real = await startServerProcess({
        label: `real server (${store} store)`,
        nodeArgs,
        script: realScript,
        args: [
          "serve",
          ...UNLIMITED_SERVE_FLAGS,
          "--port",
          "0",
          "--http-port",
          "0",
          "--store",
          storeBackends.storeFlag(store),
        ],
        startTimeoutMs: SERVER_START_TIMEOUT_MS,
      });
      servers.push(real);
      processes.set(store, real);
      // Every real server is seeded and checked; the bare one answers with the first one's bytes.
      const responses = await captureResponses(`127.0.0.1:${real.grpcPort}`, adds);
      captured ??= responses;
    }
    if (captured === undefined) throw new Error("bench: no store to measure");

    const bare = await startServerProcess({
      label: "bare server",
      nodeArgs,
      script: bareScript,
      args: ["--add", captured.add.toString("base64"), "--get", captured.get.toString("base64")],
      startTimeoutMs: SERVER_START_TIMEOUT_MS,
    });
    servers.push(bare);
    processes.set("bare", bare);
    await checkBare(`127.0.0.1:${bare.grpcPort}`, captured);

    process.stdout.write(
      `bytes:    Add request ${adds[0]?.length} B, response ${captured.add.length} B; ` +
        `Get request ${getRequest().length} B, response ${captured.get.length} B ` +
        `(the ${settings.stores[0]} store's, which the bare server returns)\n\n`,
    );

    const processOf = (target: Target): ServerProcess => {
      const p = processes.get(target);
      if (p === undefined) throw new Error(`no server for ${target}`);
      return p;
    };
    // Opened on first use and kept for the run (so each server's connections warm up once).
    const connectionsByKey = new Map<string, Connections>();
    const connectionsOf = (driver: InProcessDriver, target: Target): Connections => {
      const key = `${driver}/${target}`;
      let c = connectionsByKey.get(key);
      if (c === undefined) {
        c = openConnections(
          driver,
          `127.0.0.1:${processOf(target).grpcPort}`,
          settings.connections,
        );
        open.push(c);
        connectionsByKey.set(key, c);
      }
      return c;
    };
    const driveOf = (driver: DriverKind, target: Target): Drive =>
      driver === "h2load"
        ? h2loadDrive(processOf(target), settings.connections, target !== "bare")
        : inProcessDrive(connectionsOf(driver, target));
    const storeWatchOf = (target: Target): StoreWatch | undefined =>
      target === "redis" ? redisWatch : target === "postgres" ? postgresWatch : undefined;

    const scenarios: Scenario[] = [
      { name: "Add" as const, path: ADD_PATH, requests: adds },
      { name: "Get" as const, path: GET_PATH, requests: [getRequest()] },
    ].filter((s) => settings.scenarios.includes(s.name));
    const measurements: Measurement[] = [];
    const redisSent: RedisSentCount[] = [];
    for (const scenario of scenarios) {
      let firstInScenario = true;
      for (const concurrency of settings.concurrency) {
        for (const driver of settings.drivers) {
          const at = `${scenario.name} ${driver} ${concurrency} in flight`;
          const warmupSeconds = firstInScenario
            ? settings.firstWarmupSeconds
            : settings.warmupSeconds;
          firstInScenario = false;
          if (warmupSeconds > 0) {
            for (const target of targets) {
              process.stdout.write(`warm-up   ${at} ${target}\n`);
              const w = await measure(
                processOf(target),
                driveOf(driver, target),
                scenario,
                concurrency,
                warmupSeconds * 1000,
                undefined,
              );
              if (w.load.errors > 0) throw new Error(`warm-up failed: ${w.load.firstError}`);
              await sleep(PAUSE_BETWEEN_MS);
            }
          }
          for (let round = 0; round < settings.rounds; round++) {
            // Reversed every other round, so drift over the run (heap and store
            // growth, other load) hits every server alike.
            const order = round % 2 === 0 ? targets : [...targets].reverse();
            for (const target of order) {
              const m = await measure(
                processOf(target),
                driveOf(driver, target),
                scenario,
                concurrency,
                settings.seconds * 1000,
                storeWatchOf(target),
              );
              measurements.push({
                scenario: scenario.name,
                concurrency,
                driver,
                target,
                round,
                ...m,
              });
              const rate = (m.load.calls * 1000) / m.load.elapsedMs;
              process.stdout.write(
                `measured  ${at} ${target} round ${round + 1}: ${rate.toFixed(0)} calls/s, ` +
                  `p50 ${quantile(m.load.latenciesMs.slice().sort(), 0.5).toFixed(2)} ms` +
                  (m.load.errors > 0 ? `, ${m.load.errors} errors (${m.load.firstError})` : "") +
                  "\n",
              );
              await sleep(PAUSE_BETWEEN_MS);
            }
          }
        }
      }
      if (probe !== undefined && processes.has("redis")) {
        // Out of the timed runs: MONITOR slows Redis. Always an in-process
        // driver, h2 unless the drivers name grpc-js without h2: h2load sends
        // one request.
        const driver: InProcessDriver =
          settings.drivers.includes("grpc-js") && !settings.drivers.includes("h2")
            ? "grpc-js"
            : "h2";
        const count = await countRedisCommands(
          probe,
          connectionsOf(driver, "redis"),
          scenario,
          settings,
        );
        redisSent.push({ ...count, scenario: scenario.name, driver });
        process.stdout.write(
          `counted   ${scenario.name} ${driver} redis: ${sumValues(count.commands)} Redis commands sent ` +
            `over ${count.calls} calls` +
            (count.errors > 0 ? `, ${count.errors} errors` : "") +
            "\n",
        );
        await sleep(PAUSE_BETWEEN_MS);
      }
    }

    const result: BenchResult = {
      command,
      design,
      machine,
      settings: {
        ...settings,
        concurrency: settings.concurrency.join(","),
        drivers: settings.drivers.join(","),
        scenarios: settings.scenarios.join(","),
        stores: settings.stores.join(","),
        cpuProfDir: settings.cpuProfDir ?? "",
        serverNodeArgs: settings.serverNodeArgs.join(" "),
      },
      goalRatio: GOAL_RATIO,
      redisTargetPerAdd: REDIS_TARGET_PER_ADD,
      targets,
      measurements,
      redisSent,
      bytes: {
        addRequest: adds[0]?.length ?? 0,
        addResponse: captured.add.length,
        getRequest: getRequest().length,
        getResponse: captured.get.length,
      },
    };
    const table = formatTable(result);
    process.stdout.write(`\n${table}\n\n${formatJson(result)}\n`);
    const errors =
      measurements.reduce((n, m) => n + m.load.errors, 0) +
      redisSent.reduce((n, c) => n + c.errors, 0);
    if (errors > 0) {
      process.stderr.write(`bench: ${errors} calls failed; the figures above are not valid\n`);
    }
    const markdown = [
      "Unary Add and Get per store beside a bare grpc-js server returning the same bytes " +
        "(goal: memory store throughput real/bare >= " +
        `${GOAL_RATIO}). Load average (1/5/15 min) before: ${loadBefore}, after: ${loadAverage()}.`,
      "",
      `Design: ${design}.`,
      "",
      "```",
      table,
      "```",
    ].join("\n");
    return { markdown, valid: errors === 0 };
  } finally {
    for (const connections of open) connections.close();
    await Promise.all(servers.map((s) => s.stop()));
    await probe?.close();
    await backends?.close();
  }
}

/** Runs settings.redisCountCalls calls of `scenario` while counting the Redis commands the server sends. */
async function countRedisCommands(
  probe: RedisProbe,
  target: Connections,
  scenario: Scenario,
  settings: Settings,
): Promise<{ calls: number; errors: number; commands: Record<string, number> }> {
  let calls = 0;
  let errors = 0;
  const commands = await probe.countSent(async () => {
    const load = await runLoad(target, scenario.path, scenario.requests, {
      concurrency: Math.max(...settings.concurrency),
      durationMs: COUNT_MAX_MS,
      callTimeoutMs: CALL_TIMEOUT_MS,
      maxCalls: settings.redisCountCalls,
    });
    calls = load.calls;
    errors = load.errors;
  });
  return { calls, errors, commands: Object.fromEntries(commands) };
}

function sumValues(record: Readonly<Record<string, number>>): number {
  return Object.values(record).reduce((total, n) => total + n, 0);
}

/** A bound on the whole unary run: past it something is stuck. */
export function unaryBudgetMs(settings: Settings): number {
  const servers = settings.stores.length + 1;
  const perDriverMs =
    servers * (settings.warmupSeconds + settings.rounds * settings.seconds) * 1000 +
    2 * servers * (settings.rounds + 1) * PAUSE_BETWEEN_MS;
  return (
    2 *
      (settings.scenarios.length *
        settings.concurrency.length *
        settings.drivers.length *
        perDriverMs) +
    2 * settings.scenarios.length * servers * settings.firstWarmupSeconds * 1000 +
    settings.scenarios.length * (COUNT_MAX_MS + 10_000) +
    2 * (servers + 1) * SERVER_START_TIMEOUT_MS +
    60_000
  );
}
