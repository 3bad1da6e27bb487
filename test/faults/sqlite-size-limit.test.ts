import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { MemoryError } from "../../src/core/errors.js";
import type { MemoryEvent } from "../../src/core/types.js";
import { createSqliteStore } from "../../src/store/sqlite/index.js";
import type { Store } from "../../src/store/store.js";
import { appendCommands, buffer, user } from "../store/fixtures.js";

/**
 * The SQLite store at its size limit (PRAGMA max_page_count): SQLite then
 * rolls a group's whole transaction back by itself in the middle of the
 * group. Every Add's reported outcome must be what a fresh open of the file
 * holds, and events must be published for exactly the Adds that committed.
 */

const dir = mkdtempSync(join(tmpdir(), "windlass-size-limit-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const cmd = appendCommands({ ...buffer, maxStored: 1_000_000 });
const THREADS = 6;
const IN_FLIGHT = 24;
const LIMIT_BYTES = 192 * 1024;

interface Acked {
  threadId: string;
  firstSeq: number;
  lastSeq: number;
  contents: string[];
}

/** Every stored message per thread, "seq:content", read by a connection of its own. */
function storedMessages(path: string): Map<string, string[]> {
  const db = new Database(path, { readonly: true });
  try {
    const rows = db
      .prepare<[], { thread_id: string; seq: number; content: string }>(
        `SELECT t.thread_id, m.seq, m.content FROM messages m JOIN threads t ON t.id = m.thread
         ORDER BY t.thread_id, m.seq`,
      )
      .all();
    const byThread = new Map<string, string[]>();
    for (const r of rows) {
      const list = byThread.get(r.thread_id) ?? [];
      list.push(`${r.seq}:${r.content}`);
      byThread.set(r.thread_id, list);
    }
    return byThread;
  } finally {
    db.close();
  }
}

function loggedAdds(path: string): number {
  const db = new Database(path, { readonly: true });
  try {
    return Number(
      db.prepare("SELECT count(*) FROM events WHERE type = 'messages_added'").pluck().get(),
    );
  } finally {
    db.close();
  }
}

/** Adds large messages to threads f0 to f3 until one is refused; the refusal. */
async function fillUp(store: Store): Promise<unknown> {
  let refusal: unknown;
  for (let i = 0; refusal === undefined && i < 2000; i++) {
    await store
      .append(cmd({ threadId: `f${i % 4}`, messages: [user(`${i}:${"y".repeat(3000)}`)] }))
      .catch((err: unknown) => {
        refusal = err;
      });
  }
  return refusal;
}

describe("SQLite store at its size limit", () => {
  const open: Store[] = [];
  afterEach(async () => {
    for (const s of open.splice(0)) await s.close();
  });
  const openLimited = (): { path: string; store: Store } => {
    const path = join(dir, `${randomUUID()}.db`);
    const store = createSqliteStore(path, {}, { maxDatabaseBytes: LIMIT_BYTES, cacheSize: 0 });
    open.push(store);
    return { path, store };
  };

  it("reports each Add as the file holds it, and publishes events for exactly those committed", {
    timeout: 60_000,
  }, async () => {
    const { path, store } = openLimited();
    const published: MemoryEvent[] = [];
    store.subscribe("ns", (events) => published.push(...events));
    const acked: Acked[] = [];
    const refusals: unknown[] = [];
    let sent = 0;
    // Rounds of Adds arriving together (so they share groups), of mixed sizes,
    // until the limit has refused Adds in several rounds.
    let fullRounds = 0;
    for (let round = 0; fullRounds < 3 && round < 400; round++) {
      const results = await Promise.allSettled(
        Array.from({ length: IN_FLIGHT }, (_, i) => {
          const threadId = `t${(round + i) % THREADS}`;
          const contents = [`${round}.${i}:${"x".repeat(((i * 997) % 6) * 700 + 50)}`];
          sent++;
          return store
            .append(cmd({ threadId, messages: contents.map(user), requestId: `r${round}.${i}` }))
            .then((r) => ({ threadId, firstSeq: r.firstSeq, lastSeq: r.lastSeq, contents }));
        }),
      );
      let refused = 0;
      for (const r of results) {
        if (r.status === "fulfilled") acked.push(r.value);
        else {
          refusals.push(r.reason);
          refused++;
        }
      }
      if (refused > 0) fullRounds++;
    }
    expect(refusals.length).toBeGreaterThan(0);
    expect(acked.length).toBeGreaterThan(0);
    for (const reason of refusals) {
      expect(reason).toBeInstanceOf(MemoryError);
      expect(reason).toMatchObject({ code: "resource_exhausted" });
      expect((reason as MemoryError).message).toMatch(/^the SQLite store's disk is full \(/);
    }
    // Reads are served while writes fail.
    const read = await store.read("ns", "t0");
    expect(read?.messages.length).toBe(
      acked.filter((a) => a.threadId === "t0").reduce((n, a) => n + a.contents.length, 0),
    );
    const health = await store.health(5000);
    expect(health.serving).toBe(false);
    expect(health.reason).toMatch(
      /^the SQLite store's disk is full \(SQLITE_FULL: .*\): writes are refused until it clears; reads are served$/,
    );

    // Events published: one messages_added per acknowledged Add, nothing else.
    const publishedAdds = published
      .filter((e) => e.type === "messages_added")
      .map((e) => (e.type === "messages_added" ? `${e.threadId}:${e.firstSeq}-${e.lastSeq}` : ""));
    expect(publishedAdds.sort()).toEqual(
      acked.map((a) => `${a.threadId}:${a.firstSeq}-${a.lastSeq}`).sort(),
    );

    await store.close();
    // A fresh open of the file holds exactly what was acknowledged: counted.
    const stored = storedMessages(path);
    const expected = new Map<string, string[]>();
    for (const a of [...acked].sort((x, y) => x.firstSeq - y.firstSeq)) {
      const list = expected.get(a.threadId) ?? [];
      a.contents.forEach((c, k) => {
        list.push(`${a.firstSeq + k}:${c}`);
      });
      expected.set(a.threadId, list);
    }
    const count = (m: Map<string, string[]>) => [...m.values()].reduce((n, l) => n + l.length, 0);
    expect({ sent, acknowledged: acked.length, stored: count(stored) }).toEqual({
      sent,
      acknowledged: acked.length,
      stored: count(expected),
    });
    expect(stored).toEqual(expected);
    expect(loggedAdds(path)).toBe(acked.length);
  });

  it("takes writes again by itself once room returns, and health follows", {
    timeout: 60_000,
  }, async () => {
    const { store } = openLimited();
    expect(await store.health(5000)).toEqual({ serving: true });
    expect(await fillUp(store)).toMatchObject({ code: "resource_exhausted" });
    expect((await store.health(5000)).serving).toBe(false);
    // Clearing threads frees pages inside the limit: room again, with no restart.
    expect(await store.clear("ns", "f0", 10)).toBe(true);
    expect(await store.clear("ns", "f1", 11)).toBe(true);
    expect(await store.health(5000)).toEqual({ serving: true });
    const after = await store.append(cmd({ threadId: "after", messages: [user("back")] }));
    expect(after.lastSeq).toBe(1);
  });

  it("refuses a Rewind that does not fit with resource_exhausted, changing nothing", {
    timeout: 60_000,
  }, async () => {
    const { path, store } = openLimited();
    await store.append(cmd({ messages: [user("1"), user("2"), user("3")] }));
    expect(await fillUp(store)).toMatchObject({ code: "resource_exhausted" });
    const before = await store.read("ns", "t");
    const head = await store.headCursor("ns");
    // Its idempotency record (the id in the table and in its unique index) needs
    // far more pages than its two small messages free.
    const rewind = {
      namespace: "ns",
      threadId: "t",
      toSeq: 1,
      expectedLastSeq: undefined,
      requestId: "r".repeat(24 * 1024),
      requestHash: "h",
      now: 5000,
    };
    const refused = await store.rewind(rewind).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(MemoryError);
    expect(refused).toMatchObject({ code: "resource_exhausted" });
    expect((refused as MemoryError).message).toMatch(/^the SQLite store's disk is full \(/);
    expect(await store.read("ns", "t")).toEqual(before);
    expect(await store.readEvents("ns", head, 10)).toEqual([]);
    // Room again, and the thread written anew: the same Rewind commits.
    expect(await store.clearAll("ns", 10)).toBe(5);
    await store.append(cmd({ messages: [user("1"), user("2"), user("3")] }));
    expect(await store.rewind(rewind)).toMatchObject({ removedCount: 2, replayed: false });
    await store.close();
    expect(storedMessages(path).get("t")).toEqual(["1:1"]);
  });
});
