import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { H2LOAD_MISSING, h2loadAvailable, rpcFailures, runH2load } from "./h2load.js";
import { callOnce } from "./load.js";
import { UsageError } from "./options.js";
import { type BenchRedis, startBenchRedis } from "./redis-server.js";
import { ADD_PATH, addRequests, GET_PATH, getRequest, getSeedRequests } from "./scenarios.js";
import { type ServerProcess, serveArgs, startServerProcess } from "./server-process.js";

/**
 * Two builds of the server, side by side, on one workload: for a change
 * whose effect is smaller than this machine's drift between runs (the same
 * build's CPU per call moves by 10-30 % from one minute to the next on the
 * shared 2-core VM). Both servers run at once, each on its own store, and
 * take short h2load bursts in turn, so any drift falls on both alike; the
 * figure is each build's server CPU per call over all its bursts, and how
 * many of the paired bursts the head build was cheaper in; on Redis, also
 * redis-server's CPU per call; and the calls each build answered, which
 * compare throughput, since both take bursts of the same length in turn.
 *
 *   npm run build && node dist/bench/compare-builds.js --base-ref REF \
 *     [--store memory|redis] [--call add|get] [--bursts 12] [--burst-seconds 3]
 *
 * The head is this checkout's build (dist/); the base is REF (a commit, tag
 * or branch) built into a temporary git worktree that shares this
 * checkout's node_modules, removed afterwards. Add sends one body (h2load
 * cannot vary it), so it writes one thread; Get reads the Get scenario's
 * seeded thread (bench/scenarios.ts).
 */

const CALL_TIMEOUT_MS = 10_000;
const START_TIMEOUT_MS = 30_000;
/** Calls in flight and connections, as the unary bench's h2load rows. */
const CONCURRENCY = 64;
const CONNECTIONS = 4;
const WARM_UP_MS = 5_000;

export interface CompareOptions {
  readonly baseRef: string;
  readonly store: "memory" | "redis";
  readonly call: "add" | "get";
  readonly bursts: number;
  readonly burstMs: number;
}

function positiveInt(flag: string, value: string | undefined, max: number): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > max) {
    throw new UsageError(`${flag} must be a whole number from 1 to ${max} (got ${value})`);
  }
  return n;
}

export function parseCompareArgs(argv: readonly string[]): CompareOptions {
  const values = new Map<string, string>();
  for (let i = 0; i < argv.length; i += 2) {
    const flag = argv[i] as string;
    if (!["--base-ref", "--store", "--call", "--bursts", "--burst-seconds"].includes(flag)) {
      throw new UsageError(`unknown flag ${flag}`);
    }
    const value = argv[i + 1];
    if (value === undefined) throw new UsageError(`${flag} needs a value`);
    values.set(flag, value);
  }
  const baseRef = values.get("--base-ref");
  if (baseRef === undefined || baseRef === "") throw new UsageError("--base-ref is required");
  const store = values.get("--store") ?? "redis";
  if (store !== "memory" && store !== "redis") {
    throw new UsageError(`--store must be memory or redis (got ${store})`);
  }
  const call = values.get("--call") ?? "add";
  if (call !== "add" && call !== "get") {
    throw new UsageError(`--call must be add or get (got ${call})`);
  }
  return {
    baseRef,
    store,
    call,
    bursts: positiveInt("--bursts", values.get("--bursts") ?? "12", 1000),
    burstMs: positiveInt("--burst-seconds", values.get("--burst-seconds") ?? "3", 600) * 1000,
  };
}

/** Per build: CPU and calls summed over its bursts, and each burst's CPU per call. */
export interface BuildTotals {
  cpuMicros: number;
  /** redis-server's CPU over the same bursts; undefined on the memory store. */
  storeCpuMicros?: number;
  calls: number;
  failed: number;
  readonly perBurst: number[];
}

export interface Comparison {
  readonly base: BuildTotals;
  readonly head: BuildTotals;
  /** Pairs of bursts (one each, in turn) in which head cost less CPU per call than base. */
  readonly headCheaper: number;
}

export function summarize(c: Comparison): string {
  if (c.base.calls === 0 || c.head.calls === 0) {
    return `no call succeeded (base ${c.base.failed} failed, head ${c.head.failed} failed): nothing to compare`;
  }
  const perCall = (t: BuildTotals): number => t.cpuMicros / t.calls;
  const base = perCall(c.base);
  const head = perCall(c.head);
  const store = (t: BuildTotals): string =>
    t.storeCpuMicros === undefined
      ? ""
      : `, ${(t.storeCpuMicros / t.calls).toFixed(1)} µs redis-server CPU per call`;
  const lines = [
    `base: ${c.base.calls} calls, ${base.toFixed(1)} µs server CPU per call${store(c.base)}, ${c.base.failed} failed`,
    `head: ${c.head.calls} calls, ${head.toFixed(1)} µs server CPU per call${store(c.head)}, ${c.head.failed} failed`,
    `head/base: ${(head / base).toFixed(3)}; head cheaper in ${c.headCheaper} of ${c.head.perBurst.length} paired bursts` +
      (c.base.failed + c.head.failed > 0 ? " (calls failed: CPU per call is not comparable)" : ""),
    // Both builds take the same bursts in turn: their calls compare throughput.
    `calls head/base: ${(c.head.calls / c.base.calls).toFixed(3)}`,
    `bursts (µs per call, base/head): ${c.base.perBurst
      .map((b, i) => `${b.toFixed(0)}/${(c.head.perBurst[i] ?? Number.NaN).toFixed(0)}`)
      .join(" ")}`,
  ];
  return lines.join("\n");
}

/** A git worktree of `ref` with this checkout's node_modules, built; removed by the returned function. */
function buildWorktree(checkout: string, ref: string): { dir: string; remove(): void } {
  const parent = mkdtempSync(join(tmpdir(), "windlass-base-"));
  const dir = join(parent, "checkout");
  let added = false;
  const remove = (): void => {
    try {
      if (added) git(checkout, ["worktree", "remove", "--force", dir]);
    } catch {
      // Left registered if git could not remove it: prune forgets it once the directory is gone.
    }
    rmSync(parent, { recursive: true, force: true });
    if (added) {
      try {
        git(checkout, ["worktree", "prune"]);
      } catch {}
    }
  };
  try {
    git(checkout, ["worktree", "add", "--detach", dir, ref]);
    added = true;
    symlinkSync(join(checkout, "node_modules"), join(dir, "node_modules"), "dir");
    execFileSync(
      process.execPath,
      [join(checkout, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.json"],
      { cwd: dir, stdio: "inherit" },
    );
  } catch (err) {
    remove();
    throw err;
  }
  return { dir, remove };
}

/** Runs git; its error output is in the message when it fails. */
function git(cwd: string, args: readonly string[]): string {
  try {
    return execFileSync("git", ["-C", cwd, ...args], { encoding: "utf8", stdio: "pipe" });
  } catch (err) {
    const stderr = (err as { stderr?: string }).stderr?.trim() ?? "";
    throw new Error(`git ${args.join(" ")} failed${stderr === "" ? "" : `: ${stderr}`}`);
  }
}

/** Whether the base's package-lock.json differs from this checkout's: then it runs on head's packages. */
function lockfileDiffers(checkout: string, ref: string): boolean {
  try {
    git(checkout, ["diff", "--quiet", ref, "--", "package-lock.json"]);
    return false;
  } catch {
    return true;
  }
}

interface Side {
  readonly server: ServerProcess;
  readonly redis: BenchRedis | undefined;
  readonly redisDir: string | undefined;
  readonly totals: BuildTotals;
}

async function startSide(checkout: string, label: string, o: CompareOptions): Promise<Side> {
  const redisDir =
    o.store === "redis" ? mkdtempSync(join(tmpdir(), "windlass-compare-redis-")) : undefined;
  let redis: BenchRedis | undefined;
  try {
    redis =
      redisDir === undefined
        ? undefined
        : await startBenchRedis(process.env.REDIS_SERVER || "redis-server", redisDir);
  } catch (err) {
    if (redisDir !== undefined) rmSync(redisDir, { recursive: true, force: true });
    throw err;
  }
  try {
    const server = await startServerProcess({
      label,
      script: join(checkout, "bin/windlass-memory.js"),
      args: serveArgs(redis?.url ?? "memory"),
      startTimeoutMs: START_TIMEOUT_MS,
    });
    return {
      server,
      redis,
      redisDir,
      totals: {
        cpuMicros: 0,
        ...(redis === undefined ? {} : { storeCpuMicros: 0 }),
        calls: 0,
        failed: 0,
        perBurst: [],
      },
    };
  } catch (err) {
    await redis?.stop();
    if (redisDir !== undefined) rmSync(redisDir, { recursive: true, force: true });
    throw err;
  }
}

async function stopSide(side: Side): Promise<void> {
  await side.server.stop();
  await side.redis?.stop();
  if (side.redisDir !== undefined) rmSync(side.redisDir, { recursive: true, force: true });
}

async function burst(side: Side, o: CompareOptions, durationMs: number): Promise<void> {
  const address = `127.0.0.1:${side.server.grpcPort}`;
  const [path, body] =
    o.call === "add" ? [ADD_PATH, addRequests(1)[0] as Buffer] : [GET_PATH, getRequest()];
  const httpPort = side.server.httpPort;
  if (httpPort === undefined)
    throw new Error(`compare-builds: ${side.server.label} printed no HTTP port`);
  const method = o.call === "add" ? "Add" : "Get";
  // A gRPC error is HTTP 200 to h2load: the server's own counts tell them.
  const failedBefore = await rpcFailures(httpPort, method);
  const before = side.server.cpuMicros();
  const storeBefore = side.redis?.cpuMicros();
  const run = await runH2load(address, path, body, {
    concurrency: CONCURRENCY,
    connections: CONNECTIONS,
    durationMs,
    callTimeoutMs: CALL_TIMEOUT_MS,
  });
  const after = side.server.cpuMicros();
  const storeAfter = side.redis?.cpuMicros();
  if (before === undefined || after === undefined) {
    throw new Error("compare-builds: no CPU times (it needs Linux's /proc)");
  }
  // h2load's "succeeded" holds the calls that failed with a gRPC status (HTTP 200).
  const grpcFailed = (await rpcFailures(httpPort, method)) - failedBefore;
  const calls = Math.max(0, run.load.calls - grpcFailed);
  side.totals.cpuMicros += after - before;
  if (side.totals.storeCpuMicros !== undefined) {
    if (storeBefore === undefined || storeAfter === undefined) {
      throw new Error("compare-builds: no CPU times for redis-server (it needs Linux's /proc)");
    }
    side.totals.storeCpuMicros += storeAfter - storeBefore;
  }
  side.totals.calls += calls;
  side.totals.failed += run.load.errors + grpcFailed;
  side.totals.perBurst.push(calls === 0 ? Number.NaN : (after - before) / calls);
}

export async function compareBuilds(o: CompareOptions, checkout: string): Promise<Comparison> {
  if (!h2loadAvailable()) throw new UsageError(H2LOAD_MISSING);
  if (!existsSync(join(checkout, "dist/src/main.js"))) {
    throw new UsageError("this checkout has no build: run npm run build first");
  }
  const worktree = buildWorktree(checkout, o.baseRef);
  const sides: Side[] = [];
  // A signal would end the process without the finally below: clean up, then exit.
  const onSignal = (signal: NodeJS.Signals): void => {
    void Promise.allSettled(sides.map(stopSide)).then(() => {
      worktree.remove();
      process.exit(signal === "SIGINT" ? 130 : 143);
    });
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    sides.push(await startSide(worktree.dir, "base", o));
    sides.push(await startSide(checkout, "head", o));
    const [base, head] = sides as [Side, Side];
    for (const side of sides) {
      if (o.call === "get") {
        const address = `127.0.0.1:${side.server.grpcPort}`;
        for (const seed of getSeedRequests()) {
          await callOnce(address, ADD_PATH, seed, CALL_TIMEOUT_MS);
        }
      }
      await burst(side, o, WARM_UP_MS);
      side.totals.cpuMicros = 0;
      if (side.totals.storeCpuMicros !== undefined) side.totals.storeCpuMicros = 0;
      side.totals.calls = 0;
      side.totals.failed = 0;
      side.totals.perBurst.length = 0;
    }
    let headCheaper = 0;
    for (let i = 0; i < o.bursts; i++) {
      // Base first in even pairs, head first in odd ones: a drift within a
      // pair does not always fall on the same build.
      const order = i % 2 === 0 ? [base, head] : [head, base];
      for (const side of order) await burst(side, o, o.burstMs);
      if ((head.totals.perBurst[i] as number) < (base.totals.perBurst[i] as number)) headCheaper++;
    }
    return { base: base.totals, head: head.totals, headCheaper };
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    for (const side of sides) await stopSide(side);
    worktree.remove();
  }
}

async function main(): Promise<void> {
  const options = parseCompareArgs(process.argv.slice(2));
  const checkout = resolve(fileURLToPath(import.meta.url), "../../..");
  process.stdout.write(
    `compare-builds: ${options.call} on ${options.store}, base ${options.baseRef} against this checkout, ` +
      `${options.bursts} bursts of ${options.burstMs / 1000} s each (h2load, ${CONCURRENCY} in flight)\n`,
  );
  try {
    git(checkout, ["rev-parse", "--verify", "--quiet", `${options.baseRef}^{commit}`]);
  } catch {
    throw new UsageError(`--base-ref ${options.baseRef} is not a commit of this repository`);
  }
  if (lockfileDiffers(checkout, options.baseRef)) {
    process.stdout.write(
      `note: ${options.baseRef}'s package-lock.json differs from this checkout's; the base is built and run with this checkout's node_modules\n`,
    );
  }
  process.stdout.write(`${summarize(await compareBuilds(options, checkout))}\n`);
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err: unknown) => {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = err instanceof UsageError ? 2 : 1;
  });
}
