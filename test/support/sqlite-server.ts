import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";

/** The compiled `windlass-memory` command (npm test builds it before vitest runs). */
const BIN = new URL("../../bin/windlass-memory.js", import.meta.url).pathname;

/** A `windlass-memory serve` child process on free ports. */
export interface ServerProcess {
  readonly child: ChildProcess;
  /** "127.0.0.1:PORT" of the gRPC listener. */
  readonly address: string;
  /** Everything the process wrote to stderr so far (its JSON logs). */
  stderr(): string;
}

/**
 * Starts the command with `args` after `serve --port 0 --http-port 0` and
 * resolves once it prints its listening line; rejects with its stderr if it
 * exits or stays silent for `timeoutMs`.
 */
export async function startServerProcess(
  args: readonly string[],
  timeoutMs = 10_000,
): Promise<ServerProcess> {
  const child = spawn(
    process.execPath,
    [BIN, "serve", "--port", "0", "--http-port", "0", ...args],
    { env: { PATH: process.env.PATH ?? "" }, stdio: ["ignore", "pipe", "pipe"] },
  );
  let err = "";
  child.stderr?.on("data", (d: Buffer) => {
    err += d.toString();
  });
  let out = "";
  try {
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no listening line in ${timeoutMs} ms; stderr: ${err}`)),
        timeoutMs,
      );
      child.stdout?.on("data", (d: Buffer) => {
        out += d.toString();
        const m = /listening: gRPC [\d.]+:(\d+),/.exec(out);
        if (m !== null) {
          clearTimeout(timer);
          resolve(Number(m[1]));
        }
      });
      child.once("exit", (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`exited (${code ?? signal}) before listening; stderr: ${err}`));
      });
    });
    return { child, address: `127.0.0.1:${port}`, stderr: () => err };
  } catch (e) {
    await killHard(child);
    throw e;
  }
}

/** SIGKILL, then wait until the process is gone (its file locks with it). */
export async function killHard(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, "exit");
  child.kill("SIGKILL");
  await exited;
}

/** SIGTERM, then wait for the exit status of the graceful shutdown. */
export async function stopGracefully(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
  const exited = once(child, "exit") as Promise<[number | null, NodeJS.Signals | null]>;
  child.kill("SIGTERM");
  const [code] = await exited;
  return code;
}

/** The better-sqlite3 this checkout uses, for a lock holder of its own. */
const BETTER_SQLITE3 = new URL("../../node_modules/better-sqlite3/lib/index.js", import.meta.url)
  .pathname;

/** Another process holding the write lock of a SQLite database. */
export interface LockHolder {
  readonly child: ChildProcess;
  /** Kills the holder (SIGKILL, as a crash would) and waits until the lock is gone with it. */
  release(): Promise<void>;
}

/**
 * Starts another process that opens `path` and holds its write lock (BEGIN
 * IMMEDIATE, never committed) until released; resolves once it holds it.
 */
export async function holdWriteLock(path: string, timeoutMs = 10_000): Promise<LockHolder> {
  const script = `
    import Database from ${JSON.stringify(BETTER_SQLITE3)};
    const db = new Database(${JSON.stringify(path)}, { timeout: 5000 });
    db.exec("BEGIN IMMEDIATE");
    process.stdout.write("locked\\n");
    setInterval(() => {}, 1 << 30);
  `;
  const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr?.on("data", (d: Buffer) => {
    err += d.toString();
  });
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`the lock holder said nothing in ${timeoutMs} ms: ${err}`)),
        timeoutMs,
      );
      child.stdout?.on("data", (d: Buffer) => {
        if (d.toString().includes("locked")) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`the lock holder exited (${code}): ${err}`));
      });
    });
  } catch (e) {
    await killHard(child);
    throw e;
  }
  return { child, release: () => killHard(child) };
}

/** A tmpfs of a fixed size: a real filesystem that fills up. */
export interface SmallDisk {
  readonly dir: string;
  /** Unmounts it and removes the mount point. */
  remove(): void;
}

/**
 * Mounts a tmpfs of `bytes` on a new directory under `parent` (needs root,
 * as the test machines run); throws saying so when mount fails.
 */
export function mountSmallDisk(parent: string, bytes: number): SmallDisk {
  const dir = mkdtempSync(join(parent, "small-disk-"));
  const mount = spawnSync("mount", ["-t", "tmpfs", "-o", `size=${bytes}`, "tmpfs", dir], {
    encoding: "utf8",
  });
  if (mount.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(
      `mounting a ${bytes}-byte tmpfs failed (the disk-full test needs root): ${mount.error?.message ?? mount.stderr}`,
    );
  }
  return {
    dir,
    remove() {
      spawnSync("umount", [dir]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
