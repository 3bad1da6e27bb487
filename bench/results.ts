import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import { join } from "node:path";
import { postgresBinDir } from "../test/support/postgres-server.js";

/**
 * bench/RESULTS.md: one section per scenario (and label), each written by the
 * run that measured it with the machine, versions and command of that run.
 * A run replaces only the sections of the scenarios it ran, so the file can
 * hold scenarios measured by different commands; text outside the sections
 * is kept as it is.
 */

/** What a scenario hands back for printing and for RESULTS.md. */
export interface ScenarioOutcome {
  /** Markdown: what was measured, the table, the goal and the verdict. */
  readonly markdown: string;
  /** False when calls failed or the figures are otherwise not valid. */
  readonly valid: boolean;
}

export interface MachineInfo {
  readonly nproc: number;
  readonly cpuModel: string;
  readonly memoryGiB: string;
  readonly platform: string;
  readonly node: string;
}

export function machineInfo(): MachineInfo {
  const cpus = os.cpus();
  return {
    nproc: os.availableParallelism(),
    cpuModel: cpus[0]?.model ?? "unknown",
    memoryGiB: (os.totalmem() / 1024 ** 3).toFixed(1),
    platform: `${os.platform()} ${os.release()}`,
    node: process.version,
  };
}

/** "1.23 0.98 0.77": the 1, 5 and 15 minute load averages. */
export function loadAverage(): string {
  return os
    .loadavg()
    .map((n) => n.toFixed(2))
    .join(" ");
}

/** Versions of what the scenarios run: the package, its runtime dependencies, redis-server, PostgreSQL. */
export function versions(root: string, redisServer: string | undefined, postgres = false): string {
  const pkg = JSON.parse(readFileSync(`${root}package.json`, "utf8")) as {
    version: string;
    dependencies: Record<string, string>;
  };
  const deps = ["@grpc/grpc-js", "@bufbuild/protobuf", "better-sqlite3", "redis", "pg"]
    .filter((d) => pkg.dependencies[d] !== undefined)
    .map((d) => `${d} ${pkg.dependencies[d]}`);
  const parts = [`windlass-memory ${pkg.version}`, `node ${process.version}`, ...deps];
  if (redisServer !== undefined) {
    const out = spawnSync(redisServer, ["--version"], { encoding: "utf8" });
    const v = /v=(\S+)/.exec(out.stdout ?? "")?.[1];
    parts.push(`redis-server ${v ?? "(not runnable)"}`);
  }
  if (postgres) {
    const out = spawnSync(join(postgresBinDir(), "postgres"), ["--version"], { encoding: "utf8" });
    // "postgres (PostgreSQL) 15.8 (Debian 15.8-0+deb12u1)"
    const v = /\(PostgreSQL\) (\S+)/.exec(out.stdout ?? "")?.[1];
    parts.push(`PostgreSQL ${v ?? "(not runnable)"}`);
  }
  return parts.join(", ");
}

const HEADER = `# Benchmark results

Written by \`npm run bench\` (bench/run.ts): each section comes from the run
named in it, with that run's machine, versions and command; a run replaces
only the sections of the scenarios it ran. Scenarios and flags:
\`npm run bench -- --help\`.
`;

const begin = (key: string): string => `<!-- bench:begin ${key} -->`;
const end = (key: string): string => `<!-- bench:end ${key} -->`;

/** Writes `body` as the section `key` of `file`, replacing an earlier one. */
export function writeSection(file: string, key: string, body: string): void {
  const text = existsSync(file) ? readFileSync(file, "utf8") : HEADER;
  const section = `${begin(key)}\n${body.trim()}\n${end(key)}`;
  const from = text.indexOf(begin(key));
  const to = text.indexOf(end(key));
  const next =
    from !== -1 && to > from
      ? text.slice(0, from) + section + text.slice(to + end(key).length)
      : `${text.trimEnd()}\n\n${section}\n`;
  writeFileSync(file, next);
}
