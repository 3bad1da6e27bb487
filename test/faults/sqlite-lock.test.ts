import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { createSqliteStore } from "../../src/store/sqlite/index.js";
import type { Store } from "../../src/store/store.js";
import { appendCommands, buffer, user } from "../store/fixtures.js";
import { holdWriteLock, type LockHolder } from "../support/sqlite-server.js";

/**
 * Another process holds the database's write lock, so the store's write
 * worker waits in SQLite's busy handler: a wait that must stay bounded by
 * each Add's deadline and by close's grace, show in health, and store
 * nothing it did not acknowledge.
 */

const dir = mkdtempSync(join(tmpdir(), "windlass-lock-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const cmd = appendCommands(buffer);

/** Polls health until it reports serving; bounded. */
async function untilServing(store: Store, boundMs: number): Promise<void> {
  const giveUp = Date.now() + boundMs;
  for (;;) {
    const h = await store.health(1000);
    if (h.serving) return;
    if (Date.now() > giveUp) throw new Error(`still not serving: ${h.reason}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe("SQLite store while another process holds the write lock", () => {
  const open: Store[] = [];
  const holders: LockHolder[] = [];
  afterEach(async () => {
    for (const h of holders.splice(0)) await h.release();
    for (const s of open.splice(0)) await s.close();
  });
  const openStore = (path: string, busyTimeoutMs: number): Store => {
    const s = createSqliteStore(path, {}, { busyTimeoutMs });
    open.push(s);
    return s;
  };

  it("refuses an Add still waiting at its deadline, unstored; health says why, and recovers", {
    timeout: 30_000,
  }, async () => {
    const path = join(dir, `${randomUUID()}.db`);
    // The busy timeout is far beyond the deadline: only the deadline can end the wait.
    const store = openStore(path, 60_000);
    await store.append(cmd({ threadId: "before" }));
    const holder = await holdWriteLock(path);
    holders.push(holder);
    const started = Date.now();
    await expect(
      store.append(cmd({ threadId: "late", deadline: started + 300 })),
    ).rejects.toMatchObject({
      code: "deadline_exceeded",
      message: expect.stringMatching(/still queued at the call's deadline; it was not stored/),
    });
    const waited = Date.now() - started;
    expect(waited).toBeGreaterThanOrEqual(290);
    expect(waited).toBeLessThan(3000);
    // Reads are served meanwhile.
    expect((await store.read("ns", "before"))?.messages).toHaveLength(1);
    // A write without a deadline keeps the worker waiting: health reports it.
    const waiting = store.append(cmd({ threadId: "waits" }));
    const health = await store.health(200);
    expect(health.serving).toBe(false);
    expect(health.reason).toMatch(/did not answer within 200 ms: .*waiting for a lock/);
    await holder.release();
    expect((await waiting).lastSeq).toBe(1);
    await untilServing(store, 5000);
    expect(await store.read("ns", "late")).toBeUndefined();
    expect((await store.append(cmd({ threadId: "late" }))).lastSeq).toBe(1);
  });

  it("refuses an Add after the busy timeout with UNAVAILABLE naming the lock, unstored", {
    timeout: 30_000,
  }, async () => {
    const path = join(dir, `${randomUUID()}.db`);
    const store = openStore(path, 400);
    holders.push(await holdWriteLock(path));
    await expect(store.append(cmd({ threadId: "busy" }))).rejects.toMatchObject({
      code: "unavailable",
      message: expect.stringMatching(
        /^the SQLite database is locked by another process \(SQLITE_BUSY/,
      ),
    });
    await holders.splice(0)[0]?.release();
    expect(await store.read("ns", "busy")).toBeUndefined();
    expect((await store.append(cmd({ threadId: "busy", messages: [user("x")] }))).lastSeq).toBe(1);
  });

  it("closes within its grace while the worker waits for the lock, refusing what it had not stored", {
    timeout: 30_000,
  }, async () => {
    const path = join(dir, `${randomUUID()}.db`);
    const store = createSqliteStore(path, {}, { busyTimeoutMs: 60_000 });
    const holder = await holdWriteLock(path);
    holders.push(holder);
    const refused = expect(store.append(cmd({ threadId: "stuck" }))).rejects.toMatchObject({
      code: "unavailable",
      message: expect.stringMatching(/not stored/),
    });
    // The worker is inside the lock wait once it stops answering pings.
    expect((await store.health(200)).serving).toBe(false);
    const started = Date.now();
    await store.close(300);
    const took = Date.now() - started;
    expect(took).toBeGreaterThanOrEqual(290);
    // The grace, then at most two stop waits of 250 ms: 5x room over what it needs.
    expect(took).toBeLessThan(300 + 2 * 250 + 2000);
    await refused;
    await holder.release();
    const reopened = openStore(path, 5000);
    expect(await reopened.read("ns", "stuck")).toBeUndefined();
  });
});
