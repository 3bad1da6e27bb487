/**
 * One replica of the service as an operator runs it: the compiled
 * `windlass-memory serve` command (npm test builds dist first) in a child
 * process on free ports. Several of them over one Redis make a fleet.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";

const BIN = new URL("../../bin/windlass-memory.js", import.meta.url).pathname;
const START_TIMEOUT_MS = 15_000;

export interface Replica {
  readonly child: ChildProcess;
  readonly grpcPort: number;
  readonly httpPort: number;
  /** Everything it wrote to stderr (its JSON log lines) so far. */
  stderr(): string;
  /** SIGTERM, then waits for the exit; resolves with the exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL (a crash), then waits for the exit. */
  kill(): Promise<void>;
}

/** Starts `windlass-memory serve --port 0 --http-port 0 <args>` and waits for its listening line. */
export async function startReplica(args: readonly string[]): Promise<Replica> {
  const child = spawn(
    process.execPath,
    [BIN, "serve", "--port", "0", "--http-port", "0", ...args],
    { env: { PATH: process.env.PATH ?? "" }, stdio: ["ignore", "pipe", "pipe"] },
  );
  let err = "";
  child.stderr?.on("data", (d: Buffer) => {
    err = (err + d.toString()).slice(-100_000);
  });
  let out = "";
  const exited = once(child, "exit");
  exited.catch(() => {});
  try {
    const [grpcPort, httpPort] = await new Promise<[number, number]>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`replica printed no listening line; stderr: ${err}`)),
        START_TIMEOUT_MS,
      );
      child.stdout?.on("data", (d: Buffer) => {
        out += d.toString();
        const m = /gRPC [\d.]+:(\d+), Connect\/gRPC-Web\/JSON https?:\/\/[\d.]+:(\d+)/.exec(out);
        if (m !== null) {
          clearTimeout(timer);
          resolve([Number(m[1]), Number(m[2])]);
        }
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`replica exited with ${code} at start-up: ${out}${err}`));
      });
    });
    const running = () => child.exitCode === null && child.signalCode === null;
    return {
      child,
      grpcPort,
      httpPort,
      stderr: () => err,
      async stop() {
        if (running()) child.kill("SIGTERM");
        await exited;
        return child.exitCode;
      },
      async kill() {
        if (running()) child.kill("SIGKILL");
        await exited;
      },
    };
  } catch (e) {
    child.kill("SIGKILL");
    throw e;
  }
}
