/**
 * The compiled `windlass-memory serve` command as a child process on free
 * ports, with the flags every conformance server gets (README.md in this
 * directory), and a scripted model server beside it.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { type FakeLlm, type FakeStep, startFakeLlm } from "../support/fake-llm.js";
import type { Json, ModelControl } from "./suite.js";
import { REPO_ROOT } from "./suite.js";

export interface ServerProcess {
  readonly grpcPort: number;
  readonly httpPort: number;
  readonly model: ModelControl;
  /** SIGTERM, then waits for the exit (SIGKILL after 10 s); stops the fake model too. */
  stop(): Promise<void>;
}

const COMMAND = join(REPO_ROOT, "bin", "windlass-memory.js");
const BUILT = join(REPO_ROOT, "dist", "src", "main.js");
const LISTENING = /gRPC [^\s,]+:(\d+), Connect\/gRPC-Web\/JSON http:\/\/[^\s:]+:(\d+)/;

/** The flags of every conformance server before the store and the case's own. */
export function baseFlags(modelBaseUrl: string): string[] {
  return [
    "--host",
    "127.0.0.1",
    "--port",
    "0",
    "--http-port",
    "0",
    "--summarizer",
    "openai",
    "--openai-base-url",
    modelBaseUrl,
    "--openai-max-retries",
    "0",
    "--progress-interval-ms",
    "100",
    "--log-level",
    "error",
  ];
}

/** Starts a server; `env` is added to this process's environment (a case's serverEnv). */
export async function startServerProcess(
  store: string,
  flags: string[],
  env: Record<string, string> = {},
): Promise<ServerProcess> {
  if (!existsSync(BUILT)) {
    throw new Error(`${BUILT} is missing: run npm run build first`);
  }
  const llm = await startFakeLlm();
  const model = modelControl(llm);
  const child = spawn(
    process.execPath,
    [COMMAND, "serve", ...baseFlags(llm.baseUrl), "--store", store, ...flags],
    { cwd: REPO_ROOT, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] },
  );
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  try {
    const [grpcPort, httpPort] = await readPorts(child, () => stderr);
    return {
      grpcPort,
      httpPort,
      model,
      async stop() {
        await stopChild(child);
        await llm.close();
      },
    };
  } catch (err) {
    await stopChild(child);
    await llm.close();
    throw err;
  }
}

function readPorts(child: ChildProcess, stderr: () => string): Promise<[number, number]> {
  return new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => fail(new Error("no listening line within 30 s")), 30_000);
    const fail = (err: Error) => {
      clearTimeout(timer);
      reject(new Error(`windlass-memory did not start: ${err.message}\n${stderr()}`));
    };
    child.once("exit", (code) => fail(new Error(`exited with ${code}`)));
    child.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      const m = LISTENING.exec(out);
      if (m !== null) {
        clearTimeout(timer);
        resolve([Number(m[1]), Number(m[2])]);
      }
    });
  });
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, "exit");
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(timer);
}

/** The README's fake model semantics over test/support/fake-llm.ts. */
function modelControl(llm: FakeLlm): ModelControl {
  // "summary #N", N counted from the case's start (requests is cleared by reset).
  llm.setFallback({ reply: () => `summary #${llm.requests.length}` });
  // Held steps wait for the case's release; each case starts with a new gate.
  let release: () => void = () => {};
  let released = Promise.resolve();
  const newGate = () => {
    released = new Promise<void>((resolve) => {
      release = resolve;
    });
  };
  newGate();
  return {
    async reset() {
      release();
      // The fake cannot drop steps, so leftovers of a failed case are consumed here.
      while (llm.pending() > 0) {
        await fetch(`${llm.baseUrl}/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: "drain", messages: [] }),
        }).then((r) => r.text());
      }
      llm.requests.length = 0;
      newGate();
    },
    push(steps) {
      llm.push(...steps.map((step) => fakeStep(step, released)));
    },
    requests: () => llm.requests.length,
    pending: () => llm.pending(),
    release: () => release(),
  };
}

function fakeStep(step: { [key: string]: Json }, released: Promise<void>): FakeStep {
  const delay = {
    ...(typeof step.delayMs === "number" ? { delayMs: step.delayMs } : {}),
    ...(step.held === true ? { until: released } : {}),
  };
  if (typeof step.reply === "string") return { reply: step.reply, ...delay };
  if (typeof step.status === "number") return { status: step.status, ...delay };
  if (step.malformed === true) return { malformed: true, ...delay };
  throw new Error(`unknown model step ${JSON.stringify(step)}`);
}
