import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type CodeBlock, codeBlocks, EXAMPLE_LANGUAGES, retarget } from "./code-blocks.js";

/**
 * Runs the README's examples as a reader would: in the order written, against
 * one fresh server started as `npm start` starts it (defaults: memory store,
 * extractive summariser), only on free ports, which `retarget` substitutes for
 * the README's default addresses. It runs last in `npm test` (see
 * vitest.readme.config.ts), after scripts/test-clients.sh has installed and
 * built the client libraries the examples import.
 */
const ROOT = new URL("../../", import.meta.url).pathname;
const README = readFileSync(join(ROOT, "README.md"), "utf8");
const BLOCKS = codeBlocks(README);
const EXAMPLES = BLOCKS.filter((b) => EXAMPLE_LANGUAGES.has(b.lang));
const RUN_TIMEOUT_MS = 120_000;

let server: ChildProcess;
let grpcAddress = "";
let httpAddress = "";
let scratch = "";

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), "windlass-readme-"));
  server = spawn(
    process.execPath,
    ["bin/windlass-memory.js", "serve", "--port", "0", "--http-port", "0"],
    {
      cwd: ROOT,
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  [grpcAddress, httpAddress] = await new Promise<[string, string]>((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`server did not start: ${out}`)), 30_000);
    server.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /gRPC ([\d.]+:\d+), Connect\/gRPC-Web\/JSON http:\/\/([\d.]+:\d+)/.exec(out);
      if (m?.[1] !== undefined && m[2] !== undefined) {
        clearTimeout(timer);
        resolve([m[1], m[2]]);
      }
    });
  });
}, 60_000);

afterAll(() => {
  server?.kill("SIGTERM");
  if (scratch !== "") rmSync(scratch, { recursive: true, force: true });
});

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to its end (or kills it at RUN_TIMEOUT_MS). */
function execute(
  cmd: string,
  args: string[],
  cwd: string,
  env: NodeJS.ProcessEnv = {},
): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), RUN_TIMEOUT_MS);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

const TOOLS_PATH = `${join(ROOT, ".tools/bin")}:${process.env.PATH ?? ""}`;

/** Runs a streaming command until it has printed something, then stops it. */
function streamUntilOutput(
  cmd: string,
  args: string[],
  cwd: string,
  env: NodeJS.ProcessEnv,
): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    let stopped = false;
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
      if (!stopped && stdout.trim() !== "") {
        stopped = true;
        child.kill("SIGTERM");
      }
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), RUN_TIMEOUT_MS);
    child.on("error", reject);
    child.on("close", (exit) => {
      clearTimeout(timer);
      resolve({ code: stopped ? 0 : exit, stdout, stderr });
    });
  });
}

interface Command {
  cmd: string;
  args: string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
}

/** How a reader runs an example in its language, in a directory of its own. */
function commandFor(block: CodeBlock, code: string, dir: string): Command {
  switch (block.lang) {
    case "sh":
    case "bash":
      return {
        cmd: "bash",
        args: ["-eo", "pipefail", "-c", code],
        cwd: ROOT,
        env: { PATH: TOOLS_PATH },
      };
    case "python":
      writeFileSync(join(dir, "example.py"), code);
      return {
        cmd: join(ROOT, ".venv/bin/python"),
        args: [join(dir, "example.py")],
        cwd: dir,
        env: {},
      };
    case "ts":
    case "js": {
      // A project of the reader's own, "type": "commonjs" as `npm init -y`
      // writes it, that installed the TypeScript client from the repository
      // (linked, as `npm install ./clients/ts` would). The README has the
      // TypeScript example saved as first.mts, the CommonJS one as first.cjs.
      writeFileSync(join(dir, "package.json"), '{ "type": "commonjs", "private": true }\n');
      mkdirSync(join(dir, "node_modules", "@windlass-memory"), { recursive: true });
      symlinkSync(join(ROOT, "clients/ts"), join(dir, "node_modules/@windlass-memory/client"));
      const file = join(dir, block.lang === "ts" ? "example.mts" : "example.cjs");
      writeFileSync(file, code);
      return { cmd: process.execPath, args: [file], cwd: dir, env: {} };
    }
    case "go":
      // A module of the reader's own that requires the Go client from a
      // checkout (the replace lines its README gives).
      writeFileSync(join(dir, "main.go"), code);
      writeFileSync(join(dir, "go.mod"), goModFor());
      writeFileSync(join(dir, "go.sum"), readFileSync(join(ROOT, "clients/go/go.sum")));
      return { cmd: "go", args: ["run", "."], cwd: dir, env: { GOFLAGS: "-mod=mod" } };
    default:
      throw new Error(`no runner for ${block.lang}`);
  }
}

/** Runs one example in its language; resolves with what it printed. */
async function runExample(block: CodeBlock, index: number): Promise<Outcome> {
  const code = retarget(block.code, grpcAddress, httpAddress);
  const dir = join(scratch, `example-${index}-line-${block.line}`);
  mkdirSync(dir, { recursive: true });
  const { cmd, args, cwd, env } = commandFor(block, code, dir);
  return block.action?.kind === "stream"
    ? streamUntilOutput(cmd, args, cwd, env)
    : execute(cmd, args, cwd, env);
}

function goModFor(): string {
  const clientMod = readFileSync(join(ROOT, "clients/go/go.mod"), "utf8");
  const module = /^module (\S+)$/m.exec(clientMod)?.[1];
  const genMod = readFileSync(join(ROOT, "gen/go/go.mod"), "utf8");
  const genModule = /^module (\S+)$/m.exec(genMod)?.[1];
  if (module === undefined || genModule === undefined) throw new Error("no module line in go.mod");
  return [
    "module readmeexample",
    "",
    "go 1.23",
    "",
    `require ${module} v0.0.0`,
    `require ${genModule} v0.0.0`,
    "",
    `replace ${module} => ${join(ROOT, "clients/go")}`,
    `replace ${genModule} => ${join(ROOT, "gen/go")}`,
    "",
  ].join("\n");
}

describe("the README's examples", () => {
  it("marks every block in a runnable language as run, stream or not run (reason)", () => {
    const unmarked = EXAMPLES.filter((b) => b.action === undefined).map((b) => `line ${b.line}`);
    expect(unmarked).toEqual([]);
    expect(EXAMPLES.filter((b) => b.action?.kind !== "not-run").length).toBeGreaterThan(0);
  });

  const runnable = EXAMPLES.filter((b) => b.action !== undefined && b.action.kind !== "not-run");
  it.each(runnable.map((b, i) => [`${b.lang} at line ${b.line}`, b, i] as const))(
    "runs the %s as written",
    async (_name, block, index) => {
      const outcome = await runExample(block, index);
      const detail = `exit ${outcome.code}\nstdout:\n${outcome.stdout}\nstderr:\n${outcome.stderr}`;
      expect(outcome.code, detail).toBe(0);
      // curl prints Connect's JSON errors and still exits 0.
      expect(outcome.stdout, detail).not.toMatch(/"code":\s*"[a-z_]+"/);
    },
    RUN_TIMEOUT_MS + 10_000,
  );
});
