import { type ChildProcess, execFile, spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterEach, describe, expect, it } from "vitest";
import { writeSelfSignedCert } from "../support/self-signed.js";

/**
 * The `windlass-memory` command as an operator runs it: the compiled bin
 * (npm test builds it first), real signals, real exit statuses, curl.
 */
const BIN = new URL("../../bin/windlass-memory.js", import.meta.url).pathname;
const run = promisify(execFile);

interface Served {
  child: ChildProcess;
  grpcPort: number;
  httpPort: number;
  stdout: () => string;
  stderr: () => string;
}

async function serve(args: string[] = [], env: Record<string, string> = {}): Promise<Served> {
  const child = spawn(
    process.execPath,
    [BIN, "serve", "--port", "0", "--http-port", "0", ...args],
    {
      env: { PATH: process.env.PATH ?? "", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let err = "";
  child.stderr?.on("data", (d: Buffer) => {
    err += d.toString();
  });
  let out = "";
  const ports = await new Promise<[number, number]>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line; stderr: ${err}`)), 10_000);
    child.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /gRPC [\d.]+:(\d+), Connect\/gRPC-Web\/JSON https?:\/\/[\d.]+:(\d+)/.exec(out);
      if (m !== null) {
        clearTimeout(timer);
        resolve([Number(m[1]), Number(m[2])]);
      }
    });
    child.once("exit", (code) => reject(new Error(`exited ${code}: ${err}`)));
  });
  return { child, grpcPort: ports[0], httpPort: ports[1], stdout: () => out, stderr: () => err };
}

/** curl must be on PATH: a missing tool fails the test, never skips it. */
function requireCurl(): void {
  const probe = spawnSync("curl", ["--version"], { encoding: "utf8" });
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error(
      `curl is needed on PATH (Debian: apt-get install curl): ${probe.error?.message ?? probe.stderr}`,
    );
  }
}

describe("the windlass-memory command", () => {
  const children: ChildProcess[] = [];
  afterEach(() => {
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
    children.length = 0;
  });

  it("serves Connect JSON to curl with default settings and stops cleanly on SIGTERM", async () => {
    requireCurl();
    // A grace period far beyond the test's: with nothing in flight, the
    // server must stop at once, not run it out.
    const s = await serve(["--shutdown-grace-ms", "60000"]);
    children.push(s.child);
    const url = `http://127.0.0.1:${s.httpPort}/windlass.memory.v1.MemoryService`;
    const add = await run("curl", [
      "-sS",
      "-X",
      "POST",
      "-H",
      "Content-Type: application/json",
      "--data",
      '{"threadId":"t1","messages":[{"role":"ROLE_USER","content":"hello"}]}',
      `${url}/Add`,
    ]);
    expect(JSON.parse(add.stdout)).toMatchObject({ firstSeq: "1", lastSeq: "1" });
    const get = await run("curl", [
      "-sS",
      "-H",
      "Content-Type: application/json",
      "--data",
      '{"threadId":"t1"}',
      `${url}/Get`,
    ]);
    expect(JSON.parse(get.stdout).messages[0]).toMatchObject({
      role: "ROLE_USER",
      content: "hello",
    });
    const bad = await run("curl", [
      "-sS",
      "-H",
      "Content-Type: application/json",
      "--data",
      '{"messages":[{"content":"x"}]}',
      `${url}/Add`,
    ]);
    expect(JSON.parse(bad.stdout)).toMatchObject({ code: "invalid_argument" });
    expect(JSON.parse(bad.stdout).message).toContain("messages[0].role");

    const started = Date.now();
    s.child.kill("SIGTERM");
    const [code] = (await once(s.child, "exit")) as [number | null];
    expect(code).toBe(0);
    expect(Date.now() - started).toBeLessThan(10_000);
    // Logs are JSON lines, and never carry message contents.
    for (const line of s.stderr().trim().split("\n")) expect(() => JSON.parse(line)).not.toThrow();
    expect(s.stderr()).not.toContain("hello");
  });

  it("exits 0 on a SIGTERM sent the moment it says it listens", async () => {
    const s = await serve();
    children.push(s.child);
    s.child.kill("SIGTERM");
    const [code, signal] = (await once(s.child, "exit")) as [number | null, string | null];
    expect(signal).toBeNull();
    expect(code).toBe(0);
  });

  it.each([
    [["--port", "70000"], {}, "--port / WINDLASS_PORT"],
    [["--store", "mongodb://x"], {}, "--store / WINDLASS_STORE"],
    [["--bogus"], {}, "unknown flag --bogus"],
    [[], { WINDLASS_SUMMARIZER: "openai" }, "needs --openai-base-url"],
    [["--openai-api-key", "sk-secret"], {}, "WINDLASS_OPENAI_API_KEY"],
  ])("refuses bad configuration %j with one clear line and status 2", async (args, env, text) => {
    const r = await run(process.execPath, [BIN, "serve", ...args], {
      env: { PATH: process.env.PATH ?? "", ...env },
    }).then(
      () => ({ code: 0, stderr: "" }),
      (e: { code: number; stderr: string }) => e,
    );
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toContain(text);
    expect(r.stderr).not.toContain("sk-secret");
  });

  it.each([["--port"], ["--http-port"], ["--metrics-port"]])(
    "exits 1 when %s is taken, leaving nothing listening",
    async (flag) => {
      const taken = net.createServer();
      await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
      const port = String((taken.address() as net.AddressInfo).port);
      try {
        const args = ["serve", "--port", "0", "--http-port", "0", flag, port];
        // execFile's timeout kills a process that hangs instead of exiting.
        const r = await run(process.execPath, [BIN, ...args], {
          env: { PATH: process.env.PATH ?? "" },
          timeout: 20_000,
        }).then(
          () => ({ code: 0 as number | null, signal: null as string | null, stderr: "" }),
          (e: { code: number | null; signal: string | null; stderr: string }) => e,
        );
        expect({ code: r.code, signal: r.signal }).toEqual({ code: 1, signal: null });
        expect(r.stderr).toContain("could not start");
      } finally {
        taken.close();
      }
    },
  );

  /** Runs the command to its exit (execFile's timeout kills one that hangs instead). */
  const exitOf = (args: string[]) =>
    run(process.execPath, [BIN, ...args], {
      env: { PATH: process.env.PATH ?? "" },
      timeout: 20_000,
    }).then(
      () => ({ code: 0 as number | null, stderr: "" }),
      (e: { code: number | null; stderr: string }) => e,
    );

  it("exits 1, as documented, naming --store, when another server holds the SQLite file", async () => {
    const dir = mkdtempSync(join(tmpdir(), "windlass-lock-"));
    try {
      const store = `sqlite:${join(dir, "memory.db")}`;
      const first = await serve(["--store", store]);
      children.push(first.child);
      const r = await exitOf(["serve", "--port", "0", "--http-port", "0", "--store", store]);
      expect(r.code).toBe(1);
      expect(r.stderr.trim().split("\n")).toHaveLength(1);
      expect(r.stderr).toContain("could not start: --store / WINDLASS_STORE: cannot open");
      expect(r.stderr).toContain("in use by another process");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each([
    [
      ["--tls-cert", "/nope/cert.pem", "--tls-key", "/nope/key.pem"],
      "--tls-cert / WINDLASS_TLS_CERT",
    ],
    [["--tls-cert", BIN, "--tls-key", "/nope/key.pem"], "--tls-key / WINDLASS_TLS_KEY"],
    [
      ["--tls-cert", BIN, "--tls-key", BIN, "--tls-client-ca", "/nope/ca.pem"],
      "--tls-client-ca / WINDLASS_TLS_CLIENT_CA",
    ],
  ])("names the flag of a file it cannot read: %j", async (args, setting) => {
    const r = await exitOf(["serve", "--port", "0", "--http-port", "0", ...args]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`could not start: ${setting}: cannot read "/nope/`);
    expect(r.stderr).toContain("ENOENT");
  });

  it("says https:// in its listening line when it serves TLS", async () => {
    requireCurl();
    const dir = mkdtempSync(join(tmpdir(), "windlass-tls-line-"));
    try {
      const { cert, key } = await writeSelfSignedCert(dir);
      const s = await serve(["--tls-cert", cert, "--tls-key", key]);
      children.push(s.child);
      const line = /Connect\/gRPC-Web\/JSON (\S+)/.exec(s.stdout())?.[1] ?? "";
      expect(line).toBe(`https://127.0.0.1:${s.httpPort}`);
      // The URL it prints is the one that answers.
      const r = await run("curl", ["-sS", "--cacert", cert, `${line}/healthz`]);
      expect(r.stdout.trim()).toBe("ok");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("prints the package's version with --version", async () => {
    const pkg = JSON.parse(
      readFileSync(new URL("../../package.json", import.meta.url), "utf8"),
    ) as { version: string };
    for (const args of [["--version"], ["serve", "--version"]]) {
      const r = await run(process.execPath, [BIN, ...args]);
      expect(r.stdout).toBe(`windlass-memory ${pkg.version}\n`);
    }
  });

  it("takes a boolean flag alone as true", async () => {
    requireCurl();
    // An unknown JSON key is refused by default and dropped with the flag given alone.
    const body = '{"threadId":"t","messages":[{"role":"ROLE_USER","content":"x"}],"extra":1}';
    const add = async (s: Served) =>
      JSON.parse(
        (
          await run("curl", [
            "-sS",
            "-H",
            "Content-Type: application/json",
            "--data",
            body,
            `http://127.0.0.1:${s.httpPort}/windlass.memory.v1.MemoryService/Add`,
          ])
        ).stdout,
      ) as Record<string, unknown>;
    const strict = await serve();
    children.push(strict.child);
    expect(await add(strict)).toMatchObject({ code: "invalid_argument" });
    const lax = await serve(["--json-ignore-unknown-fields"]);
    children.push(lax.child);
    expect(await add(lax)).toMatchObject({ lastSeq: "1" });
  });

  it("prints its flags with --help", async () => {
    const r = await run(process.execPath, [BIN, "--help"]);
    for (const env of ["WINDLASS_HOST", "WINDLASS_PORT", "WINDLASS_HTTP_PORT", "WINDLASS_STORE"]) {
      expect(r.stdout).toContain(env);
    }
  });
});
