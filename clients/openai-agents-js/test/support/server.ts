/**
 * The real windlass-memory server, built from this checkout (dist/ at the
 * repository root, made by the root `npm run build`), on free ports, with
 * the built-in extractive summariser.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { createMemoryClient, type MemoryClient } from "@windlass-memory/client";
import { afterAll, beforeAll } from "vitest";

const REPO_ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
const LISTENING = /gRPC [^\s,]+:(\d+), Connect\/gRPC-Web\/JSON http:\/\/[^\s:]+:(\d+)/;

export interface ServerProcess {
  /** Base URL of the gRPC port. */
  readonly grpcUrl: string;
  stop(): Promise<void>;
}

export async function startServer(): Promise<ServerProcess> {
  if (!existsSync(`${REPO_ROOT}dist/src/main.js`)) {
    throw new Error("dist/ is missing: run npm ci and npm run build at the repository root");
  }
  const child = spawn(
    process.execPath,
    [
      `${REPO_ROOT}bin/windlass-memory.js`,
      "serve",
      "--host",
      "127.0.0.1",
      "--port",
      "0",
      "--http-port",
      "0",
      "--log-level",
      "error",
    ],
    { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "pipe"] },
  );
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      let out = "";
      const timer = setTimeout(() => reject(new Error(`server did not start: ${stderr}`)), 60_000);
      child.stdout?.on("data", (d: Buffer) => {
        out += d.toString();
        const m = LISTENING.exec(out);
        if (m !== null) {
          clearTimeout(timer);
          resolve(Number(m[1]));
        }
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`server exited with ${code}: ${stderr}`));
      });
    });
    return { grpcUrl: `http://127.0.0.1:${port}`, stop: () => stopChild(child) };
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

/**
 * A server and a client of it for the tests of one file: started before
 * them, closed and stopped after them (vitest hooks). `client` is there once
 * the tests run.
 */
export function liveClient(): { readonly client: MemoryClient } {
  let server: ServerProcess | undefined;
  let client: MemoryClient | undefined;
  beforeAll(async () => {
    server = await startServer();
    client = createMemoryClient({ baseUrl: server.grpcUrl });
  });
  afterAll(async () => {
    client?.close();
    await server?.stop();
  });
  return {
    get client() {
      if (client === undefined) throw new Error("liveClient: used before its beforeAll ran");
      return client;
    },
  };
}
