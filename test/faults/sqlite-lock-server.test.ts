import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ServiceError, status } from "@grpc/grpc-js";
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import {
  holdWriteLock,
  killHard,
  type LockHolder,
  type ServerProcess,
  startServerProcess,
  stopGracefully,
} from "../support/sqlite-server.js";
import { createGrpcClient, type MemoryGrpcClient } from "../transport/clients.js";

/**
 * The real server while another process holds the database's write lock, so
 * an Add waits in SQLite's busy handler (5 s by default): an Add whose
 * deadline passes meanwhile must never be stored, even once the lock is
 * released; and a SIGTERM must still exit within the shutdown grace plus a
 * little, refusing the Add and leaving it unstored.
 */

const GRACE_MS = 200;
/**
 * It needs the grace, the store's 250 ms minimum and a 25 ms slice of the
 * lock wait, plus the process's own exit: 0.6 s measured on an idle machine,
 * so this is over 6x room, and still below the 5 s busy timeout that a
 * worker left alone would wait out before the process could exit.
 */
const EXIT_BOUND_MS = 4000;
const strategy = { kind: { case: "buffer" as const, value: {} }, maxStored: 1000 };

describe("SQLite server while another process holds the write lock", () => {
  const dir = mkdtempSync(join(tmpdir(), "windlass-shutdown-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const servers: ServerProcess[] = [];
  const clients: MemoryGrpcClient[] = [];
  const holders: LockHolder[] = [];
  afterEach(async () => {
    for (const c of clients.splice(0)) c.close();
    for (const s of servers.splice(0)) await killHard(s.child);
    for (const h of holders.splice(0)) await h.release();
  });

  /** The thread ids a fresh open of the file holds. */
  const storedThreads = (path: string): unknown[] => {
    const db = new Database(path, { readonly: true });
    try {
      return db.prepare("SELECT thread_id FROM threads ORDER BY thread_id").pluck().all();
    } finally {
      db.close();
    }
  };
  const message = (content: string) => ({
    strategy,
    messages: [{ role: Role.USER, content }],
  });

  it("never stores an Add whose deadline passed while it waited, even once the lock is gone", {
    timeout: 60_000,
  }, async () => {
    const path = join(dir, "deadline.db");
    const server = await startServerProcess(["--store", `sqlite:${path}`]);
    servers.push(server);
    const client = createGrpcClient(server.address);
    clients.push(client);
    const holder = await holdWriteLock(path);
    holders.push(holder);
    const late = await client
      .add({ threadId: "late", ...message("too late") }, { deadline: Date.now() + 300 })
      .then(
        () => "stored",
        (err: ServiceError) => err.code,
      );
    expect(late).toBe(status.DEADLINE_EXCEEDED);
    await holder.release();
    // Written after the late Add reached the worker: once it is stored, the late one was decided.
    await client.add({ threadId: "later", ...message("after the lock") });
    expect(await stopGracefully(server.child)).toBe(0);
    expect(storedThreads(path)).toEqual(["later"]);
  });

  it("exits 0 within the grace, refusing the Add it had not stored", {
    timeout: 60_000,
  }, async () => {
    const path = join(dir, "memory.db");
    const server = await startServerProcess([
      "--store",
      `sqlite:${path}`,
      "--shutdown-grace-ms",
      String(GRACE_MS),
    ]);
    servers.push(server);
    const client = createGrpcClient(server.address);
    clients.push(client);
    await client.add({ threadId: "before", ...message("stored before the lock") });
    holders.push(await holdWriteLock(path));
    const stuck = client.add({ threadId: "stuck", ...message("waits for the lock") }).then(
      () => "stored",
      (err: ServiceError) => `refused ${err.code}`,
    );
    // The Add is in the worker, waiting, once a Get on another thread still
    // answers (reads go on) and the Add has not: it cannot commit meanwhile.
    const got = await client.get({ threadId: "before" });
    expect(got.messages).toHaveLength(1);
    const exited = once(server.child, "exit") as Promise<[number | null, string | null]>;
    const started = Date.now();
    server.child.kill("SIGTERM");
    const [code] = await exited;
    const took = Date.now() - started;
    expect(code).toBe(0);
    expect(took).toBeLessThan(EXIT_BOUND_MS);
    expect(await stuck).not.toBe("stored");
    // The Add was still in flight when the grace ended: this test is about a stuck write.
    const graceOver = server
      .stderr()
      .split("\n")
      .filter((line) => line.includes("grace period over"))
      .map((line) => JSON.parse(line) as { callsInFlight: number });
    expect(graceOver).toMatchObject([{ callsInFlight: 1 }]);
    await holders.splice(0)[0]?.release();
    expect(storedThreads(path)).toEqual(["before"]);
  });
});
