import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { createGrpcClient } from "../transport/clients.js";

/**
 * The README promises that the SQLite store fsyncs every write before it is
 * acknowledged (`synchronous=FULL`). The kill -9 test cannot tell FULL from
 * NORMAL (a process crash loses nothing with either; only a power loss
 * does), so this test watches the syscalls: the compiled server runs under
 * `strace -f -e trace=fsync,fdatasync`, whose trace file gets one line per
 * sync before the syscall returns to SQLite, so before the reply is sent.
 * Each acknowledged Add must have been preceded by a sync of the WAL file.
 * A control shows the counter can tell: with `synchronous=NORMAL`, commits
 * in WAL mode are not synced at all.
 */

const BIN = new URL("../../bin/windlass-memory.js", import.meta.url).pathname;
const REPO = new URL("../..", import.meta.url).pathname;
const ADDS = 20;
const SYNC_CALLS = "fsync,fdatasync";

/** strace must be there: a missing tool fails the run, never skips it. */
function requireStrace(): void {
  const probe = spawnSync("strace", ["-V"], { encoding: "utf8" });
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error(
      "strace is needed to observe SQLite's fsync (Debian: apt-get install strace); " +
        `running it failed: ${probe.error?.message ?? probe.stderr}`,
    );
  }
}

/** `strace` options: follow threads, trace only syncs, one line per call in `file`. */
function straceArgs(file: string): string[] {
  return [
    "-f",
    "-qqq",
    "--seccomp-bpf",
    "-e",
    `trace=${SYNC_CALLS}`,
    "-e",
    "signal=none",
    "-o",
    file,
  ];
}

interface Sync {
  readonly pid: number;
  readonly fd: number;
}

/** The completed sync calls in a trace file written by strace -f. */
function syncsIn(file: string): Sync[] {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    return [];
  }
  const syncs: Sync[] = [];
  // "PID fdatasync(FD) = 0", or split by another thread: "PID fsync(FD <unfinished ...>"
  // then "PID <... fsync resumed>) = 0"; only the first carries the fd.
  const started = new Map<number, number>();
  for (const line of text.split("\n")) {
    const whole = /^(\d+) +(?:fsync|fdatasync)\((\d+)\)\s+= 0$/.exec(line);
    if (whole !== null) {
      syncs.push({ pid: Number(whole[1]), fd: Number(whole[2]) });
      continue;
    }
    const begun = /^(\d+) +(?:fsync|fdatasync)\((\d+) <unfinished/.exec(line);
    if (begun !== null) {
      started.set(Number(begun[1]), Number(begun[2]));
      continue;
    }
    const resumed = /^(\d+) +<\.\.\. (?:fsync|fdatasync) resumed>\)\s+= 0$/.exec(line);
    if (resumed !== null) {
      const pid = Number(resumed[1]);
      syncs.push({ pid, fd: started.get(pid) ?? -1 });
    }
  }
  return syncs;
}

/** The process strace started (its only child). */
function tracee(stracePid: number): number {
  const children = readFileSync(`/proc/${stracePid}/task/${stracePid}/children`, "utf8").trim();
  const pid = Number(children.split(/\s+/)[0]);
  if (!Number.isInteger(pid) || pid <= 0) throw new Error(`strace ${stracePid} has no child`);
  return pid;
}

describe("SQLite store durability", () => {
  const dir = mkdtempSync(join(tmpdir(), "windlass-fsync-"));
  const children: ChildProcess[] = [];
  afterEach(async () => {
    // Killing strace would leave the server running: kill the server, and
    // strace exits with it.
    for (const child of children) {
      if (child.exitCode !== null || child.signalCode !== null) continue;
      const exited = once(child, "exit");
      try {
        process.kill(tracee(child.pid ?? 0), "SIGKILL");
      } catch {
        child.kill("SIGKILL"); // no server started
      }
      await exited;
    }
    children.length = 0;
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** Starts the compiled server on a SQLite file under strace; its gRPC port and pid. */
  async function startTraced(trace: string, db: string): Promise<{ port: number; server: number }> {
    const strace = spawn(
      "strace",
      [
        ...straceArgs(trace),
        process.execPath,
        BIN,
        "serve",
        "--port",
        "0",
        "--http-port",
        "0",
        "--store",
        `sqlite:${db}`,
      ],
      { env: { PATH: process.env.PATH ?? "" }, stdio: ["ignore", "pipe", "pipe"] },
    );
    children.push(strace);
    let err = "";
    strace.stderr?.on("data", (d: Buffer) => {
      err += d.toString();
    });
    const port = await new Promise<number>((resolve, reject) => {
      let out = "";
      const timer = setTimeout(
        () => reject(new Error(`no listening line in 30 s; stderr: ${err}`)),
        30_000,
      );
      strace.stdout?.on("data", (d: Buffer) => {
        out += d.toString();
        const m = /listening: gRPC [\d.]+:(\d+),/.exec(out);
        if (m !== null) {
          clearTimeout(timer);
          resolve(Number(m[1]));
        }
      });
      strace.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`strace exited (${code}) before the server listened; stderr: ${err}`));
      });
    });
    const server = tracee(strace.pid ?? 0);
    return { port, server };
  }

  it("fsyncs the WAL before acknowledging each Add", { timeout: 60_000 }, async () => {
    requireStrace();
    const trace = join(dir, "server.trace");
    const db = join(dir, "memory.db");
    const { port, server } = await startTraced(trace, db);
    const client = createGrpcClient(`127.0.0.1:${port}`);
    try {
      const syncedFiles = new Set<string>();
      for (let i = 1; i <= ADDS; i++) {
        const before = syncsIn(trace).length;
        const r = await client.add({
          threadId: "durable",
          requestId: `add-${i}`,
          messages: [{ role: Role.USER, content: `message ${i}` }],
        });
        expect(Number(r.lastSeq)).toBe(i);
        // strace writes a line when the sync returns, before the server goes on
        // to answer: a sync missing here happened after the acknowledgement, or never.
        const during = syncsIn(trace).slice(before);
        expect(during.length, `syncs between Add ${i - 1}'s reply and Add ${i}'s`).toBeGreaterThan(
          0,
        );
        for (const s of during) {
          try {
            syncedFiles.add(readlinkSync(`/proc/${server}/fd/${s.fd}`));
          } catch {
            // fd closed since: not the WAL, which stays open
          }
        }
      }
      expect([...syncedFiles]).toContain(`${db}-wal`);
    } finally {
      client.close();
    }
  });

  it("commits concurrent Adds in groups: fewer fsyncs than Adds, each acknowledged after one", {
    timeout: 60_000,
  }, async () => {
    requireStrace();
    const trace = join(dir, "group.trace");
    const db = join(dir, "group.db");
    const { port, server } = await startTraced(trace, db);
    const client = createGrpcClient(`127.0.0.1:${port}`);
    try {
      // Learn the WAL's fd from one Add, so later counts are WAL syncs only.
      await client.add({ threadId: "warm", messages: [{ role: Role.USER, content: "warm" }] });
      const walFds = new Set<number>();
      for (const s of syncsIn(trace)) {
        try {
          if (readlinkSync(`/proc/${server}/fd/${s.fd}`) === `${db}-wal`) walFds.add(s.fd);
        } catch {
          // closed since
        }
      }
      expect(walFds.size).toBeGreaterThan(0);
      const walSyncs = (): number => syncsIn(trace).filter((s) => walFds.has(s.fd)).length;
      const start = walSyncs();
      const concurrent = 64;
      const late: number[] = [];
      await Promise.all(
        Array.from({ length: concurrent }, async (_, i) => {
          const before = walSyncs();
          const r = await client.add({
            threadId: `group-${i}`,
            requestId: `group-${i}`,
            messages: [{ role: Role.USER, content: `message ${i}` }],
          });
          expect(Number(r.lastSeq)).toBe(1);
          // A WAL sync that returned after this Add was sent and before its reply.
          if (walSyncs() <= before) late.push(i);
        }),
      );
      expect(late, "Adds acknowledged with no WAL fsync since they were sent").toEqual([]);
      const used = walSyncs() - start;
      expect(used).toBeGreaterThan(0);
      expect(used, `${used} WAL fsyncs for ${concurrent} concurrent Adds`).toBeLessThan(concurrent);
    } finally {
      client.close();
    }
  });

  it("sees no sync per commit with synchronous=NORMAL, so the test above can fail", async () => {
    requireStrace();
    const trace = join(dir, "normal.trace");
    const script = `
      const Database = require("better-sqlite3");
      const db = new Database(process.argv[2]);
      db.pragma("locking_mode = EXCLUSIVE");
      db.pragma("journal_mode = WAL");
      db.exec("CREATE TABLE t (x TEXT)");
      const mode = process.argv[1];
      db.pragma("synchronous = " + mode);
      const insert = db.prepare("INSERT INTO t (x) VALUES (?)");
      for (let i = 0; i < ${ADDS}; i++) insert.run("row " + i);
      db.close();
    `;
    const run = (mode: string): number => {
      const r = spawnSync(
        "strace",
        [
          ...straceArgs(`${trace}.${mode}`),
          process.execPath,
          "-e",
          script,
          mode,
          join(dir, `${mode}.db`),
        ],
        { cwd: REPO, encoding: "utf8" },
      );
      expect(r.status, r.stderr).toBe(0);
      return syncsIn(`${trace}.${mode}`).length;
    };
    // Opening and closing sync a few times either way; per-commit syncs only under FULL.
    const normal = run("NORMAL");
    const full = run("FULL");
    expect(full - normal).toBeGreaterThanOrEqual(ADDS);
    expect(normal).toBeLessThan(ADDS);
  });
});
