import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { createClient } from "redis";
// The tests' own launcher helpers (tsc compiles that file into dist as well).
import { answersPing, freePort } from "../test/support/redis-server.js";
import { processCpuMicros } from "./cpu-time.js";
import { settlesWithin } from "./server-process.js";

/**
 * The bench's own redis-server, for the real server's redis store: on a free
 * port of 127.0.0.1, without persistence (`--save "" --appendonly no`, so no
 * disk write enters the figures), and a probe that reads from it how many
 * commands the server under test sends.
 */

export interface BenchRedis {
  /** "redis://127.0.0.1:PORT/0" */
  readonly url: string;
  readonly pid: number;
  /** User + system CPU time redis-server has used so far, in microseconds; undefined without /proc. */
  cpuMicros(): number | undefined;
  /** SIGTERM, then SIGKILL if it has not exited within a few seconds. Idempotent. */
  stop(): Promise<void>;
}

const START_TIMEOUT_MS = 10_000;
const PORT_ATTEMPTS = 5;
const OUTPUT_TAIL_BYTES = 4096;

const live = new Set<ChildProcess>();
// Last resort: redis-server must never outlive the bench, whatever ended it.
process.on("exit", () => {
  for (const child of live) child.kill("SIGKILL");
});

/** More for a redis-server that needs it, e.g. redis-stack's modules and their libraries. */
export interface BenchRedisExtras {
  /** Appended to the command line, e.g. ["--loadmodule", "/path/rejson.so"]. */
  readonly args?: readonly string[];
  /** Added to the environment, e.g. LD_LIBRARY_PATH. */
  readonly env?: Readonly<Record<string, string>>;
}

/**
 * Starts `binary` (redis-server) with the working directory `dir` (created if
 * missing) and waits until it answers PING.
 */
export async function startBenchRedis(
  binary: string,
  dir: string,
  extras: BenchRedisExtras = {},
): Promise<BenchRedis> {
  const env = { ...process.env, ...extras.env };
  const probe = spawnSync(binary, ["--version"], { encoding: "utf8", env });
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error(
      `${binary} does not run (${probe.error?.message ?? probe.stderr.trim()}); install ` +
        "redis-server 7.0 or later, set REDIS_SERVER to its path, or leave redis out of BENCH_STORES",
    );
  }
  mkdirSync(dir, { recursive: true });
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    try {
      return await launch(binary, port, dir, extras.args ?? [], env);
    } catch (err) {
      // Another process took the port between our probe and redis's bind.
      if (!(err instanceof PortInUse) || attempt >= PORT_ATTEMPTS) throw err;
    }
  }
}

class PortInUse extends Error {}

async function launch(
  binary: string,
  port: number,
  dir: string,
  extraArgs: readonly string[],
  env: NodeJS.ProcessEnv,
): Promise<BenchRedis> {
  const flags = {
    port: String(port),
    bind: "127.0.0.1",
    save: "",
    appendonly: "no",
    dir,
    daemonize: "no",
    "protected-mode": "no",
    loglevel: "warning",
  };
  const child = spawn(
    binary,
    [...Object.entries(flags).flatMap(([flag, value]) => [`--${flag}`, value]), ...extraArgs],
    { stdio: ["ignore", "pipe", "pipe"], env },
  );
  live.add(child);
  const exited = new Promise<void>((resolve) => {
    child.once("exit", () => {
      live.delete(child);
      resolve();
    });
  });
  let output = "";
  const collect = (chunk: Buffer): void => {
    output = (output + chunk.toString()).slice(-OUTPUT_TAIL_BYTES);
  };
  child.stdout.on("data", collect);
  child.stderr.on("data", collect);
  const gone = (): boolean => child.exitCode !== null || child.signalCode !== null;

  const stop = async (): Promise<void> => {
    if (gone()) return;
    child.kill("SIGTERM");
    if (await settlesWithin(exited, 5_000)) return;
    child.kill("SIGKILL");
    await settlesWithin(exited, 2_000);
  };

  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (gone()) {
      if (/address already in use/i.test(output)) throw new PortInUse(`port ${port} is taken`);
      throw new Error(`redis-server exited at start-up: ${output.trim()}`);
    }
    const pid = child.pid;
    if (pid !== undefined && (await answersPing(port))) {
      return {
        url: `redis://127.0.0.1:${port}/0`,
        pid,
        cpuMicros: () => processCpuMicros(pid),
        stop,
      };
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  await stop();
  throw new Error(`${binary} did not answer PING within ${START_TIMEOUT_MS} ms: ${output}`);
}

/** Commands per name, e.g. "evalsha" -> 1000. */
export type CommandCounts = ReadonlyMap<string, number>;

/**
 * The bench's connection to its Redis. It reads what the server under test
 * made Redis do in two ways, because Redis counts a command run by a Lua
 * script like one a client sent:
 * - {@link RedisProbe.commandCalls}: INFO commandstats, cheap enough to read
 *   around every timed measurement; it counts every command Redis ran,
 *   including those inside EVALSHA.
 * - {@link RedisProbe.countSent}: MONITOR, which tells a client's commands
 *   from a script's; too costly for a timed measurement, so it is run over a
 *   separate batch of calls. What it counts is what the server sends: its
 *   round trips.
 */
export interface RedisProbe {
  /** Calls per command since Redis started, without INFO (the probe's own reads). */
  commandCalls(): Promise<CommandCounts>;
  /**
   * Counts the commands clients other than the probe send while `work` runs,
   * by name; commands run inside Lua scripts are left out.
   */
  countSent(work: () => Promise<void>): Promise<CommandCounts>;
  close(): Promise<void>;
}

/** The structural part of a node-redis client the probe uses (RESP2 replies). */
interface ProbeConnection {
  sendCommand(args: string[]): Promise<unknown>;
  connect(): Promise<unknown>;
  monitor(callback: (line: string) => unknown): Promise<void>;
  destroy(): void;
  on(event: "error", listener: (err: Error) => void): unknown;
}

// `1700000000.123456 [0 127.0.0.1:51234] "evalsha" "…" …` or `[0 lua]` for a script's command.
const MONITOR_LINE = /^\d+\.\d+ \[\d+ ([^\]]+)\] "([^"]*)"/;
const MARKER_TIMEOUT_MS = 10_000;

/** Connects a probe to the Redis at `url`. */
export async function openRedisProbe(url: string): Promise<RedisProbe> {
  const client: ProbeConnection = createClient({ url, RESP: 2 });
  client.on("error", () => {});
  await client.connect();
  const info = String(await client.sendCommand(["CLIENT", "INFO"]));
  const ownAddress = /\baddr=(\S+)/.exec(info)?.[1];
  if (ownAddress === undefined) throw new Error(`redis probe: no addr in CLIENT INFO: ${info}`);

  return {
    async commandCalls() {
      const text = String(await client.sendCommand(["INFO", "commandstats"]));
      const calls = new Map<string, number>();
      for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
        const [, name, n] = match;
        if (name !== undefined && n !== undefined && name !== "info") calls.set(name, Number(n));
      }
      return calls;
    },

    async countSent(work) {
      const monitor: ProbeConnection = createClient({ url, RESP: 2 });
      monitor.on("error", () => {});
      await monitor.connect();
      try {
        const counts = new Map<string, number>();
        const marker = `windlass-bench-marker-${process.pid}-${Date.now()}`;
        let markerSeen: () => void = () => {};
        const sawMarker = new Promise<void>((resolve) => {
          markerSeen = resolve;
        });
        await monitor.monitor((reply) => {
          const line = String(reply);
          if (line.includes(marker)) markerSeen();
          const match = MONITOR_LINE.exec(line);
          const source = match?.[1];
          const name = match?.[2]?.toLowerCase();
          if (source === undefined || name === undefined) return;
          if (source === "lua" || source === ownAddress) return;
          counts.set(name, (counts.get(name) ?? 0) + 1);
        });
        await work();
        // Redis runs commands one at a time: once MONITOR shows the marker,
        // sent after the work ended, it has shown every command of the work.
        await client.sendCommand(["ECHO", marker]);
        if (!(await settlesWithin(sawMarker, MARKER_TIMEOUT_MS))) {
          throw new Error(
            `redis probe: MONITOR did not show the marker within ${MARKER_TIMEOUT_MS} ms`,
          );
        }
        return counts;
      } finally {
        monitor.destroy();
      }
    },

    async close() {
      client.destroy();
    },
  };
}

/** Calls per command from `before` to `after`. */
export function commandDelta(before: CommandCounts, after: CommandCounts): Map<string, number> {
  const delta = new Map<string, number>();
  for (const [name, n] of after) {
    const d = n - (before.get(name) ?? 0);
    if (d > 0) delta.set(name, d);
  }
  return delta;
}
