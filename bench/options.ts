/**
 * The command line of `npm run bench -- [flags]`: which scenarios run, whether
 * at the quick size, and the sizes of each scenario. Every size has a full
 * value and a `--quick` value; a flag given on the command line wins over both.
 */

export const SCENARIO_NAMES = [
  "unary",
  "thread-length",
  "fork",
  "memory",
  "watch",
  "read-path",
  "peer",
  "durable-writes",
  "cluster-add",
] as const;
export type ScenarioName = (typeof SCENARIO_NAMES)[number];

export class UsageError extends Error {}

interface SizeFlag {
  readonly full: number;
  readonly quick: number;
  readonly min: number;
  readonly max: number;
  readonly help: string;
}

/** Every numeric flag, by name (`--long-messages 100000`). */
export const SIZE_FLAGS = {
  // thread-length
  "long-messages": {
    full: 100_000,
    quick: 100_000,
    min: 100,
    max: 100_000,
    help: "thread-length: messages in the long thread (max_stored's upper bound is 100,000)",
  },
  "short-messages": {
    full: 100,
    quick: 100,
    min: 20,
    max: 100_000,
    help: "thread-length: messages in the short thread",
  },
  seconds: {
    full: 3,
    quick: 1,
    min: 0.2,
    max: 600,
    help: "thread-length: length of one timed run",
  },
  rounds: {
    full: 3,
    quick: 1,
    min: 1,
    max: 20,
    help: "thread-length: timed runs per thread, store and call, long and short taking turns",
  },
  concurrency: {
    full: 1,
    quick: 1,
    min: 1,
    max: 256,
    help: "thread-length: calls in flight (1: each call alone, so latency is the call's own)",
  },
  // fork (also: long-messages, short-messages, seconds, rounds, concurrency)
  forks: {
    full: 300,
    quick: 60,
    min: 2,
    max: 10_000,
    help: "fork: Forks per parent and round (each then read and written once)",
  },
  // memory
  messages: {
    full: 1_000_000,
    quick: 100_000,
    min: 10_000,
    max: 5_000_000,
    help: "memory: messages stored (200-byte contents, 10,000 per thread)",
  },
  "sqlite-cache-mb": {
    full: 256,
    quick: 256,
    min: 1,
    max: 4_096,
    help: "memory: the SQLite server's --sqlite-cache-mb (the budget of its caches)",
  },
  // watch
  watchers: {
    full: 1_000,
    quick: 1_000,
    min: 1,
    max: 10_000,
    help: "watch: watchers of the one thread",
  },
  folds: {
    full: 20,
    quick: 5,
    min: 1,
    max: 1_000,
    help: "watch: folds whose SummaryUpdated every watcher must receive",
  },
  "slow-watchers": {
    full: 100,
    quick: 100,
    min: 1,
    max: 1_000,
    help: "watch: watchers that never read",
  },
  "slow-events": {
    full: 20_000,
    quick: 20_000,
    min: 100,
    max: 1_000_000,
    help: "watch: events that pass while the slow watchers do not read",
  },
  // read-path
  agents: {
    full: 1_000,
    quick: 60,
    min: 1,
    max: 100_000,
    help: "read-path: agent threads",
  },
  turns: {
    full: 9,
    quick: 6,
    min: 1,
    max: 1_000,
    help: "read-path: turns per agent (Add user, Get, Add assistant)",
  },
  "agents-at-once": {
    full: 100,
    quick: 30,
    min: 1,
    max: 10_000,
    help: "read-path: agents running their turns at the same time",
  },
  "model-delay-ms": {
    full: 2_000,
    quick: 2_000,
    min: 1,
    max: 60_000,
    help: "read-path: how long the slow scripted model takes per fold",
  },
  // peer
  sessions: {
    full: 100,
    quick: 20,
    min: 1,
    max: 10_000,
    help: "peer: threads (sessions) written and read",
  },
  "session-messages": {
    full: 100,
    quick: 100,
    min: 1,
    max: 10_000,
    help: "peer: messages in each session before the timed runs",
  },
  "peer-ops": {
    full: 2_000,
    quick: 300,
    min: 10,
    max: 1_000_000,
    help: "peer: appends, then reads, per server",
  },
  "cluster-servers": {
    full: 3,
    quick: 2,
    min: 1,
    max: 8,
    help: "cluster-add: service processes sharing the store",
  },
  "cluster-concurrency": {
    full: 64,
    quick: 16,
    min: 1,
    max: 1024,
    help: "cluster-add: Add calls in flight, over all service processes",
  },
  "cluster-seconds": {
    full: 5,
    quick: 1,
    min: 0.2,
    max: 600,
    help: "cluster-add: length of one timed run",
  },
  "cluster-rounds": {
    full: 3,
    quick: 1,
    min: 1,
    max: 20,
    help: "cluster-add: timed runs per target, one Redis and the cluster taking turns",
  },
  "cluster-redis-cpu-percent": {
    full: 0,
    quick: 0,
    min: 0,
    max: 100,
    help: "cluster-add: cap each redis-server at this % of one core (a cgroup each, root); 0: no cap",
  },
  "peer-concurrency": {
    full: 8,
    quick: 8,
    min: 1,
    max: 256,
    help: "peer: calls in flight",
  },
} satisfies Record<string, SizeFlag>;

export type SizeName = keyof typeof SIZE_FLAGS;

export interface BenchOptions {
  readonly scenarios: readonly ScenarioName[];
  readonly quick: boolean;
  /** Stores for thread-length and memory, when given. */
  readonly stores: readonly string[] | undefined;
  /** RESULTS.md path, or undefined for --no-results. */
  readonly resultsFile: string | undefined;
  /** Appended to each scenario's section title in RESULTS.md. */
  readonly label: string | undefined;
  /** The sizes in force (command line, else quick or full defaults). */
  size(name: SizeName): number;
  /** The flags as given, to print the command. */
  readonly argv: readonly string[];
}

export function helpText(): string {
  const lines = [
    "Usage: npm run bench -- [--scenario NAME[,NAME…]|all] [--quick] [flags]",
    "",
    `Scenarios: ${SCENARIO_NAMES.join(", ")} (default: unary; all: every one, in this order)`,
    "  --quick            smaller sizes and shorter runs, to see that a scenario works",
    "  --stores LIST      thread-length: memory,sqlite,redis,postgres; fork: the same;",
    "                     memory: memory,sqlite,postgres;",
    "                     durable-writes: memory,sqlite,postgres (default: all of the scenario's)",
    "  --results FILE     where to write the results (default bench/RESULTS.md)",
    "  --no-results       print only",
    "  --label TEXT       appended to the scenario's section in the results file",
    "Sizes (full / --quick):",
  ];
  for (const [name, f] of Object.entries(SIZE_FLAGS) as [string, SizeFlag][]) {
    lines.push(`${`  --${name} N`.padEnd(22)}${f.help} (${f.full} / ${f.quick})`);
  }
  lines.push("The unary scenario also reads BENCH_* variables (see bench/unary.ts).");
  return lines.join("\n");
}

/** Parses the flags; throws UsageError with one line naming the flag. */
export function parseOptions(argv: readonly string[], defaultResultsFile: string): BenchOptions {
  let scenarios: readonly ScenarioName[] = ["unary"];
  let quick = false;
  let stores: string[] | undefined;
  let resultsFile: string | undefined = defaultResultsFile;
  let label: string | undefined;
  const sizes = new Map<SizeName, number>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? "";
    const eq = arg.indexOf("=");
    const name = arg.startsWith("--") ? (eq === -1 ? arg.slice(2) : arg.slice(2, eq)) : "";
    const inline = eq === -1 ? undefined : arg.slice(eq + 1);
    const value = (): string => {
      const v = inline ?? argv[++i];
      if (v === undefined || v === "") throw new UsageError(`--${name} needs a value`);
      return v;
    };
    switch (name) {
      case "quick":
        quick = true;
        break;
      case "no-results":
        resultsFile = undefined;
        break;
      case "results":
        resultsFile = value();
        break;
      case "label":
        label = value();
        break;
      case "stores":
        stores = value()
          .split(",")
          .map((s) => s.trim())
          .filter((s) => s !== "");
        break;
      case "scenario":
      case "scenarios": {
        const text = value();
        if (text === "all") {
          scenarios = SCENARIO_NAMES;
          break;
        }
        const wanted = text.split(",").map((s) => s.trim());
        for (const w of wanted) {
          if (!(SCENARIO_NAMES as readonly string[]).includes(w)) {
            throw new UsageError(
              `--scenario: "${w}" is not one of ${SCENARIO_NAMES.join(", ")}, all`,
            );
          }
        }
        scenarios = SCENARIO_NAMES.filter((s) => wanted.includes(s));
        break;
      }
      default: {
        if (!(name in SIZE_FLAGS)) {
          throw new UsageError(`unknown argument "${arg}" (see --help)`);
        }
        const flag: SizeFlag = SIZE_FLAGS[name as SizeName];
        const text = value();
        const n = Number(text);
        if (!Number.isFinite(n) || n < flag.min || n > flag.max) {
          throw new UsageError(
            `--${name}: "${text}" is not a number from ${flag.min} to ${flag.max}`,
          );
        }
        sizes.set(name as SizeName, n);
      }
    }
  }
  return {
    scenarios,
    quick,
    stores,
    resultsFile,
    label,
    argv,
    size(name) {
      const flag: SizeFlag = SIZE_FLAGS[name];
      return sizes.get(name) ?? (quick ? flag.quick : flag.full);
    },
  };
}

/** The stores a scenario runs on: --stores within `allowed`, else all of `allowed`. */
export function storesFor(options: BenchOptions, allowed: readonly string[]): string[] {
  if (options.stores === undefined) return [...allowed];
  for (const s of options.stores) {
    if (!allowed.includes(s)) {
      throw new UsageError(`--stores: "${s}" is not one of ${allowed.join(", ")}`);
    }
  }
  return allowed.filter((s) => options.stores?.includes(s));
}
