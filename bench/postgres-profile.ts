import { fileURLToPath } from "node:url";
import { queryPostgres } from "../test/support/postgres-server.js";
import { callOnce, type LoadResult, openConnections, quantile, runLoad } from "./load.js";
import { UsageError } from "./options.js";
import { ADD_PATH, addRequests, GET_PATH, getRequest, getSeedRequests } from "./scenarios.js";
import { startServerProcess, UNLIMITED_SERVE_FLAGS } from "./server-process.js";
import { openStoreBackends } from "./stores.js";

/**
 * Where a Postgres call's time goes: one real server on the bench's
 * PostgreSQL, unary Add (or Get) at N in flight, and what PostgreSQL did
 * meanwhile: its statements by total execution time (pg_stat_statements),
 * its transactions (so the mean group size of the group commit), and the
 * CPU per call of the server and of PostgreSQL's processes. Not a scenario
 * of run.ts: a diagnostic, run as
 *
 *   node dist/bench/postgres-profile.js [Add|Get] [IN_FLIGHT] [SECONDS] [GETS] [-- serve flags…]
 *
 * e.g. `… Add 64 3 0 -- --postgres-pool-size 20`. GETS > 0 runs that many
 * Gets (window 20 of 200) in flight beside the timed calls, on a
 * connection of their own, as durable-writes does. BENCH_SERVER_NODE_ARGS
 * (as in unary.ts) passes node flags to the server, e.g. "--cpu-prof".
 */

const CALL_TIMEOUT_MS = 30_000;
const TOP_STATEMENTS = 12;

interface ProfileArgs {
  readonly call: "Add" | "Get";
  readonly inFlight: number;
  readonly seconds: number;
  readonly gets: number;
  readonly serveFlags: readonly string[];
}

/** The positional arguments, checked; throws UsageError naming the one that is wrong. */
function parseArgs(argv: readonly string[]): ProfileArgs {
  const dash = argv.indexOf("--");
  const [call = "Add", inFlightText = "64", secondsText = "3", getsText = "0"] =
    dash < 0 ? argv : argv.slice(0, dash);
  const gets = Number(getsText);
  const inFlight = Number(inFlightText);
  const seconds = Number(secondsText);
  if (call !== "Add" && call !== "Get") throw new UsageError(`call: "${call}" is not Add or Get`);
  if (!Number.isInteger(inFlight) || inFlight < 1 || inFlight > 1024) {
    throw new UsageError(`in flight: "${inFlightText}" is not a whole number from 1 to 1024`);
  }
  if (!Number.isInteger(gets) || gets < 0 || gets > 1024) {
    throw new UsageError(`gets: "${getsText}" is not a whole number from 0 to 1024`);
  }
  if (!Number.isFinite(seconds) || seconds < 0.5 || seconds > 600) {
    throw new UsageError(`seconds: "${secondsText}" is not a number from 0.5 to 600`);
  }
  return { call, inFlight, seconds, gets, serveFlags: dash < 0 ? [] : argv.slice(dash + 1) };
}

async function main(argv: readonly string[]): Promise<void> {
  const args = parseArgs(argv);
  const { call, inFlight, seconds, gets, serveFlags } = args;
  const root = fileURLToPath(new URL("../../", import.meta.url));
  const backends = await openStoreBackends(["postgres"], "redis-server");
  const postgres = backends.postgres;
  if (postgres === undefined) throw new Error("bench: no PostgreSQL");
  const server = await startServerProcess({
    label: "windlass (postgres store)",
    nodeArgs: (process.env.BENCH_SERVER_NODE_ARGS ?? "").split(/\s+/).filter((a) => a !== ""),
    script: `${root}bin/windlass-memory.js`,
    args: [
      "serve",
      ...UNLIMITED_SERVE_FLAGS,
      ...["--port", "0", "--http-port", "0", "--log-level", "warn"],
      ...["--store", postgres.url, ...serveFlags],
    ],
    startTimeoutMs: 20_000,
  });
  const address = `127.0.0.1:${server.grpcPort}`;
  const connections = openConnections("h2", address, 4);
  const getConnection = openConnections("h2", address, 1);
  try {
    for (const seed of getSeedRequests()) await callOnce(address, ADD_PATH, seed, CALL_TIMEOUT_MS);
    const [path, requests] =
      call === "Get" ? [GET_PATH, [getRequest()]] : [ADD_PATH, addRequests(inFlight)];
    const options = { concurrency: inFlight, callTimeoutMs: CALL_TIMEOUT_MS };
    await runLoad(connections, path, requests, { ...options, durationMs: 1_000 });
    await queryPostgres(postgres.url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    await queryPostgres(postgres.url, "SELECT pg_stat_statements_reset(), pg_stat_reset()");
    const serverBefore = server.cpuMicros() ?? 0;
    const databaseBefore = postgres.cpuMicros() ?? 0;
    const [load, beside] = await Promise.all([
      runLoad(connections, path, requests, { ...options, durationMs: seconds * 1000 }),
      gets === 0
        ? undefined
        : runLoad(getConnection, GET_PATH, [getRequest()], {
            concurrency: gets,
            callTimeoutMs: CALL_TIMEOUT_MS,
            durationMs: seconds * 1000,
          }),
    ]);
    const serverCpu = (server.cpuMicros() ?? 0) - serverBefore;
    const databaseCpu = (postgres.cpuMicros() ?? 0) - databaseBefore;
    await printReport(postgres.url, args, load, beside, {
      server: serverCpu,
      database: databaseCpu,
    });
  } finally {
    connections.close();
    getConnection.close();
    await server.stop();
    await backends.close();
  }
}

/** What PostgreSQL did meanwhile, and the calls' figures, on stdout. */
async function printReport(
  url: string,
  args: ProfileArgs,
  load: LoadResult,
  beside: LoadResult | undefined,
  cpuMicros: { server: number; database: number },
): Promise<void> {
  const latencies = Float64Array.from(load.latenciesMs).sort();
  const [stats] = await queryPostgres<{ xact_commit: string }>(
    url,
    "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
  );
  const statements = await queryPostgres<{ calls: string; ms: string; mean: string; q: string }>(
    url,
    `SELECT calls, round(total_exec_time::numeric, 1) AS ms, round(mean_exec_time::numeric, 3) AS mean,
       left(regexp_replace(query, '\\s+', ' ', 'g'), 100) AS q
     FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' ORDER BY total_exec_time DESC LIMIT $1`,
    [TOP_STATEMENTS],
  );
  const executed = statements.reduce((ms, s) => ms + Number(s.ms), 0);
  process.stdout.write(
    [
      `${args.call} at ${args.inFlight} in flight, ${args.seconds} s: ${load.calls} calls, ` +
        `${((load.calls * 1000) / load.elapsedMs).toFixed(0)}/s, p50 ${quantile(latencies, 0.5).toFixed(2)} ms, ` +
        `p99 ${quantile(latencies, 0.99).toFixed(2)} ms, ${load.errors} errors${load.firstError ? ` (${load.firstError})` : ""}`,
      ...(beside === undefined
        ? []
        : [
            `beside: ${beside.calls} Gets at ${args.gets} in flight, p50 ${quantile(Float64Array.from(beside.latenciesMs).sort(), 0.5).toFixed(2)} ms (their CPU is in the figures below)`,
          ]),
      `CPU per call: server ${(cpuMicros.server / load.calls).toFixed(0)} us, PostgreSQL's processes ${(cpuMicros.database / load.calls).toFixed(0)} us`,
      `transactions committed: ${stats?.xact_commit ?? "n/a"} (calls per transaction ${(load.calls / Number(stats?.xact_commit ?? Number.NaN)).toFixed(1)}, the stats queries included)`,
      `statements by total execution time (${executed.toFixed(0)} ms executing of ${load.elapsedMs.toFixed(0)} ms):`,
      "  calls   total ms  mean ms  statement",
      ...statements.map(
        (s) => `${s.calls.padStart(7)} ${s.ms.padStart(10)} ${s.mean.padStart(8)}  ${s.q}`,
      ),
      "",
    ].join("\n"),
  );
}

main(process.argv.slice(2)).catch((err: unknown) => {
  process.stderr.write(`postgres-profile: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = err instanceof UsageError ? 2 : 1;
});
