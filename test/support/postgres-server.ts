/**
 * A real PostgreSQL server for tests, on a free port of 127.0.0.1, in a
 * temporary data directory, with fsync on (durability tests depend on it).
 *
 * ```ts
 * const pg = await startPostgresServer();
 * const store = await createPostgresStore(await pg.createDatabase());
 * // … await pg.kill(); await pg.restart(); // same port, same data
 * await pg.stop();
 * ```
 *
 * initdb and postgres refuse to run as root: as root, the server runs as
 * the `postgres` system user (which owns the temporary directory). The
 * binaries are found by POSTGRES_BIN, else `pg_config --bindir`, else the
 * newest /usr/lib/postgresql/<version>/bin. A missing binary is an error,
 * never a skip: under CI=true a missing tool must fail the run (README,
 * Development).
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { freePort } from "./redis-server.js";

export interface PostgresServer {
  readonly port: number;
  /** The URL of the server's `postgres` database (for the tests' own queries). */
  readonly adminUrl: string;
  /** The postmaster's process id; undefined while stopped. */
  readonly pid: number | undefined;
  /** The postmaster and its backends now (none while stopped), from /proc. */
  processIds(): number[];
  /** A new, empty database on this server: its URL. */
  createDatabase(): Promise<string>;
  /** Ends the server (immediate shutdown) and removes its data. Idempotent. */
  stop(): Promise<void>;
  /**
   * SIGKILL to the postmaster and every backend (a crash of the server);
   * resolves once none of them runs, so nothing commits after it. The data
   * stays for restart.
   */
  kill(): Promise<void>;
  /**
   * Shuts the server down as `pg_ctl stop -m <mode>` does, keeping the data
   * for restart: fast (SIGINT) ends every session and checkpoints; immediate
   * (SIGQUIT) ends them without a checkpoint, so the next start recovers
   * from the WAL. Resolves once the postmaster has exited.
   */
  halt(mode: "fast" | "immediate"): Promise<void>;
  /**
   * Starts the server again on the same port and data, after a fast
   * shutdown if it runs (`pg_ctl restart`).
   */
  restart(): Promise<void>;
}

export interface PostgresServerOptions {
  /**
   * More server settings, each passed as `-c NAME=VALUE` after the ones
   * the tests depend on (a later -c wins): the bench's
   * shared_preload_libraries=pg_stat_statements, for one.
   */
  readonly settings?: Readonly<Record<string, string>>;
}

const START_TIMEOUT_MS = 30_000;

const running = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/** The directory of initdb and postgres. */
export function postgresBinDir(): string {
  const given = process.env.POSTGRES_BIN;
  if (given !== undefined) {
    // Named by the user: that directory or an error naming it, never another one.
    if (existsSync(join(given, "postgres")) && existsSync(join(given, "initdb"))) return given;
    throw new Error(`POSTGRES_BIN=${given} holds no postgres and initdb`);
  }
  const candidates: string[] = [];
  const probe = spawnSync("pg_config", ["--bindir"], { encoding: "utf8" });
  if (probe.status === 0) candidates.push(probe.stdout.trim());
  const root = "/usr/lib/postgresql";
  if (existsSync(root)) {
    const versions = readdirSync(root)
      .filter((v) => /^\d+$/.test(v))
      .sort((a, b) => Number(b) - Number(a));
    for (const v of versions) candidates.push(join(root, v, "bin"));
  }
  const found = candidates.find(
    (d) => existsSync(join(d, "postgres")) && existsSync(join(d, "initdb")),
  );
  if (found === undefined) {
    throw new Error(
      `PostgreSQL's initdb and postgres were not found (looked in ${candidates.join(", ") || "no directory"}); ` +
        "install Debian's postgresql (apt-get install postgresql; .ci/run does) or set POSTGRES_BIN to their directory",
    );
  }
  return found;
}

/** Who runs the server: the postgres system user when this process is root. */
function serverUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
  const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
  if (!Number.isInteger(uid) || !Number.isInteger(gid)) {
    throw new Error("running as root, and there is no postgres user to run PostgreSQL as");
  }
  return { uid, gid };
}

/** Starts a PostgreSQL server and waits until it answers `SELECT 1`. */
export async function startPostgresServer(
  options: PostgresServerOptions = {},
): Promise<PostgresServer> {
  const settings = Object.entries(options.settings ?? {}).flatMap(([k, v]) => ["-c", `${k}=${v}`]);
  const bin = postgresBinDir();
  const user = serverUser();
  const dir = mkdtempSync(join(tmpdir(), "windlass-postgres-"));
  const data = join(dir, "data");
  if (user !== undefined) chownSync(dir, user.uid, user.gid);
  const init = spawnSync(
    join(bin, "initdb"),
    ["-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale", "C.UTF-8", "--no-sync"],
    { encoding: "utf8", ...(user ?? {}) },
  );
  if (init.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`initdb failed: ${init.error?.message ?? ""}${init.stderr}`);
  }
  let port = await freePort();
  let child: ChildProcess | undefined;
  for (let attempt = 1; ; attempt++) {
    try {
      child = await launch(bin, data, dir, port, user, settings);
      break;
    } catch (err) {
      if (!(err instanceof PortInUse) || attempt >= 5) {
        rmSync(dir, { recursive: true, force: true });
        throw err;
      }
      port = await freePort();
    }
  }
  const adminUrl = `postgres://postgres@127.0.0.1:${port}/postgres`;

  async function end(signal: NodeJS.Signals): Promise<void> {
    const c = child;
    child = undefined;
    if (c === undefined || c.exitCode !== null || c.signalCode !== null) return;
    const exited = once(c, "exit");
    c.kill(signal);
    await exited;
    running.delete(c);
  }

  return {
    port,
    adminUrl,
    get pid() {
      return child?.pid;
    },
    processIds() {
      const pid = child?.pid;
      return pid === undefined ? [] : [pid, ...childrenOf(pid)];
    },
    async createDatabase() {
      const name = `w_${randomBytes(6).toString("hex")}`;
      const admin = new pg.Client({ connectionString: adminUrl });
      await admin.connect();
      try {
        await admin.query(`CREATE DATABASE ${name}`);
      } finally {
        await admin.end();
      }
      return `postgres://postgres@127.0.0.1:${port}/${name}`;
    },
    async stop() {
      // Immediate shutdown: the data is removed next, so no shutdown checkpoint is owed.
      await end("SIGQUIT");
      rmSync(dir, { recursive: true, force: true });
    },
    async kill() {
      const pid = child?.pid;
      const backends = pid === undefined ? [] : childrenOf(pid);
      await end("SIGKILL");
      for (const b of backends) signal(b, "SIGKILL");
      await gone(backends);
    },
    async halt(mode) {
      await end(mode === "fast" ? "SIGINT" : "SIGQUIT");
    },
    async restart() {
      await end("SIGINT");
      // After a SIGKILL the old backends hold the shared memory until they notice; retried.
      for (let attempt = 1; ; attempt++) {
        try {
          child = await launch(bin, data, dir, port, user, settings);
          return;
        } catch (err) {
          if (attempt >= 40) throw err;
          await new Promise((r) => setTimeout(r, 250));
        }
      }
    },
  };
}

/** The processes whose parent is `pid` (the postmaster's backends), from /proc. */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = readStat(Number(entry));
    if (stat?.ppid === pid) out.push(Number(entry));
  }
  return out;
}

/** State and parent of a process, or undefined once it is gone. */
function readStat(pid: number): { state: string; ppid: number } | undefined {
  try {
    // "pid (comm) state ppid …": comm may hold spaces, so read after its ")".
    const text = readFileSync(`/proc/${pid}/stat`, "utf8");
    const [state = "", ppid = ""] = text.slice(text.lastIndexOf(")") + 2).split(" ");
    return { state, ppid: Number(ppid) };
  } catch {
    return undefined;
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // Gone already.
  }
}

/** Resolves once none of `pids` runs (a zombie waiting for its reaper counts as gone). */
async function gone(pids: number[]): Promise<void> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    const left = pids.filter((p) => {
      const s = readStat(p);
      return s !== undefined && s.state !== "Z";
    });
    if (left.length === 0) return;
    if (Date.now() > deadline)
      throw new Error(`postgres backends ${left.join(", ")} outlived SIGKILL`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

class PortInUse extends Error {}

async function launch(
  bin: string,
  data: string,
  socketDir: string,
  port: number,
  user: { uid: number; gid: number } | undefined,
  settings: readonly string[],
): Promise<ChildProcess> {
  const child = spawn(
    join(bin, "postgres"),
    [
      "-D",
      data,
      "-p",
      String(port),
      "-k",
      socketDir,
      "-c",
      "listen_addresses=127.0.0.1",
      "-c",
      "fsync=on",
      "-c",
      "max_connections=300",
      "-c",
      "shared_buffers=32MB",
      // Lets a test tell which rows one transaction wrote (group commit).
      "-c",
      "track_commit_timestamp=on",
      ...settings,
    ],
    { stdio: ["ignore", "pipe", "pipe"], ...(user ?? {}) },
  );
  running.add(child);
  let output = "";
  const collect = (d: Buffer) => {
    output = (output + d.toString()).slice(-4000);
  };
  child.stdout?.on("data", collect);
  child.stderr?.on("data", collect);
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      running.delete(child);
      if (/address already in use/i.test(output)) throw new PortInUse(`port ${port} is taken`);
      throw new Error(`postgres exited at start-up: ${output.trim()}`);
    }
    if (await answers(port)) return child;
    await new Promise((r) => setTimeout(r, 50));
  }
  child.kill("SIGKILL");
  running.delete(child);
  throw new Error(`postgres did not answer within ${START_TIMEOUT_MS} ms: ${output}`);
}

async function answers(port: number): Promise<boolean> {
  const c = new pg.Client({
    connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`,
    connectionTimeoutMillis: 1000,
  });
  c.on("error", () => {});
  try {
    await c.connect();
    await c.query("SELECT 1");
    return true;
  } catch {
    return false;
  } finally {
    await c.end().catch(() => {});
  }
}

/** One statement on a connection of its own (a test's look at the tables): its rows. */
export async function queryPostgres<R extends pg.QueryResultRow>(
  url: string,
  sql: string,
  params: unknown[] = [],
): Promise<R[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<R>(sql, params)).rows;
  } finally {
    await c.end();
  }
}

/**
 * A second connection holding the namespace's row lock (the lock every
 * write of the namespace takes first) until `release`.
 */
export async function holdNamespace(
  url: string,
  namespace: string,
): Promise<{ release(): Promise<void> }> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query("BEGIN");
  await c.query("SELECT * FROM namespaces WHERE namespace = $1 FOR UPDATE", [namespace]);
  return {
    release: async () => {
      await c.query("COMMIT");
      await c.end();
    },
  };
}
