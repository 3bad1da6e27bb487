/**
 * A real `redis-server` for tests, on a free port of 127.0.0.1, in a
 * temporary directory, with no persistence (`--save "" --appendonly no`)
 * unless `args` turn it on: they come after those, so they win.
 *
 * ```ts
 * const redis = await startRedisServer();
 * const store = await createRedisStore(redis.url);
 * // … redis.kill(); await redis.restart(); // same port, empty data
 * await redis.stop();
 * const aof = await startRedisServer({ args: ["--appendonly", "yes", "--appendfsync", "always"] });
 * // … aof.kill(); await aof.restart(); // same port and directory: the AOF is replayed
 * const replica = await startRedisServer({ args: ["--replicaof", "127.0.0.1", String(aof.port)] });
 * ```
 *
 * A missing binary is an error, never a skip: under CI=true a missing tool
 * must fail the run (README, Development).
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface RedisServer {
  /** "redis://127.0.0.1:PORT/0" (with ":PASSWORD@" when it requires one) */
  readonly url: string;
  readonly port: number;
  /** The running server's process id (SIGSTOP/SIGCONT it to hang Redis); undefined while stopped. */
  readonly pid: number | undefined;
  /** Ends the server with SIGTERM and waits for it to exit. Idempotent. */
  stop(): Promise<void>;
  /** Ends the server with SIGKILL (a crash) and waits for it to exit. Idempotent. */
  kill(): Promise<void>;
  /**
   * Starts the server again on the same port and directory (stopping it
   * first if it runs): without persistence its data is gone, with AOF on it
   * loads what the AOF kept. `args` replace the start-up arguments if given.
   */
  restart(args?: readonly string[]): Promise<void>;
}

export interface RedisServerOptions {
  /** More `redis-server` arguments, e.g. `--appendonly yes --appendfsync always` or `--replicaof HOST PORT`. */
  args?: readonly string[];
  /** Require it (`--requirepass`; also `--masterauth`, for a replica); the url then carries it. */
  password?: string;
  /**
   * More arguments that name ports of their own (a cluster node's
   * `--cluster-port`): chosen again on every attempt, as the port is, since
   * another process may take either between the probe and redis's bind.
   * Kept with `args` for restart().
   */
  portArgs?: () => Promise<readonly string[]>;
}

const BINARY = process.env.REDIS_SERVER ?? "redis-server";
const START_TIMEOUT_MS = 10_000;

/** Every server still running, killed when the test process exits whatever happens. */
const running = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/** Starts a redis-server on a free port and waits until it answers PING. */
export async function startRedisServer(options: RedisServerOptions = {}): Promise<RedisServer> {
  requireBinary();
  let args = options.args ?? [];
  const dir = mkdtempSync(join(tmpdir(), "windlass-redis-"));
  let child: ChildProcess | undefined;
  let port = 0;
  const baseArgs = args;
  for (let attempt = 1; ; attempt++) {
    port = await freePort();
    args = [...baseArgs, ...((await options.portArgs?.()) ?? [])];
    try {
      child = await launch(port, dir, args, options.password);
      break;
    } catch (err) {
      // Another process took a port between our probe and redis's bind.
      if (!(err instanceof PortInUse) || attempt >= 5) {
        rmSync(dir, { recursive: true, force: true });
        throw err;
      }
    }
  }

  async function end(signal: NodeJS.Signals): Promise<void> {
    const c = child;
    child = undefined;
    if (c === undefined || c.exitCode !== null || c.signalCode !== null) return;
    const exited = once(c, "exit");
    c.kill(signal);
    await exited;
  }

  return {
    url: `redis://${options.password === undefined ? "" : `:${options.password}@`}127.0.0.1:${port}/0`,
    port,
    get pid() {
      return child?.pid;
    },
    async stop() {
      await end("SIGTERM");
      rmSync(dir, { recursive: true, force: true });
    },
    async kill() {
      await end("SIGKILL");
    },
    async restart(newArgs?: readonly string[]) {
      if (newArgs !== undefined) args = newArgs;
      await end("SIGTERM");
      // The port was ours a moment ago; a short wait covers a slow release.
      for (let attempt = 1; ; attempt++) {
        try {
          child = await launch(port, dir, args, options.password);
          return;
        } catch (err) {
          if (!(err instanceof PortInUse) || attempt >= 20) throw err;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    },
  };
}

function requireBinary(): void {
  const probe = spawnSync(BINARY, ["--version"], { encoding: "utf8" });
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error(
      `${BINARY} is not installed or does not run (${probe.error?.message ?? probe.stderr}); ` +
        "install Debian's redis-server (apt-get install redis-server; .ci/run does) " +
        "or set REDIS_SERVER to its path",
    );
  }
}

class PortInUse extends Error {}

async function launch(
  port: number,
  dir: string,
  args: readonly string[],
  password: string | undefined,
): Promise<ChildProcess> {
  mkdirSync(dir, { recursive: true });
  return spawnAnsweringPing(
    BINARY,
    [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      "--save",
      "",
      "--appendonly",
      "no",
      "--dir",
      dir,
      "--daemonize",
      "no",
      "--protected-mode",
      "no",
      "--loglevel",
      "warning",
      // A primary's SIGTERM would wait up to 10 s for lagging replicas.
      "--shutdown-timeout",
      "0",
      ...(password === undefined ? [] : ["--requirepass", password, "--masterauth", password]),
      ...args,
    ],
    port,
    password,
  );
}

/**
 * Spawns `binary args` (redis-server, redis-sentinel) and resolves once it
 * answers PING on `port`; killed when the test process exits.
 */
export async function spawnAnsweringPing(
  binary: string,
  args: readonly string[],
  port: number,
  password?: string,
): Promise<ChildProcess> {
  const child = spawn(binary, args, { stdio: ["ignore", "pipe", "pipe"] });
  running.add(child);
  child.once("exit", () => running.delete(child));
  let output = "";
  const collect = (d: Buffer) => {
    output = (output + d.toString()).slice(-4000);
  };
  child.stdout?.on("data", collect);
  child.stderr?.on("data", collect);
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      if (/address already in use/i.test(output)) throw new PortInUse(`port ${port} is taken`);
      throw new Error(`${binary} exited at start-up: ${output.trim()}`);
    }
    if (await answersPing(port, password)) return child;
    await new Promise((r) => setTimeout(r, 20));
  }
  child.kill("SIGKILL");
  throw new Error(`${binary} did not answer PING within ${START_TIMEOUT_MS} ms: ${output}`);
}

/** A port the kernel just gave us and took back: free unless someone races for it. */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (port === 0) throw new Error("could not find a free port");
  return port;
}

/** PING (after AUTH, given a password) over a raw socket: the helper needs no Redis client of its own. */
export function answersPing(port: number, password?: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    let reply = "";
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.on("error", () => done(false));
    const auth = password === undefined ? "" : `AUTH ${password}\r\n`;
    const expected = password === undefined ? "+PONG\r\n" : "+OK\r\n+PONG\r\n";
    socket.on("connect", () => socket.write(`${auth}PING\r\n`));
    socket.on("data", (d) => {
      reply += d.toString();
      if (reply.length >= expected.length || reply.startsWith("-"))
        done(reply.startsWith(expected));
    });
  });
}
