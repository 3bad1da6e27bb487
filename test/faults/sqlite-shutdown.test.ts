import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ServiceError } from "@grpc/grpc-js";
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import {
  holdWriteLock,
  killHard,
  type LockHolder,
  type ServerProcess,
  startServerProcess,
} from "../support/sqlite-server.js";
import { createGrpcClient, type MemoryGrpcClient } from "../transport/clients.js";

/**
 * SIGTERM while the SQLite write worker is stuck: another process holds the
 * database's write lock, so an Add waits in SQLite's busy handler (5 s by
 * default). The real server must still exit within its shutdown grace plus
 * a little, refuse that Add, and leave it unstored.
 */

const GRACE_MS = 200;
/**
 * It needs the grace, then the store's 250 ms minimum and a 25 ms slice of
 * the lock wait: about 0.5 s, here with 5x room; still half the 5 s busy
 * timeout that a worker left alone would wait out.
 */
const EXIT_BOUND_MS = 5 * (GRACE_MS + 250 + 25);
const strategy = { kind: { case: "buffer" as const, value: {} }, maxStored: 1000 };

describe("SQLite server shut down while its write worker waits for a lock", () => {
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
    const message = (content: string) => ({
      strategy,
      messages: [{ role: Role.USER, content }],
    });
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
    const db = new Database(path, { readonly: true });
    try {
      const threads = db.prepare("SELECT thread_id FROM threads ORDER BY thread_id").pluck().all();
      expect(threads).toEqual(["before"]);
    } finally {
      db.close();
    }
  });
});
