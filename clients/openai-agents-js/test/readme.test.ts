import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type ServerProcess, startServer } from "./support/server.js";

/**
 * The README's examples, run as written by plain Node (it strips the types)
 * in a project where @openai/agents, zod and both packages are
 * installed, against a fresh server; only the default address is replaced by
 * its port.
 */
const run = promisify(execFile);
const PACKAGE_DIR = fileURLToPath(new URL("../", import.meta.url));
const blocks = [
  ...readFileSync(join(PACKAGE_DIR, "README.md"), "utf8").matchAll(/```ts\n([\s\S]*?)```/g),
].map((m) => m[1] as string);

let server: ServerProcess;
let project: string;

beforeAll(async () => {
  server = await startServer();
  project = mkdtempSync(join(tmpdir(), "windlass-openai-agents-readme-"));
  writeFileSync(join(project, "package.json"), '{ "type": "module", "private": true }');
  const modules = join(project, "node_modules");
  mkdirSync(join(modules, "@windlass-memory"), { recursive: true });
  for (const name of ["@openai", "zod"]) {
    symlinkSync(join(PACKAGE_DIR, "node_modules", name), join(modules, name), "dir");
  }
  symlinkSync(PACKAGE_DIR, join(modules, "@windlass-memory", "openai-agents"), "dir");
  symlinkSync(join(PACKAGE_DIR, "..", "ts"), join(modules, "@windlass-memory", "client"), "dir");
});

afterAll(async () => {
  await server?.stop();
  if (project !== undefined) rmSync(project, { recursive: true, force: true });
});

// What each example prints, in order.
const EXPECTED = [
  [
    "3 degrees in Oslo: bring a coat.",
    "You asked about Oslo.",
    "message function_call function_call_result message message message",
  ].join("\n"),
];

it("runs the README examples as written", async () => {
  expect(blocks).toHaveLength(EXPECTED.length);
  for (const [i, block] of blocks.entries()) {
    const file = join(project, `example-${i}.ts`);
    writeFileSync(file, block.replaceAll("http://127.0.0.1:50051", server.grpcUrl));
    const { stdout } = await run(process.execPath, [file], { cwd: project, timeout: 60_000 });
    expect(stdout.startsWith(EXPECTED[i] ?? "-")).toBe(true);
    expect(stdout).toContain('You asked about Oslo."');
  }
}, 120_000);
