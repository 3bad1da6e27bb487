import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";

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
