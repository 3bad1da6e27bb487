import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ServerProcess, startServer } from "./support/server.js";

/**
 * The package as another project gets it: `npm install` of the packed
 * tarball and of the directory into a project made by `npm init -y`, then
 * plain Node (no TypeScript, no vitest) imports it by name from ESM and
 * requires it from CommonJS and talks to the real server; tsc checks a
 * TypeScript file against the installed .d.ts.
 */
const run = promisify(execFile);
const PACKAGE_DIR = fileURLToPath(new URL("../", import.meta.url));
const TSC = join(PACKAGE_DIR, "node_modules", ".bin", "tsc");
const NPM_FLAGS = ["--no-audit", "--no-fund", "--prefer-offline", "--loglevel", "error"];

const SCRIPT = `
import { createMemoryClient, user, assistant, toolCall, windowStrategy, MemoryError } from "@windlass-memory/client";
const memory = createMemoryClient({ baseUrl: process.argv[2], transport: "grpc" });
await memory.add(process.argv[3], [user("hi"), assistant("", { toolCalls: [toolCall("c1", "f", { a: 1 })] })], {
  strategy: windowStrategy(10),
});
const { messages } = await memory.get(process.argv[3]);
const refused = await memory.add(process.argv[3], [{ role: 0 }]).catch((e) => e);
console.log(JSON.stringify({
  contents: messages.map((m) => m.content),
  args: messages[1].toolCalls[0].arguments,
  refused: refused instanceof MemoryError ? refused.codeName : String(refused),
}));
memory.close();
`;

// The same from CommonJS: require() of the ES module (Node 22.12 and later), no top-level await.
const SCRIPT_CJS = `
const { createMemoryClient, user, assistant, toolCall, windowStrategy, MemoryError } = require("@windlass-memory/client");
async function main() {
${SCRIPT.replaceAll(/^import .*$/gm, "")}
}
main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
`;

const TYPED = `
import { createMemoryClient, type MemoryClient, user } from "@windlass-memory/client";
const memory: MemoryClient = createMemoryClient({ baseUrl: "http://127.0.0.1:1", transport: "connect" });
export const pending: Promise<bigint> = memory.add("t", [user("x")]).then((r) => r.lastSeq);
`;

let server: ServerProcess;
let work: string;

beforeAll(async () => {
  server = await startServer();
  work = mkdtempSync(join(tmpdir(), "windlass-ts-install-"));
});

afterAll(async () => {
  await server?.stop();
  if (work !== undefined) rmSync(work, { recursive: true, force: true });
});

async function project(name: string, spec: string): Promise<string> {
  const dir = join(work, name);
  await run("mkdir", ["-p", dir]);
  // A project as `npm init -y` makes it: npm 11 writes "type": "commonjs".
  await run("npm", ["init", "-y", "--loglevel", "error"], { cwd: dir, timeout: 60_000 });
  await run("npm", ["install", ...NPM_FLAGS, spec], { cwd: dir, timeout: 240_000 });
  writeFileSync(join(dir, "main.mjs"), SCRIPT);
  writeFileSync(join(dir, "main.cjs"), SCRIPT_CJS);
  writeFileSync(join(dir, "typed.ts"), TYPED);
  return dir;
}

async function expectWorks(dir: string, thread: string): Promise<void> {
  for (const main of ["main.mjs", "main.cjs"]) {
    const { stdout } = await run(
      process.execPath,
      [main, server.url("grpc"), `${thread}-${main}`],
      {
        cwd: dir,
        timeout: 60_000,
      },
    );
    expect(JSON.parse(stdout), main).toEqual({
      contents: ["hi", ""],
      args: '{"a":1}',
      refused: "INVALID_ARGUMENT",
    });
  }
  await run(
    TSC,
    [
      "--noEmit",
      "--strict",
      "--module",
      "nodenext",
      "--moduleResolution",
      "nodenext",
      "--target",
      "es2022",
      "--types",
      "node",
      "--typeRoots",
      join(PACKAGE_DIR, "node_modules", "@types"),
      "typed.ts",
    ],
    { cwd: dir, timeout: 120_000 },
  );
}

describe("installed into another project", () => {
  it("works from the packed tarball", async () => {
    await run("npm", ["pack", ...NPM_FLAGS, "--pack-destination", work], {
      cwd: PACKAGE_DIR,
      timeout: 240_000,
    });
    const tarball = readdirSync(work).find((f) => f.endsWith(".tgz"));
    expect(tarball).toBeDefined();
    const dir = await project("from-tarball", join(work, tarball as string));
    await expectWorks(dir, "install-tarball");
  }, 600_000);

  it("works from the directory path", async () => {
    const dir = await project("from-path", PACKAGE_DIR);
    await expectWorks(dir, "install-path");
  }, 600_000);
});
