import { type ChildProcess, spawn } from "node:child_process";
import { mainThreadSchedMicros, processCpuMicros, type ThreadSchedMicros } from "./cpu-time.js";

/**
 * A server under test running in its own node process, so that on a small
 * machine the load driver and the server do not share one event loop and the
 * server's CPU time can be read on its own.
 */
export interface ServerProcess {
  readonly label: string;
  readonly pid: number;
  /** The gRPC port the server printed. */
  readonly grpcPort: number;
  /** The Connect (HTTP) port, when the server printed one. */
  readonly httpPort: number | undefined;
  /** User + system CPU time the process has used so far, in microseconds; undefined without /proc. */
  cpuMicros(): number | undefined;
  /** Its main thread's (the event loop's) time on a CPU and waiting for one so far; undefined without /proc. */
  mainThreadSched(): ThreadSchedMicros | undefined;
  /** The last few KB the process wrote to stderr (e.g. the inspector's URL). */
  stderrText(): string;
  /** SIGTERM, then SIGKILL if it has not exited within `graceMs`. */
  stop(graceMs?: number): Promise<void>;
}

export interface StartServerProcessOptions {
  readonly label: string;
  /** Options for node itself (e.g. --cpu-prof), the script it runs, and its arguments. */
  readonly nodeArgs?: readonly string[];
  readonly script: string;
  readonly args: readonly string[];
  /** How long to wait for the "listening" line. */
  readonly startTimeoutMs: number;
}

// Both servers print a line holding "gRPC <host>:<port>" once bound.
/**
 * The bench measures the server's capacity, not the limits that protect a
 * shared node: no per-namespace rate limit, quotas or watcher cap (README "Security model").
 */
export const UNLIMITED_SERVE_FLAGS: readonly string[] = [
  "--rate-limit-rps",
  "0",
  "--max-threads-per-namespace",
  "0",
  "--max-messages-per-namespace",
  "0",
  "--max-bytes-per-namespace",
  "0",
  "--max-watchers-per-namespace",
  "0",
];

/** `serve` on free ports of 127.0.0.1 over `store`, unlimited, with `more` flags after. */
export function serveArgs(store: string, more: readonly string[] = []): string[] {
  return [
    "serve",
    ...UNLIMITED_SERVE_FLAGS,
    "--port",
    "0",
    "--http-port",
    "0",
    "--store",
    store,
    ...more,
  ];
}

const LISTENING = /gRPC \S+:(\d+)\b/;
const HTTP_LISTENING = /http:\/\/\S+:(\d+)\b/;
const STDERR_TAIL_BYTES = 4096;

const live = new Set<ChildProcess>();
// Last resort: a child must never outlive the bench, whatever ended it.
process.on("exit", () => {
  for (const child of live) child.kill("SIGKILL");
});

/** Spawns `node script args…` and resolves once it has printed its gRPC port. */
export function startServerProcess(options: StartServerProcessOptions): Promise<ServerProcess> {
  const child = spawn(
    process.execPath,
    [...(options.nodeArgs ?? []), options.script, ...options.args],
    { stdio: ["ignore", "pipe", "pipe"], env: benchChildEnv() },
  );
  live.add(child);
  const exited = new Promise<void>((resolve) => {
    child.once("exit", () => {
      live.delete(child);
      resolve();
    });
  });
  // Kept (bounded) for the error message if the server dies; reading it also
  // keeps the pipe from filling up and blocking the child.
  let stderrTail = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (chunk: string) => {
    stderrTail = (stderrTail + chunk).slice(-STDERR_TAIL_BYTES);
  });

  const stop = async (graceMs = 8_000): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGTERM");
    if (await settlesWithin(exited, graceMs)) return;
    child.kill("SIGKILL");
    await settlesWithin(exited, 2_000);
  };

  return new Promise<ServerProcess>((resolve, reject) => {
    let stdout = "";
    let settled = false;
    const fail = (why: string): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      void stop(1_000).then(() =>
        reject(new Error(`${options.label}: ${why}\n--- stderr ---\n${stderrTail}`)),
      );
    };
    const timer = setTimeout(
      () => fail(`no "listening" line within ${options.startTimeoutMs} ms`),
      options.startTimeoutMs,
    );
    child.once("error", (err) => fail(`could not start: ${err.message}`));
    const onEarlyExit = (code: number | null, signal: NodeJS.Signals | null): void =>
      fail(`exited before listening (${code ?? signal})`);
    child.once("exit", onEarlyExit);
    child.stdout.setEncoding("utf8");
    const onData = (chunk: string): void => {
      stdout = (stdout + chunk).slice(-STDERR_TAIL_BYTES);
      const match = LISTENING.exec(stdout);
      const pid = child.pid;
      if (match?.[1] === undefined || pid === undefined || settled) return;
      settled = true;
      clearTimeout(timer);
      child.off("exit", onEarlyExit);
      child.stdout.off("data", onData);
      child.stdout.resume();
      resolve({
        label: options.label,
        pid,
        grpcPort: Number(match[1]),
        httpPort: ((http) => (http?.[1] === undefined ? undefined : Number(http[1])))(
          HTTP_LISTENING.exec(stdout),
        ),
        cpuMicros: () => processCpuMicros(pid),
        mainThreadSched: () => mainThreadSchedMicros(pid),
        stderrText: () => stderrTail,
        stop,
      });
    };
    child.stdout.on("data", onData);
  });
}

/**
 * The environment of a server under test: ours without WINDLASS_* settings,
 * so both servers run with the documented defaults whatever the caller's
 * shell has set (the brief's `loadConfig([...], {})`).
 */
function benchChildEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith("WINDLASS_")) env[key] = value;
  }
  return env;
}

/** Whether `promise` settles within `ms`. */
export async function settlesWithin(promise: Promise<void>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([promise.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
