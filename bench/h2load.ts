import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ticksPerSecond } from "./cpu-time.js";
import { grpcFrame, type LoadResult } from "./load.js";

/**
 * The "h2load" driver: nghttp2's load generator (Debian's nghttp2-client), a
 * C program. It cost 8.8 µs of CPU per call in a run of its own here and
 * 13-16 µs in the recorded bench run, against 87-101 µs for the node:http2
 * driver ("h2", load.ts) in that run, so on this 2-core machine the driver
 * takes little CPU from the server it measures. In that bench run
 * (bench/RESULTS.md, "with the h2load driver beside h2") the bare grpc-js
 * server answered 13,644 Adds/s at 104 % of a core with h2load, against
 * 9,533 at 91 % with h2.
 *
 * What it cannot do, and what the bench does instead:
 * - It sends one request body on every call: its Add writes every message to
 *   one thread (the first of the Add scenario's threads), not round-robin.
 *   That thread reaches its max_stored (1,000 by default) within the first
 *   second and from then on every Add also trims one message, as on a long
 *   conversation; the in-process drivers' 300 threads never reach it. In
 *   the two recorded runs the real server's CPU per Add was higher under
 *   h2load than under h2: memory store +20 % and +7 %, Redis store +0.4 %
 *   and +21 %; so h2load's Add ratios are not the other drivers' workload.
 * - It reads HTTP statuses only, and a gRPC failure is an HTTP 200 whose
 *   trailer says grpc-status; the bench counts failures from the real
 *   server's windlass_rpc_requests_total by code (rpcFailures below). The
 *   bare server answers every call with the same bytes.
 * - A run that completed no call (nothing listening: h2load still exits 0)
 *   is an error, not a row of zeros.
 * Its CPU time is read from the /proc/PID/stat of the `sh` that waited for
 * it (cutime and cstime), so it is Linux-only, like the rest of the
 * bench's CPU figures.
 */

/** The h2load binary (environment H2LOAD, else h2load on PATH). */
export const H2LOAD = process.env.H2LOAD || "h2load";

export const H2LOAD_MISSING =
  `the h2load driver needs ${H2LOAD} (Debian: apt-get install nghttp2-client), ` +
  "or leave it out: BENCH_DRIVERS=grpc-js,h2";

let available: boolean | undefined;

/** Whether h2load runs (asked once: the bench reads its settings more than once). */
export function h2loadAvailable(): boolean {
  available ??= spawnSync(H2LOAD, ["--version"], { stdio: "ignore" }).status === 0;
  return available;
}

export interface H2loadOptions {
  /** Calls in flight: connections x streams per connection (must divide evenly). */
  readonly concurrency: number;
  readonly connections: number;
  readonly durationMs: number;
  /** Sent as grpc-timeout, as the other drivers do, so servers arm the same timers. */
  readonly callTimeoutMs: number;
}

export interface H2loadRun {
  readonly load: LoadResult;
  /** h2load's user + system CPU time, in microseconds. */
  readonly driverCpuMicros: number | undefined;
}

/** h2load's -c and -m for `concurrency` calls in flight over at most `connections`. */
export function h2loadSpread(
  concurrency: number,
  connections: number,
): { clients: number; streams: number } {
  const clients = Math.min(connections, concurrency);
  if (concurrency % clients !== 0) {
    throw new Error(
      `h2load driver: ${concurrency} calls in flight do not divide over ${clients} connections`,
    );
  }
  return { clients, streams: concurrency / clients };
}

/** Runs `request` on `path` of `address` ("host:port") for the duration, closed loop. */
export async function runH2load(
  address: string,
  path: string,
  request: Buffer,
  options: H2loadOptions,
): Promise<H2loadRun> {
  const dir = mkdtempSync(join(tmpdir(), "windlass-h2load-"));
  try {
    const body = join(dir, "request");
    const log = join(dir, "log");
    writeFileSync(body, grpcFrame(request));
    const { clients, streams } = h2loadSpread(options.concurrency, options.connections);
    const args = [
      "-c",
      String(clients),
      "-m",
      String(streams),
      "-D",
      `${Math.max(1, Math.round(options.durationMs))}ms`,
      `--log-file=${log}`,
      "-H",
      "content-type: application/grpc",
      "-H",
      "te: trailers",
      "-H",
      `grpc-timeout: ${options.callTimeoutMs}m`,
      "-d",
      body,
      `http://${address}${path}`,
    ];
    // Past its duration and one call timeout h2load is stuck: it is killed.
    const { stdout, code } = await runWithChildCpu(
      args,
      options.durationMs + options.callTimeoutMs + 10_000,
    );
    if (code !== 0) {
      throw new Error(`${H2LOAD} exited with ${code}: ${stdout.slice(-500)}`);
    }
    const report = parseH2loadReport(stdout, ticksPerSecond());
    if (report.succeeded + report.failed === 0) {
      throw new Error(`${H2LOAD} completed no call: ${stdout.slice(-500)}`);
    }
    return {
      load: {
        calls: report.succeeded,
        errors: report.failed,
        firstError: report.failed > 0 ? `${report.failed} calls failed (h2load)` : undefined,
        elapsedMs: report.elapsedMs,
        latenciesMs: successLatencies(readFileSync(log, "utf8")),
      },
      driverCpuMicros: report.childCpuMicros,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Runs h2load under `sh`, which prints its own /proc stat once h2load has exited. */
function runWithChildCpu(
  args: readonly string[],
  limitMs: number,
): Promise<{ stdout: string; code: number }> {
  return new Promise((resolve, reject) => {
    // Its own process group, so that the kill below reaches h2load as well as sh.
    const child = spawn(
      "sh",
      ["-c", '"$0" "$@"; status=$?; echo; cat /proc/$$/stat; exit $status', H2LOAD, ...args],
      { stdio: ["ignore", "pipe", "inherit"], detached: true },
    );
    const timer = setTimeout(() => {
      if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
    }, limitMs);
    let stdout = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk: string) => {
      // Bounded: h2load prints a few KB; keep the end, which holds the report.
      stdout = (stdout + chunk).slice(-64 * 1024);
    });
    child.on("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ stdout, code: code ?? -1 });
    });
  });
}

export interface H2loadReport {
  /** Calls answered 2xx. */
  readonly succeeded: number;
  /**
   * h2load's "failed" (which already holds its "errored", its timeouts and
   * the 4xx and 5xx answers), and the 3xx answers, which h2load counts as
   * succeeded and no gRPC server sends.
   */
  readonly failed: number;
  readonly elapsedMs: number;
  readonly childCpuMicros: number | undefined;
}

const UNIT_MS: Record<string, number> = { us: 0.001, ms: 1, s: 1000 };

/** Reads h2load's summary and the waiting shell's stat line (see runWithChildCpu). */
export function parseH2loadReport(stdout: string, ticksPerSecond: number): H2loadReport {
  const finished = /finished in ([0-9.]+)(us|ms|s),/.exec(stdout);
  const requests =
    /requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/.exec(
      stdout,
    );
  const statuses = /status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/.exec(stdout);
  if (finished === null || requests === null || statuses === null) {
    throw new Error(`h2load printed no summary: ${stdout.slice(-500)}`);
  }
  const n = (text: string | undefined): number => Number(text ?? Number.NaN);
  const redirects = n(statuses[2]);
  const stat = stdout
    .trimEnd()
    .split("\n")
    .at(-1)
    ?.match(/^\d+ \(sh\) (.*)$/);
  let childCpuMicros: number | undefined;
  if (stat?.[1] !== undefined) {
    // After "(sh) ": state is field 3, so cutime (16) and cstime (17) are 13 and 14.
    const fields = stat[1].split(" ");
    const ticks = n(fields[13]) + n(fields[14]);
    if (Number.isFinite(ticks)) childCpuMicros = (ticks * 1_000_000) / ticksPerSecond;
  }
  return {
    succeeded: n(requests[4]) - redirects,
    failed: n(requests[5]) + redirects,
    elapsedMs: n(finished[1]) * (UNIT_MS[finished[2] ?? "s"] ?? 1000),
    childCpuMicros,
  };
}

/** The durations (µs, third column) of the log's HTTP 200 lines, in ms. */
function successLatencies(log: string): Float64Array {
  const out: number[] = [];
  for (const line of log.split("\n")) {
    const [, status, micros] = line.split("\t");
    if (status === "200" && micros !== undefined) out.push(Number(micros) / 1000);
  }
  return Float64Array.from(out);
}

/**
 * Failed calls of `method` on the gRPC port so far, from the real server's
 * /metrics on its HTTP port: every code but OK and CANCELLED (a call the
 * client gave up: h2load may reset the calls still open when its time is
 * up). The difference over a run is what h2load cannot see.
 */
export async function rpcFailures(httpPort: number, method: string): Promise<number> {
  const response = await fetch(`http://127.0.0.1:${httpPort}/metrics`);
  if (!response.ok) throw new Error(`/metrics answered ${response.status}`);
  const text = await response.text();
  let failures = 0;
  const series = /^windlass_rpc_requests_total\{([^}]*)\} (\d+)$/gm;
  for (const m of text.matchAll(series)) {
    const labels = m[1] ?? "";
    if (
      labels.includes('transport="grpc"') &&
      labels.includes(`method="${method}"`) &&
      !labels.includes('code="OK"') &&
      !labels.includes('code="CANCELLED"')
    ) {
      failures += Number(m[2]);
    }
  }
  return failures;
}
