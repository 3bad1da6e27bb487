import { callOnce, type LoadResult, openConnections, quantile, runLoad } from "./load.js";
import type { ScenarioOutcome } from "./results.js";
import type { ScenarioContext } from "./run.js";
import { ADD_PATH, addRequests, GET_PATH, getRequest, getSeedRequests } from "./scenarios.js";
import { startServerProcess, UNLIMITED_SERVE_FLAGS } from "./server-process.js";
import { openStoreBackends, type StoreKind } from "./stores.js";

/**
 * SQLite writes: does a durable Add keep up, and does it stall reads? One
 * server per store (memory, then SQLite), each measured the same way:
 * - Add at ADD_CONCURRENCY calls in flight (one ~100-byte message to one of
 *   ADD_CONCURRENCY threads each): throughput. Goal: SQLite >= 0.6 x memory.
 * - Get (window 20 of 200) at GET_CONCURRENCY calls in flight, alone and
 *   while that Add load runs on other connections: p99. Goal on SQLite:
 *   loaded p99 <= 1.5 x alone.
 * Both servers run side by side (idle when not measured) and take turns,
 * round by round, `--rounds` of `--seconds` each.
 */

const ADD_CONCURRENCY = 64;
const GET_CONCURRENCY = 4;
const CALL_TIMEOUT_MS = 30_000;
const START_TIMEOUT_MS = 20_000;
const ADD_GOAL = 0.6;
const GET_GOAL = 1.5;
const STORES: readonly StoreKind[] = ["memory", "sqlite"];

interface Measured {
  store: StoreKind;
  addCalls: number;
  addElapsedMs: number;
  addErrors: number;
  getAlone: number[];
  getLoaded: number[];
  getErrors: number;
  firstError: string | undefined;
}

const rate = (calls: number, ms: number): number => (ms > 0 ? (calls * 1000) / ms : 0);
const p = (values: number[], q: number): number => quantile(Float64Array.from(values).sort(), q);

interface Running {
  readonly m: Measured;
  round(round: number): Promise<void>;
  stop(): Promise<void>;
}

/** Starts a server on `store`, seeds the Get thread and warms both calls up. */
async function start(ctx: ScenarioContext, store: StoreKind, flag: string): Promise<Running> {
  const o = ctx.options;
  const server = await startServerProcess({
    label: `windlass (${store} store)`,
    script: `${ctx.root}bin/windlass-memory.js`,
    args: [
      "serve",
      ...UNLIMITED_SERVE_FLAGS,
      "--port",
      "0",
      "--http-port",
      "0",
      "--store",
      flag,
      "--log-level",
      "warn",
    ],
    startTimeoutMs: START_TIMEOUT_MS,
  });
  const address = `127.0.0.1:${server.grpcPort}`;
  const addConnections = openConnections("h2", address, 4);
  const getConnections = openConnections("h2", address, 1);
  const stop = async (): Promise<void> => {
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
  };
  const note = (r: LoadResult): void => {
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
  return {
    m,
    stop,
    async round(round: number) {
      const alone = await load(getConnections, GET_PATH, gets, GET_CONCURRENCY);
      note(alone);
      m.getErrors += alone.errors;
      for (const l of alone.latenciesMs) m.getAlone.push(l);
      const [add, loaded] = await Promise.all([
        load(addConnections, ADD_PATH, adds, ADD_CONCURRENCY),
        load(getConnections, GET_PATH, gets, GET_CONCURRENCY),
      ]);
      note(add);
      note(loaded);
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
  const backends = await openStoreBackends(STORES, ctx.redisServer);
  const o = ctx.options;
  const running: Running[] = [];
  try {
    for (const store of STORES) running.push(await start(ctx, store, backends.storeFlag(store)));
    // Stores take turns round by round (the order flips each round), so a
    // change in the machine's load falls on both alike.
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
      "the two servers run side by side and take turns round by round. Client and server share the machine. Goals: SQLite Add >= " +
      `${ADD_GOAL} x memory Add; SQLite Get p99 with Adds <= ${GET_GOAL} x alone.`,
    "",
    "| store | Add calls/s | Add errors | Get p50 alone ms | Get p99 alone ms | Get p50 with Adds ms | Get p99 with Adds ms | Get p99 with/alone | Get errors |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ];
  for (const m of measured) {
    lines.push(
      `| ${m.store} | ${rate(m.addCalls, m.addElapsedMs).toFixed(0)} | ${m.addErrors} | ` +
        `${p(m.getAlone, 0.5).toFixed(3)} | ${p(m.getAlone, 0.99).toFixed(3)} | ` +
        `${p(m.getLoaded, 0.5).toFixed(3)} | ${p(m.getLoaded, 0.99).toFixed(3)} | ` +
        `${(p(m.getLoaded, 0.99) / p(m.getAlone, 0.99)).toFixed(2)} | ${m.getErrors} |`,
    );
  }
  const memory = measured.find((m) => m.store === "memory");
  const sqlite = measured.find((m) => m.store === "sqlite");
  if (memory !== undefined && sqlite !== undefined) {
    const addRatio =
      rate(sqlite.addCalls, sqlite.addElapsedMs) / rate(memory.addCalls, memory.addElapsedMs);
    const getRatio = p(sqlite.getLoaded, 0.99) / p(sqlite.getAlone, 0.99);
    lines.push(
      "",
      "| goal | measured | verdict |",
      "| --- | ---: | --- |",
      `| SQLite Add / memory Add >= ${ADD_GOAL} | ${addRatio.toFixed(2)} | ${addRatio >= ADD_GOAL ? "meets" : "**misses**"} |`,
      `| SQLite Get p99 with Adds / alone <= ${GET_GOAL} | ${getRatio.toFixed(2)} | ${getRatio <= GET_GOAL ? "meets" : "**misses**"} |`,
    );
  }
  const errors = measured.reduce((n, m) => n + m.addErrors + m.getErrors, 0);
  if (errors > 0) lines.push("", `First error: ${measured.find((m) => m.firstError)?.firstError}`);
  return { markdown: lines.join("\n"), valid: errors === 0 };
}

export const sqliteWritesScenario = {
  title: "sqlite-writes: SQLite Add at 64 in flight vs memory, and Get p99 under that write load",
  budgetMs(ctx: ScenarioContext): number {
    const o = ctx.options;
    const timed = o.size("rounds") * (2 * o.size("seconds") * 1000 + 2 * CALL_TIMEOUT_MS);
    return STORES.length * (timed + 2 * START_TIMEOUT_MS + 60_000);
  },
  run,
};
