import { callOnce, type LoadResult, openConnections, quantile, runLoad } from "./load.js";
import { storesFor } from "./options.js";
import { mib, residentBytes } from "./process-memory.js";
import type { ScenarioOutcome } from "./results.js";
import type { ScenarioContext } from "./run.js";
import {
  ADD_PATH,
  addRequests,
  GET_PATH,
  GET_SEED_MESSAGES,
  getRequest,
  getSeedRequests,
} from "./scenarios.js";
import { serveArgs, startServerProcess } from "./server-process.js";
import { type BenchPostgres, openStoreBackends, type StoreKind } from "./stores.js";

/**
 * Durable writes: does an Add that is on disk before it is answered keep
 * up, and does it stall reads? One server per store (memory, SQLite,
 * Postgres; `--stores` picks some), each measured the same way:
 * - Add at ADD_CONCURRENCY calls in flight (one ~100-byte message to one of
 *   ADD_CONCURRENCY threads each): throughput. Goals: SQLite >= 0.6 x
 *   memory; Postgres (group commit) >= 0.5 x memory.
 * - Get (window 20 of 200) at GET_CONCURRENCY calls in flight, alone and
 *   while that Add load runs on other connections: p99. Goal on SQLite:
 *   loaded p99 <= 1.5 x alone.
 * The servers run side by side (idle when not measured) and take turns,
 * round by round, `--rounds` of `--seconds` each. Each server's resident
 * set is read every RSS_SAMPLE_MS over its whole run (and, on Postgres,
 * the Pss of PostgreSQL's processes): what the store holds as it grows.
 */

const ADD_CONCURRENCY = 64;
const GET_CONCURRENCY = 4;
const CALL_TIMEOUT_MS = 30_000;
const START_TIMEOUT_MS = 20_000;
const ADD_GOALS: Partial<Record<StoreKind, number>> = { sqlite: 0.6, postgres: 0.5 };
const GET_GOAL = 1.5;
const STORES: readonly StoreKind[] = ["memory", "sqlite", "postgres"];
const RSS_SAMPLE_MS = 250;
const STORE_NAMES: Record<StoreKind, string> = {
  memory: "memory",
  sqlite: "SQLite",
  redis: "Redis",
  postgres: "Postgres",
  "redis-cluster": "Redis Cluster",
};

interface Measured {
  store: StoreKind;
  addCalls: number;
  addElapsedMs: number;
  addErrors: number;
  getAlone: number[];
  getLoaded: number[];
  getErrors: number;
  firstError: string | undefined;
  /** The server's RSS after the warm-up, its peak and its last reading, bytes. */
  rss: Span | undefined;
  /** PostgreSQL's processes (Pss summed), on the postgres store. */
  database: Span | undefined;
}

interface Span {
  first: number;
  peak: number;
  last: number;
}

function note(span: Span | undefined, bytes: number | undefined): Span | undefined {
  if (bytes === undefined) return span;
  if (span === undefined) return { first: bytes, peak: bytes, last: bytes };
  span.peak = Math.max(span.peak, bytes);
  span.last = bytes;
  return span;
}

const rate = (calls: number, ms: number): number => (ms > 0 ? (calls * 1000) / ms : 0);
const p = (values: number[], q: number): number => quantile(Float64Array.from(values).sort(), q);

interface Running {
  readonly m: Measured;
  round(round: number): Promise<void>;
  stop(): Promise<void>;
}

/** Starts a server on `store`, seeds the Get thread and warms both calls up. */
async function start(
  ctx: ScenarioContext,
  store: StoreKind,
  flag: string,
  postgres: BenchPostgres | undefined,
): Promise<Running> {
  const o = ctx.options;
  const server = await startServerProcess({
    label: `windlass (${store} store)`,
    script: `${ctx.root}bin/windlass-memory.js`,
    args: serveArgs(flag, ["--log-level", "warn"]),
    startTimeoutMs: START_TIMEOUT_MS,
  });
  const address = `127.0.0.1:${server.grpcPort}`;
  const addConnections = openConnections("h2", address, 4);
  const getConnections = openConnections("h2", address, 1);
  let sampler: NodeJS.Timeout | undefined;
  const stop = async (): Promise<void> => {
    clearInterval(sampler);
    addConnections.close();
    getConnections.close();
    await server.stop();
  };
  const m: Measured = {
    store,
    addCalls: 0,
    addElapsedMs: 0,
    addErrors: 0,
    getAlone: [],
    getLoaded: [],
    getErrors: 0,
    firstError: undefined,
    rss: undefined,
    database: undefined,
  };
  const noteError = (r: LoadResult): void => {
    m.firstError ??= r.firstError;
  };
  const adds = addRequests(ADD_CONCURRENCY);
  const gets = [getRequest()];
  const durationMs = o.size("seconds") * 1000;
  const load = (
    target: typeof addConnections,
    path: string,
    req: Buffer[],
    n: number,
    ms = durationMs,
  ) =>
    runLoad(target, path, req, { concurrency: n, durationMs: ms, callTimeoutMs: CALL_TIMEOUT_MS });
  try {
    for (const seed of getSeedRequests()) await callOnce(address, ADD_PATH, seed, CALL_TIMEOUT_MS);
    // Warm-up, not timed.
    await load(addConnections, ADD_PATH, adds, ADD_CONCURRENCY, Math.min(500, durationMs));
    await load(getConnections, GET_PATH, gets, GET_CONCURRENCY, Math.min(500, durationMs));
  } catch (err) {
    await stop();
    throw err;
  }
  const sample = (): void => {
    m.rss = note(m.rss, residentBytes(server.pid));
    if (postgres !== undefined) m.database = note(m.database, postgres.memoryBytes());
  };
  sample();
  sampler = setInterval(sample, RSS_SAMPLE_MS);
  sampler.unref();
  return {
    m,
    stop,
    async round(round: number) {
      const alone = await load(getConnections, GET_PATH, gets, GET_CONCURRENCY);
      noteError(alone);
      m.getErrors += alone.errors;
      for (const l of alone.latenciesMs) m.getAlone.push(l);
      const [add, loaded] = await Promise.all([
        load(addConnections, ADD_PATH, adds, ADD_CONCURRENCY),
        load(getConnections, GET_PATH, gets, GET_CONCURRENCY),
      ]);
      noteError(add);
      noteError(loaded);
      m.addCalls += add.calls;
      m.addElapsedMs += add.elapsedMs;
      m.addErrors += add.errors;
      m.getErrors += loaded.errors;
      for (const l of loaded.latenciesMs) m.getLoaded.push(l);
      process.stdout.write(
        `measured  ${store} round ${round + 1}: Add ${rate(add.calls, add.elapsedMs).toFixed(0)}/s ` +
          `(${ADD_CONCURRENCY} in flight); Get p99 alone ${p([...alone.latenciesMs], 0.99).toFixed(3)} ms, ` +
          `with Adds ${p([...loaded.latenciesMs], 0.99).toFixed(3)} ms\n`,
      );
    },
  };
}

async function run(ctx: ScenarioContext): Promise<ScenarioOutcome> {
  const stores = storesFor(ctx.options, STORES) as StoreKind[];
  const backends = await openStoreBackends(stores, ctx.redisServer);
  const o = ctx.options;
  const running: Running[] = [];
  try {
    for (const store of stores) {
      const postgres = store === "postgres" ? backends.postgres : undefined;
      running.push(await start(ctx, store, backends.storeFlag(store), postgres));
    }
    // Stores take turns round by round (the order flips each round), so a
    // change in the machine's load falls on all alike.
    for (let round = 0; round < o.size("rounds"); round++) {
      const order = round % 2 === 0 ? running : [...running].reverse();
      for (const r of order) await r.round(round);
    }
  } finally {
    for (const r of running) await r.stop();
    await backends.close();
  }
  const measured = running.map((r) => r.m);
  const lines = [
    `Add (one ~100-byte message) at ${ADD_CONCURRENCY} calls in flight over 4 h2 connections, ` +
      `${ADD_CONCURRENCY} threads; Get (window 20 of 200) at ${GET_CONCURRENCY} in flight on its own ` +
      `connection, alone and while the Adds run; ${o.size("rounds")} x ${o.size("seconds")} s each; ` +
      "the servers run side by side and take turns round by round. Client and servers share the machine. " +
      "SQLite: WAL, synchronous=FULL; Postgres: a PostgreSQL started by the bench (fsync on, " +
      "synchronous_commit on, shared_buffers 32MB), the server's default --postgres-pool-size 10. " +
      `Goals: ${goalText()}; SQLite Get p99 with Adds <= ${GET_GOAL} x alone.`,
    "",
    "| store | Add calls/s | Add / memory | Add errors | Get p50 alone ms | Get p99 alone ms | Get p50 with Adds ms | Get p99 with Adds ms | Get p99 with/alone | Get errors |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ];
  const memory = measured.find((m) => m.store === "memory");
  const addRate = (m: Measured): number => rate(m.addCalls, m.addElapsedMs);
  const overMemory = (m: Measured): number | undefined =>
    memory === undefined ? undefined : addRate(m) / addRate(memory);
  for (const m of measured) {
    lines.push(
      `| ${m.store} | ${addRate(m).toFixed(0)} | ${overMemory(m)?.toFixed(2) ?? "n/a"} | ${m.addErrors} | ` +
        `${p(m.getAlone, 0.5).toFixed(3)} | ${p(m.getAlone, 0.99).toFixed(3)} | ` +
        `${p(m.getLoaded, 0.5).toFixed(3)} | ${p(m.getLoaded, 0.99).toFixed(3)} | ` +
        `${(p(m.getLoaded, 0.99) / p(m.getAlone, 0.99)).toFixed(2)} | ${m.getErrors} |`,
    );
  }
  lines.push("", ...memoryLines(measured), "", ...goalLines(measured, overMemory));
  const errors = measured.reduce((n, m) => n + m.addErrors + m.getErrors, 0);
  if (errors > 0) lines.push("", `First error: ${measured.find((m) => m.firstError)?.firstError}`);
  return { markdown: lines.join("\n"), valid: errors === 0 };
}

function goalText(): string {
  return Object.entries(ADD_GOALS)
    .map(([store, goal]) => `${STORE_NAMES[store as StoreKind]} Add >= ${goal} x memory Add`)
    .join("; ");
}

/** Each server's resident set over its run, and PostgreSQL's beside the Postgres one. */
function memoryLines(measured: readonly Measured[]): string[] {
  const span = (s: Span | undefined): string =>
    s === undefined
      ? "n/a"
      : `${mib(s.first)} after the warm-up, peak ${mib(s.peak)}, last ${mib(s.last)} MiB`;
  const stored = (m: Measured): number => m.addCalls + GET_SEED_MESSAGES;
  return [
    `Resident memory over each server's run (read every ${RSS_SAMPLE_MS} ms, no forced collection), ` +
      "with the messages it stored (timed Adds plus the Get thread's; warm-up Adds not counted):",
    "",
    ...measured.flatMap((m) => [
      `- ${m.store} server: ${span(m.rss)}; ${stored(m)} messages stored`,
      ...(m.database === undefined
        ? []
        : [`- PostgreSQL's processes (postmaster and backends, Pss summed): ${span(m.database)}`]),
    ]),
  ];
}

function goalLines(
  measured: readonly Measured[],
  overMemory: (m: Measured) => number | undefined,
): string[] {
  const out = ["| goal | measured | verdict |", "| --- | ---: | --- |"];
  for (const m of measured) {
    const goal = ADD_GOALS[m.store];
    const ratio = overMemory(m);
    if (goal === undefined || ratio === undefined) continue;
    out.push(
      `| ${STORE_NAMES[m.store]} Add / memory Add >= ${goal} | ${ratio.toFixed(2)} | ${ratio >= goal ? "meets" : "**misses**"} |`,
    );
  }
  const sqlite = measured.find((m) => m.store === "sqlite");
  if (sqlite !== undefined) {
    const getRatio = p(sqlite.getLoaded, 0.99) / p(sqlite.getAlone, 0.99);
    out.push(
      `| SQLite Get p99 with Adds / alone <= ${GET_GOAL} | ${getRatio.toFixed(2)} | ${getRatio <= GET_GOAL ? "meets" : "**misses**"} |`,
    );
  }
  return out;
}

export const durableWritesScenario = {
  title:
    "durable-writes: SQLite and Postgres Add at 64 in flight vs memory, and Get p99 under that write load",
  budgetMs(ctx: ScenarioContext): number {
    const o = ctx.options;
    const timed = o.size("rounds") * (2 * o.size("seconds") * 1000 + 2 * CALL_TIMEOUT_MS);
    return storesFor(o, STORES).length * (timed + 2 * START_TIMEOUT_MS + 60_000);
  },
  usesPostgres: (ctx: ScenarioContext): boolean =>
    storesFor(ctx.options, STORES).includes("postgres"),
  run,
};
