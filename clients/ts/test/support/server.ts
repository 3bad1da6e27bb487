/**
 * The real windlass-memory server, built from this checkout (dist/ at the
 * repository root, made by the root `npm run build`), as a child process on
 * free ports.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const REPO_ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
const COMMAND = `${REPO_ROOT}bin/windlass-memory.js`;
const BUILT = `${REPO_ROOT}dist/src/main.js`;
const LISTENING = /gRPC [^\s,]+:(\d+), Connect\/gRPC-Web\/JSON http:\/\/[^\s:]+:(\d+)/;

export interface ServerProcess {
  readonly grpcPort: number;
  readonly httpPort: number;
  /** The base URL for `transport`: the gRPC port or the HTTP (Connect) port. */
  url(transport: "grpc" | "connect"): string;
  /** SIGTERM, then waits for the exit (SIGKILL after 15 s). */
  stop(): Promise<void>;
}

/** Starts `windlass-memory serve` with `flags` after the port flags. */
export async function startServer(
  flags: string[] = [],
  env: Record<string, string> = {},
): Promise<ServerProcess> {
  if (!existsSync(BUILT)) {
    throw new Error(`${BUILT} is missing: run npm ci && npm run build at the repository root`);
  }
  const child = spawn(
    process.execPath,
    [
      COMMAND,
      "serve",
      "--host",
      "127.0.0.1",
      "--port",
      "0",
      "--http-port",
      "0",
      "--log-level",
      "error",
      ...flags,
    ],
    { cwd: REPO_ROOT, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] },
  );
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  try {
    const [grpcPort, httpPort] = await new Promise<[number, number]>((resolve, reject) => {
      let out = "";
      const timer = setTimeout(
        () => reject(new Error(`server did not start in 60 s: ${stderr}`)),
        60_000,
      );
      child.stdout?.on("data", (d: Buffer) => {
        out += d.toString();
        const m = LISTENING.exec(out);
        if (m !== null) {
          clearTimeout(timer);
          resolve([Number(m[1]), Number(m[2])]);
        }
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`server exited with ${code} before listening: ${stderr}`));
      });
    });
    return {
      grpcPort,
      httpPort,
      url: (transport) => `http://127.0.0.1:${transport === "grpc" ? grpcPort : httpPort}`,
      stop: () => stopChild(child),
    };
  } catch (err) {
    await stopChild(child);
    throw err;
  }
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, "exit");
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
  await exited;
  clearTimeout(timer);
}

/** Resolves once `condition` holds, polling every 20 ms; rejects after `timeoutMs`. */
export async function waitFor(
  what: string,
  condition: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
