import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

/**
 * The README's examples run as a reader would run them, against a server
 * started with the defaults (extractive summariser). `npm test` prepares
 * .venv and Go modules first (scripts/setup-clients.sh).
 */
const ROOT = new URL("../../", import.meta.url).pathname;
const run = promisify(execFile);
let server: ChildProcess;
let target = "";

beforeAll(async () => {
  server = spawn(
    process.execPath,
    ["bin/windlass-memory.js", "serve", "--port", "0", "--http-port", "0"],
    {
      cwd: ROOT,
      stdio: ["ignore", "pipe", "ignore"],
    },
  );
  target = await new Promise<string>((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error("server did not start")), 60_000);
    server.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /gRPC ([\d.]+:\d+)/.exec(out);
      if (m?.[1] !== undefined) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
  });
});

afterAll(() => {
  server.kill("SIGTERM");
});

/** The agent loop's observable result: six turns, summary updates seen, a summarised final context. */
function expectAgentLoop(stdout: string): void {
  // The watcher prints from another thread, so lines may interleave: look for each turn anywhere.
  const turns = new Set([...stdout.matchAll(/turn (\d):/g)].map((m) => m[1]));
  expect([...turns].sort()).toEqual(["1", "2", "3", "4", "5", "6"]);
  expect(stdout).toMatch(/\[watch\] summary updated through seq \d+/);
  expect(stdout).toContain("final context:");
  expect(stdout).toContain("Summary of the earlier conversation:");
  // The final context shows the summary itself, under its heading, not only the heading.
  expect(stdout).toMatch(
    /^ {5}system: Summary of the earlier conversation:\n {13}user: I'd like to plan a weekend in Lisbon\.$/m,
  );
}

describe("the README's agent-loop examples", () => {
  it("runs the Python example", async () => {
    const python = `${ROOT}.venv/bin/python`;
    expect(existsSync(python), "run scripts/setup-clients.sh (npm test does)").toBe(true);
    const { stdout } = await run(python, ["examples/python/agent_loop.py", "--target", target], {
      cwd: ROOT,
      timeout: 60_000,
    });
    expectAgentLoop(stdout);
  }, 70_000);

  it("runs the Go example", async () => {
    const { stdout } = await run("go", ["run", "./agent_loop", "-target", target], {
      cwd: `${ROOT}examples/go`,
      timeout: 120_000,
    });
    expectAgentLoop(stdout);
  }, 130_000);
});
