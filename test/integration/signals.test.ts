import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { connect } from "node:net";
import { afterEach, describe, expect, it } from "vitest";

/**
 * `npm start` under a supervisor: a process manager signals the PID it
 * started, a shell's Ctrl-C or `docker stop` with an init signals the whole
 * process group, and some tools find the server itself. Each way, the server
 * must stop gracefully, the started process must exit 0, and nothing may be
 * left running. Needs dist/ (npm test builds it first).
 */
const ROOT = new URL("../..", import.meta.url).pathname;

interface ProcInfo {
  pid: number;
  ppid: number;
  pgrp: number;
  cmdline: string;
}

/** Every live process, read from /proc (fields after the command name: state, ppid, pgrp). */
function processes(): ProcInfo[] {
  const out: ProcInfo[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (fields[0] === "Z") continue; // exited, waiting to be reaped: not running
      out.push({
        pid: Number(name),
        ppid: Number(fields[1]),
        pgrp: Number(fields[2]),
        cmdline: readFileSync(`/proc/${name}/cmdline`, "utf8").replace(/\0/g, " ").trim(),
      });
    } catch {
      // The process exited while we looked.
    }
  }
  return out;
}

/** The processes in group `pgrp`, and every descendant of `root` wherever it went. */
function leftovers(pgrp: number, root: number): ProcInfo[] {
  const all = processes();
  const found = new Map<number, ProcInfo>();
  for (const p of all) if (p.pgrp === pgrp) found.set(p.pid, p);
  const parents = new Set([root, ...found.keys()]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const p of all) {
      if (parents.has(p.ppid) && !found.has(p.pid)) {
        found.set(p.pid, p);
        parents.add(p.pid);
        grew = true;
      }
    }
  }
  return [...found.values()];
}

interface Started {
  npm: ChildProcess;
  pid: number;
  httpPort: number;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr: () => string;
}

/** Runs the real `npm start` in its own process group and waits for the listening line. */
async function npmStart(): Promise<Started> {
  const npm = spawn("npm", ["start", "--", "--port", "0", "--http-port", "0"], {
    cwd: ROOT,
    detached: true,
    env: { ...process.env, WINDLASS_LOG_LEVEL: "info" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const pid = npm.pid;
  if (pid === undefined) throw new Error("npm did not start");
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    npm.once("exit", (code, signal) => resolve({ code, signal })),
  );
  let err = "";
  npm.stderr?.on("data", (d: Buffer) => {
    err += d.toString();
  });
  let out = "";
  const httpPort = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no listening line in 20 s; stdout: ${out}; stderr: ${err}`)),
      20_000,
    );
    npm.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /windlass-memory listening: .*Connect\/gRPC-Web\/JSON http:\/\/[\d.]+:(\d+)/.exec(
        out,
      );
      if (m !== null) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`npm exited (${code ?? signal}) before listening: ${err}`));
    });
  });
  return { npm, pid, httpPort, exited, stderr: () => err };
}

function portAccepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

const TARGETS = ["the PID npm start started", "the process group", "the server"] as const;
const SIGNALS = ["SIGTERM", "SIGINT"] as const;

describe("signals under `npm start`", () => {
  let started: Started | undefined;
  afterEach(() => {
    // A failed case must not leave a server behind either.
    if (started !== undefined) {
      for (const p of leftovers(started.pid, started.pid)) {
        try {
          process.kill(p.pid, "SIGKILL");
        } catch {
          // already gone
        }
      }
    }
    started = undefined;
  });

  for (const target of TARGETS) {
    for (const signal of SIGNALS) {
      it(`${signal} to ${target}: graceful stop, exit 0, nothing left`, async () => {
        const s = await npmStart();
        started = s;
        const group = leftovers(s.pid, s.pid);
        const server = group.find((p) => p.pid !== s.pid && p.cmdline.includes("serve"));
        // The server runs in the group (so the scan below can see a leftover).
        expect(server, JSON.stringify(group)).toBeDefined();
        if (server === undefined) return;
        expect(await portAccepts(s.httpPort)).toBe(true);

        const pid =
          target === "the PID npm start started"
            ? s.pid
            : target === "the process group"
              ? -s.pid
              : server.pid;
        process.kill(pid, signal);

        const exit = await s.exited;
        expect(exit).toEqual({ code: 0, signal: null });
        // npm waits for its child, so by now nothing of the group may run.
        expect(leftovers(s.pid, s.pid)).toEqual([]);
        expect(await portAccepts(s.httpPort)).toBe(false);
        // The server's own shutdown ran to the end (not a kill).
        expect(s.stderr()).toContain('"msg":"signal received; shutting down"');
        expect(s.stderr()).toContain('"msg":"stopped"');
      }, 40_000);
    }
  }
});
