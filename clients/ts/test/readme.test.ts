import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type ServerProcess, startServer } from "./support/server.js";

/**
 * Every ```ts block of README.md, run as written, in order, by plain Node (it
 * strips the types) in a project that has this package installed, against
 * one fresh server; only the default addresses are replaced by its ports.
 */
const run = promisify(execFile);
const PACKAGE_DIR = fileURLToPath(new URL("../", import.meta.url));
const blocks = [
  ...readFileSync(join(PACKAGE_DIR, "README.md"), "utf8").matchAll(/```ts\n([\s\S]*?)```/g),
].map((m) => m[1] as string);

/** What each example prints, in README order. */
const EXPECTED: RegExp[] = [
  /^1 Book me a table for two\.\n2 For which evening\?\n$/,
  /^weather \{ city: 'Oslo' \} call_1\n$/,
  /^Answer in one line\. \| Summarise the 2024 report\. \| \(tool call\) \| \[tool result cleared: read_report call r1, 25 tokens\]\n1 true\n$/,
  /^summary through seq [1-9]\d*:\n.+/,
  /^oops\n1 1n 1\n$/,
  /^FAILED_PRECONDITION - .*\nINVALID_ARGUMENT - .*tool_call_id.*\n$/,
];

let server: ServerProcess;
let project: string;

beforeAll(async () => {
  server = await startServer();
  project = mkdtempSync(join(tmpdir(), "windlass-ts-readme-"));
  // "type": "commonjs", as `npm init -y` writes it: the README has the examples saved as .mts.
  writeFileSync(join(project, "package.json"), '{ "type": "commonjs", "private": true }');
  mkdirSync(join(project, "node_modules", "@windlass-memory"), { recursive: true });
  symlinkSync(PACKAGE_DIR, join(project, "node_modules", "@windlass-memory", "client"), "dir");
});

afterAll(async () => {
  await server?.stop();
  if (project !== undefined) rmSync(project, { recursive: true, force: true });
});

it("has the examples this test expects", () => {
  expect(blocks).toHaveLength(EXPECTED.length);
});

it("runs every example as written", async () => {
  for (const [i, block] of blocks.entries()) {
    const code = block
      .replaceAll("http://127.0.0.1:50051", server.url("grpc"))
      .replaceAll("http://127.0.0.1:8080", server.url("connect"));
    const file = join(project, `example-${i + 1}.mts`);
    writeFileSync(file, code);
    const { stdout } = await run(process.execPath, [file], { cwd: project, timeout: 60_000 });
    expect(stdout, `example ${i + 1}`).toMatch(EXPECTED[i] as RegExp);
  }
}, 300_000);
