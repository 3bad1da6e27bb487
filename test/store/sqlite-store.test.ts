import { randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { MemoryError } from "../../src/core/errors.js";
import type { ChatMessage, Strategy } from "../../src/core/types.js";
import { compareBytes, createMemoryStore } from "../../src/store/memory/index.js";
import { ResumeTokens, tokenParts } from "../../src/store/resume-token.js";
import {
  createSqliteStore,
  MESSAGE_QUERIES,
  SQLITE_SCHEMA_VERSION,
} from "../../src/store/sqlite/index.js";
import { labeledListSql } from "../../src/store/sqlite/labels.js";
import {
  READ_SLACK,
  type RewindCommand,
  type Store,
  type StoreLimits,
  type ThreadSnapshot,
} from "../../src/store/store.js";
import { appendCommands, buffer, summary, user } from "./fixtures.js";

/** One directory per test file; every store gets a fresh file in it. */
const dir = mkdtempSync(join(tmpdir(), "windlass-sqlite-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const freshPath = (): string => join(dir, `${randomUUID()}.db`);

const cmd = appendCommands(buffer);

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    if (err instanceof MemoryError) return err.code;
    throw err;
  }
  return "ok";
}

/** Row counts of every table, read with a connection of its own (the store must be closed). */
function rowCounts(path: string): Record<string, number> {
  const db = new Database(path, { readonly: true });
  try {
    const counts: Record<string, number> = {};
    for (const table of ["threads", "messages", "requests", "events", "fold_leases"]) {
      counts[table] = Number(db.prepare(`SELECT count(*) FROM ${table}`).pluck().get());
    }
    return counts;
  } finally {
    db.close();
  }
}

describe("SQLite store", () => {
  const open: Store[] = [];
  const openStore = (path: string, limits: Partial<StoreLimits> = {}): Store => {
    const s = createSqliteStore(path, limits);
    open.push(s);
    return s;
  };
  afterEach(async () => {
    for (const s of open) await s.close();
    open.length = 0;
  });

  it("keeps messages, summaries, request ids, leases and event cursors across close and reopen", async () => {
    const path = freshPath();
    const a = openStore(path);
    const head = await a.headCursor("ns");
    const tool: ChatMessage = {
      role: "assistant",
      content: "",
      name: "bot",
      toolCalls: [{ id: "c1", name: "f", arguments: '{"x":1}' }],
      metadata: { k: "v" },
    };
    const first = await a.append(
      cmd({
        strategy: summary,
        requestId: "r1",
        requestHash: "h1",
        messages: [user("1"), tool, { role: "tool", content: "42", toolCallId: "c1" }],
      }),
    );
    const token = (await a.acquireFoldLease("ns", "t", 60_000)) ?? 0;
    await a.commitSummary({
      namespace: "ns",
      threadId: "t",
      incarnation: first.thread.incarnation,
      leaseToken: token,
      fromSeq: 0,
      throughSeq: 1,
      summary: "the gist",
      foldedCount: 1,
      now: 2000,
    });
    await a.append(cmd({ threadId: "other", now: 3000 }));
    const before = await a.read("ns", "t");
    const eventsBefore = await a.readEvents("ns", head, 100);
    expect(eventsBefore.map((e) => e.type)).toEqual([
      "messages_added",
      "summary_updated",
      "messages_added",
    ]);
    const [e0] = eventsBefore;
    await a.close();

    const b = openStore(path);
    expect(await b.read("ns", "t")).toEqual(before);
    expect(before?.thread).toMatchObject({ summary: "the gist", summaryTime: 2000 });
    expect(before?.messages[1]).toMatchObject(tool);
    // A retry after the restart is still recognised, and a different payload still refused.
    const again = await b.append(
      cmd({
        requestId: "r1",
        requestHash: "h1",
        messages: [user("1"), tool, { role: "tool", content: "42", toolCallId: "c1" }],
      }),
    );
    expect(again).toEqual({ ...first, replayed: true });
    expect(await codeOf(b.append(cmd({ requestId: "r1", requestHash: "h2" })))).toBe(
      "invalid_argument",
    );
    // A resume token issued before the restart resumes exactly after its event.
    expect(await b.readEvents("ns", head, 100)).toEqual(eventsBefore);
    expect(await b.readEvents("ns", e0?.cursor ?? "", 100)).toEqual(eventsBefore.slice(1));
    expect(await b.headCursor("ns")).toBe(eventsBefore[2]?.cursor);
    await b.append(cmd({ messages: [user("4")], now: 4000 }));
    const after = await b.readEvents("ns", eventsBefore[2]?.cursor ?? "", 100);
    expect(after).toMatchObject([{ type: "messages_added", firstSeq: 4, lastSeq: 4 }]);
    expect(b.compareCursors(eventsBefore[2]?.cursor ?? "", after[0]?.cursor ?? "")).toBeLessThan(0);
    // The lease of the process that closed is gone; the fencing token keeps increasing.
    const next = await b.acquireFoldLease("ns", "t", 60_000);
    expect(next).toBeGreaterThan(token);
    expect(await b.listThreads("ns", "", 10)).toEqual(["other", "t"]);
  });

  it("keeps the fencing token increasing across Clear and restarts", async () => {
    const path = freshPath();
    const a = openStore(path);
    await a.append(cmd());
    const t1 = (await a.acquireFoldLease("ns", "t", 60_000)) ?? 0;
    await a.clear("ns", "t", 2000);
    expect(await a.acquireFoldLease("ns", "t", 60_000)).toBeUndefined();
    await a.releaseFoldLease("ns", "t", t1);
    const t2 = (await a.acquireFoldLease("ns", "t", 60_000)) ?? 0;
    expect(t2).toBeGreaterThan(t1);
    await a.close();
    const b = openStore(path);
    expect(await b.acquireFoldLease("ns", "t", 60_000)).toBeGreaterThan(t2);
  });

  it("is in WAL mode, with the tables it needs, and a schema version", async () => {
    const path = freshPath();
    const s = openStore(path);
    await s.append(cmd());
    await s.close();
    const db = new Database(path, { readonly: true });
    try {
      expect(db.pragma("journal_mode", { simple: true })).toBe("wal");
      expect(db.pragma("integrity_check", { simple: true })).toBe("ok");
      expect(db.prepare("SELECT value FROM meta WHERE key = 'schema_version'").pluck().get()).toBe(
        SQLITE_SCHEMA_VERSION,
      );
    } finally {
      db.close();
    }
  });

  it("refuses a second store on the same file while the first has it open", async () => {
    const path = freshPath();
    openStore(path);
    const started = Date.now();
    expect(() => createSqliteStore(path, {}, { busyTimeoutMs: 100 })).toThrow(
      /in use by another process/,
    );
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it("refuses a file written by a newer schema and one it cannot open", async () => {
    const path = freshPath();
    await openStore(path).close();
    const db = new Database(path);
    db.prepare("UPDATE meta SET value = 99 WHERE key = 'schema_version'").run();
    db.close();
    expect(() => createSqliteStore(path)).toThrow(/schema version 99/);
    expect(() => createSqliteStore(join(dir, "no-such-dir", "x.db"))).toThrow();
  });

  it("leaves nothing behind when an Add is refused or fails half-way", async () => {
    const path = freshPath();
    const s = openStore(path);
    const head = await s.headCursor("ns");
    // Refused by decideAppend on a new thread.
    expect(
      await codeOf(s.append(cmd({ expectedLastSeq: 3, requestId: "r", requestHash: "h" }))),
    ).toBe("aborted");
    // Fails after the thread row and its first message were written: the
    // second message's content cannot be stored.
    const broken: ChatMessage = { role: "user", content: { not: "text" } as unknown as string };
    await expect(
      s.append(cmd({ requestId: "r", requestHash: "h", messages: [user("ok"), broken] })),
    ).rejects.toThrow();
    expect(await s.read("ns", "t")).toBeUndefined();
    expect(await s.listThreads("ns", "", 10)).toEqual([]);
    expect(await s.readEvents("ns", head, 10)).toEqual([]);

    // The same on a thread that exists: its messages and last_seq are untouched.
    await s.append(cmd({ messages: [user("1"), user("2")] }));
    const existing = await s.read("ns", "t");
    const head2 = await s.headCursor("ns");
    await expect(
      s.append(cmd({ requestId: "r2", requestHash: "h", messages: [user("3"), broken] })),
    ).rejects.toThrow();
    expect(await s.read("ns", "t")).toEqual(existing);
    expect(await s.readEvents("ns", head2, 10)).toEqual([]);
    const next = await s.append(cmd({ requestId: "r2", requestHash: "h", messages: [user("3")] }));
    expect([next.firstSeq, next.replayed]).toEqual([3, false]);
    await s.close();
    expect(rowCounts(path)).toEqual({
      threads: 1,
      messages: 3,
      requests: 1,
      events: 2,
      fold_leases: 0,
    });
  });

  it("publishes nothing for a failed Add", async () => {
    const s = openStore(freshPath());
    const seen: string[] = [];
    s.subscribe("ns", (events) => seen.push(...events.map((e) => e.type)));
    const broken: ChatMessage = { role: "user", content: { not: "text" } as unknown as string };
    await expect(s.append(cmd({ messages: [user("ok"), broken] }))).rejects.toThrow();
    await s.append(cmd());
    expect(seen).toEqual(["messages_added"]);
  });

  it("lists thread ids in UTF-8 byte order, not UTF-16 order", async () => {
    const s = openStore(freshPath());
    // UTF-16 puts the astral emoji (a surrogate pair, 0xD83D…) before U+E000
    // and U+FF21; UTF-8 puts it last (0xF0…).
    const ids = ["z", "é", "\u{1F600}", "\uE000", "\uFF21", "Z"];
    for (const id of ids) await s.append(cmd({ threadId: id }));
    const bytes = [...ids].sort(compareBytes);
    expect([...ids].sort()).not.toEqual(bytes);
    expect(await s.listThreads("ns", "", 100)).toEqual(bytes);
    expect(await s.listThreads("ns", "é", 2)).toEqual(
      bytes.slice(bytes.indexOf("é") + 1).slice(0, 2),
    );
  });

  it("keeps at least event_retention events and refuses cursors whose history is gone, across restarts", async () => {
    const path = freshPath();
    const a = openStore(path, { eventRetention: 10 });
    const head = await a.headCursor("ns");
    const otherHead = await a.headCursor("other");
    let tenth = "";
    for (let i = 0; i < 200; i++) {
      await a.append(cmd({ messages: [user(String(i))], now: 1000 + i }));
      // The tenth newest event at the end: always retained.
      if (i === 190) tenth = await a.headCursor("ns");
      if (i % 40 === 0) await a.append(cmd({ namespace: "other", messages: [user(String(i))] }));
    }
    expect(await a.readEvents("ns", await a.headCursor("ns"), 10)).toEqual([]);
    expect(await codeOf(a.readEvents("ns", head, 10))).toBe("out_of_range");
    // The other namespace logged fewer events than it keeps: all still there.
    expect(await a.readEvents("other", otherHead, 100)).toHaveLength(5);
    const tailBefore = await a.readEvents("ns", tenth, 100);
    await a.close();

    const b = openStore(path, { eventRetention: 10 });
    expect(await codeOf(b.readEvents("ns", head, 10))).toBe("out_of_range");
    const tail = await b.readEvents("ns", tenth, 100);
    expect(tail).toEqual(tailBefore);
    expect(tail.map((e) => (e.type === "messages_added" ? e.lastSeq : 0))).toEqual([
      192, 193, 194, 195, 196, 197, 198, 199, 200,
    ]);
    const newest = await b.headCursor("ns");
    expect(tail.at(-1)?.cursor).toBe(newest);
    const { storeId, position, mac } = tokenParts(newest) ?? { storeId: "", position: 0, mac: "" };
    // Another database's token: its history is not here. Not a token: refused.
    expect(await codeOf(b.readEvents("ns", `abcdef012345.${position}.${mac}`, 10))).toBe(
      "out_of_range",
    );
    expect(await codeOf(b.readEvents("ns", `${storeId}.x.${mac}`, 10))).toBe("invalid_argument");
    // A token of the unsigned format of schema 1: issued before the upgrade.
    expect(await codeOf(b.readEvents("ns", `${storeId}.${position}`, 10))).toBe("out_of_range");
  });

  it("refuses a correctly signed cursor ahead of the namespace's head as out of range", async () => {
    const path = freshPath();
    const a = openStore(path);
    await a.append(cmd());
    await a.append(cmd({ namespace: "busy" }));
    await a.append(cmd({ namespace: "busy" }));
    await a.close();
    // Sign with the file's own key, as only someone holding it could.
    const db = new Database(path, { readonly: true });
    const meta = db.prepare("SELECT value FROM meta WHERE key = ?").pluck();
    const tokens = new ResumeTokens(
      String(meta.get("database_id")),
      String(meta.get("token_secret")),
      "another database",
    );
    db.close();
    const b = openStore(path);
    expect(await codeOf(b.readEvents("ns", tokens.issue("ns", 1), 10))).toBe("ok");
    // Position 2 exists in "busy" but not in "ns": ahead of ns's head. Signed
    // with the file's key, so only an older copy of the file can be behind it.
    expect(await codeOf(b.readEvents("ns", tokens.issue("ns", 2), 10))).toBe("out_of_range");
    expect(await codeOf(b.readEvents("busy", tokens.issue("busy", 2), 10))).toBe("ok");
  });

  it("migrates a schema 1 file: every thread, message and event stays, numbered per namespace", async () => {
    const path = freshPath();
    const old = new Database(path);
    old.exec(readFileSync(join(import.meta.dirname, "fixtures", "sqlite-schema-v1.sql"), "utf8"));
    const put = old.prepare("INSERT INTO meta (key, value) VALUES (?, ?)");
    put.run("schema_version", 1);
    put.run("database_id", "0123456789ab");
    put.run("lease_counter", 7);
    old
      .prepare(
        `INSERT INTO threads (id, namespace, thread_id, incarnation, strategy, last_seq,
           summarized_through_seq, summary, summary_time, create_time, update_time)
         VALUES (1, 'a', 't', 'inc-1', ?, 2, 0, '', 0, 100, 200)`,
      )
      .run(JSON.stringify(buffer));
    old.exec(`
      INSERT INTO messages VALUES (1, 1, 'user', 100, 'hello', NULL);
      INSERT INTO messages VALUES (1, 2, 'assistant', 200, 'hi', '{"name":"bot"}');
      -- One counter for every namespace: a has 3 and 5, b has 4 (1 and 2 were dropped).
      INSERT INTO events (id, namespace, thread_id, time, type, body) VALUES
        (3, 'a', 't', 100, 'messages_added', '{"firstSeq":1,"lastSeq":1}'),
        (4, 'b', 'u', 150, 'thread_cleared', '{}'),
        (5, 'a', 't', 200, 'messages_added', '{"firstSeq":2,"lastSeq":2}');
      INSERT INTO event_logs VALUES ('a', 2, 1), ('b', 1, 2);
    `);
    old.close();

    const s = openStore(path);
    const thread = await s.read("a", "t");
    expect(thread?.thread).toMatchObject({ incarnation: "inc-1", lastSeq: 2, createTime: 100 });
    expect(thread?.messages).toEqual([
      { role: "user", content: "hello", seq: 1, createTime: 100 },
      { role: "assistant", content: "hi", name: "bot", seq: 2, createTime: 200 },
    ]);
    // A token issued before the upgrade: out_of_range, with what to do.
    const stale = await codeOf(s.readEvents("a", "0123456789ab.3", 10));
    expect(stale).toBe("out_of_range");
    // The retained events are renumbered per namespace and stay readable.
    const headA = tokenParts(await s.headCursor("a"));
    const headB = tokenParts(await s.headCursor("b"));
    expect([headA?.storeId, headA?.position, headB?.position]).toEqual(["0123456789ab", 2, 1]);
    const added = await s.append(cmd({ namespace: "a", messages: [user("3")], now: 300 }));
    expect(added.firstSeq).toBe(3);
    const after = await s.readEvents("a", await s.headCursor("a"), 10);
    expect(after).toEqual([]);
    expect(tokenParts(await s.headCursor("a"))?.position).toBe(3);
    expect(await s.acquireFoldLease("a", "t", 1000)).toBe(8);
    await s.close();
    const db = new Database(path, { readonly: true });
    try {
      expect(
        db.prepare("SELECT namespace, seq, time FROM events ORDER BY namespace, seq").all(),
      ).toEqual([
        { namespace: "a", seq: 1, time: 100 },
        { namespace: "a", seq: 2, time: 200 },
        { namespace: "a", seq: 3, time: 300 },
        { namespace: "b", seq: 1, time: 150 },
      ]);
      expect(db.prepare("SELECT value FROM meta WHERE key = 'schema_version'").pluck().get()).toBe(
        SQLITE_SCHEMA_VERSION,
      );
      expect(db.pragma("integrity_check", { simple: true })).toBe("ok");
      // The quotas' usage, computed from what was stored: hello + hi + bot, then "3".
      expect(db.prepare("SELECT * FROM namespace_usage").all()).toEqual([
        { namespace: "a", threads: 1, messages: 3, bytes: 11 },
      ]);
    } finally {
      db.close();
    }
  });

  it("serves ListThreads and each Clear(all) batch from the (namespace, thread_id) index, without sorting", async () => {
    const path = freshPath();
    const s = openStore(path);
    await s.append(cmd());
    await s.close();
    const db = new Database(path, { readonly: true });
    try {
      // The statements of sqlite/reads.ts listThreads and sqlite/writes/thread-rows.ts first.
      for (const [query, params] of [
        [
          "SELECT thread_id FROM threads WHERE namespace = ? AND thread_id > ? ORDER BY thread_id LIMIT ?",
          ["ns", "a", 10],
        ],
        [
          "SELECT id, thread_id, incarnation FROM threads WHERE namespace = ? ORDER BY thread_id LIMIT ?",
          ["ns", 10],
        ],
      ] as const) {
        const plan = db
          .prepare(`EXPLAIN QUERY PLAN ${query}`)
          .all(...params)
          .map((row) => String((row as { detail: string }).detail))
          .join("\n");
        expect(plan).toMatch(
          /SEARCH threads USING (COVERING )?INDEX sqlite_autoindex_threads_1 \(namespace=\?/,
        );
        expect(plan).not.toMatch(/TEMP B-TREE|SCAN/);
      }
    } finally {
      db.close();
    }
  });

  it("lists by labels with searches of the label index, never a scan or a sort", async () => {
    const path = freshPath();
    const s = openStore(path);
    await s.append(cmd({ labels: { a: "1", b: "2", c: "3" } }));
    await s.close();
    const db = new Database(path, { readonly: true });
    try {
      for (const count of [1, 2, 3]) {
        const params = [
          ...Array.from({ length: count - 1 }, () => ["k", "v"]).flat(),
          "ns",
          "a",
          "1",
          "",
          Date.now(),
          10,
        ];
        const plan = db
          .prepare(`EXPLAIN QUERY PLAN ${labeledListSql(count)}`)
          .all(...params)
          .map((row) => String((row as { detail: string }).detail));
        // One search of the label index per label, and the thread's row by
        // its key (for its expire time).
        expect(plan).toHaveLength(count + 1);
        const labelSteps = plan.filter((step) => /^SEARCH l\d /.test(step));
        expect(labelSteps).toHaveLength(count);
        for (const step of labelSteps) {
          expect(step).toMatch(
            /SEARCH l\d USING PRIMARY KEY \(namespace=\? AND key=\? AND value=\?/,
          );
        }
        expect(
          plan.filter((step) => /^SEARCH t USING INTEGER PRIMARY KEY/.test(step)),
        ).toHaveLength(1);
        expect(plan.join("\n")).not.toMatch(/TEMP B-TREE|SCAN/);
      }
    } finally {
      db.close();
    }
  });

  it("reads a window and trims a front by one primary-key range search, never a scan or a sort", async () => {
    const path = freshPath();
    const s = openStore(path);
    await s.append(cmd());
    await s.close();
    const db = new Database(path, { readonly: true });
    try {
      for (const [query, params] of [
        [MESSAGE_QUERIES.from, [1, 5, 10]],
        [MESSAGE_QUERIES.oldestSeq, [1]],
        [MESSAGE_QUERIES.deleteThrough, [1, 5]],
      ] as const) {
        const plan = db
          .prepare(`EXPLAIN QUERY PLAN ${query}`)
          .all(...params)
          .map((row) => String((row as { detail: string }).detail))
          .join("\n");
        expect(plan).toMatch(/SEARCH messages USING PRIMARY KEY \(thread=\?/);
        expect(plan).not.toMatch(/TEMP B-TREE|SCAN/);
      }
    } finally {
      db.close();
    }
  });

  it("reads only the window of a long thread, from the file and from its cache", async () => {
    const long = Array.from({ length: 3000 }, (_, i) => user(`m${i}`));
    const window5: Strategy = { kind: "window", window: 5, excludeSystem: false, maxStored: 2000 };
    for (const cacheSize of [0, undefined]) {
      const s = createSqliteStore(freshPath(), {}, cacheSize === undefined ? {} : { cacheSize });
      open.push(s);
      for (let i = 0; i < long.length; i += 1000) {
        await s.append(cmd({ strategy: window5, messages: long.slice(i, i + 1000) }));
      }
      for (let round = 0; round < 2; round++) {
        const snap = await s.read("ns", "t", { limit: undefined });
        expect(snap?.complete).toBe(false);
        expect(snap?.messages.map((m) => m.seq)).toEqual(
          Array.from({ length: 5 + READ_SLACK }, (_, i) => 3000 - 5 - READ_SLACK + 1 + i),
        );
      }
      expect((await s.read("ns", "t"))?.messages).toHaveLength(2000);
    }
  });

  it("forgets request ids beyond the per-thread count and the retention time", async () => {
    const s = openStore(freshPath(), {
      idempotencyMaxPerThread: 3,
      idempotencyRetentionMs: 10_000,
    });
    for (const id of ["r1", "r2", "r3", "r4"]) {
      await s.append(cmd({ requestId: id, requestHash: id, messages: [user(id)] }));
    }
    expect((await s.append(cmd({ requestId: "r2", requestHash: "r2" }))).replayed).toBe(true);
    // r1 was the oldest of four: forgotten, so the same id appends again.
    const r1 = await s.append(cmd({ requestId: "r1", requestHash: "r1", messages: [user("r1")] }));
    expect([r1.replayed, r1.firstSeq]).toEqual([false, 5]);
    const late = await s.append(
      cmd({ requestId: "r4", requestHash: "r4", messages: [user("r4")], now: 1000 + 10_000 }),
    );
    expect(late.replayed).toBe(false);
  });

  it("trims to max_stored across Adds and keeps trimming after a restart", async () => {
    const path = freshPath();
    const small: Strategy = { ...buffer, maxStored: 3 };
    const a = openStore(path);
    await a.append(
      cmd({
        strategy: small,
        messages: [
          { role: "assistant", content: "", toolCalls: [{ id: "c", name: "f", arguments: "{}" }] },
          { role: "tool", content: "r", toolCallId: "c" },
          user("3"),
        ],
      }),
    );
    await a.append(cmd({ messages: [user("4")] }));
    // Dropping the call would leave its result first: it goes with its call.
    expect((await a.read("ns", "t"))?.messages.map((m) => m.seq)).toEqual([3, 4]);
    await a.close();
    const b = openStore(path);
    await b.append(cmd({ messages: [user("5"), user("6")] }));
    expect((await b.read("ns", "t"))?.messages.map((m) => m.seq)).toEqual([4, 5, 6]);
  });
});

/** A small seeded generator, so a failing sequence can be replayed. */
function random(seed: number): (n: number) => number {
  let a = seed >>> 0;
  return (n) => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
}

describe("SQLite store against the memory store", () => {
  // Hundreds of awaited writes, each a round trip to the worker and an fsync:
  // slow on a loaded machine, which is not what this test is about.
  it("does what the reference does for random sequences, from its cache and from the file", {
    timeout: 120_000,
  }, async () => {
    const strategies: Strategy[] = [
      { ...buffer, maxStored: 4 },
      { ...summary, maxStored: 3 },
      { ...summary, maxStored: 3, excludeSystem: true },
    ];
    for (let seed = 1; seed <= 12; seed++) {
      const rnd = random(seed);
      const paths = [freshPath(), freshPath()];
      // Small quotas, so refusals (counted after each Add's trim) are compared too.
      const quotas = { maxMessagesPerNamespace: 9, maxBytesPerNamespace: 48 };
      const stores: Store[] = [
        createMemoryStore(quotas),
        createSqliteStore(paths[0] ?? "", quotas),
        createSqliteStore(paths[1] ?? "", quotas, { cacheSize: 0 }),
      ];
      /** What every store must agree on, without incarnations (random per store). */
      const observe = async (s: Store) => {
        const out: unknown[] = [];
        for (const t of ["a", "b"]) {
          const snap = await s.read("ns", t);
          out.push(
            snap === undefined ? null : { ...snap, thread: { ...snap.thread, incarnation: "" } },
          );
        }
        return out;
      };
      const outcome = async (p: Promise<unknown>) => {
        try {
          const v = await p;
          if (typeof v !== "object" || v === null) return v;
          if ("thread" in v) return { ...v, thread: { ...(v.thread as object), incarnation: "" } };
          return { ...v, incarnation: "" };
        } catch (err) {
          if (err instanceof MemoryError) return err.code;
          throw err;
        }
      };
      const heads = await Promise.all(stores.map((s) => s.headCursor("ns")));
      try {
        for (let step = 0; step < 60; step++) {
          const threadId = rnd(2) === 0 ? "a" : "b";
          const now = 1000 + step;
          const op = rnd(10);
          const results: unknown[] = [];
          for (const s of stores) {
            // The same choices for every store: re-seed per store from the step.
            const r = random(seed * 1000 + step);
            if (op < 6) {
              const messages: ChatMessage[] = [];
              for (let i = r(4); i > 0; i--) {
                const kind = r(4);
                if (kind === 0) {
                  messages.push({
                    role: "assistant",
                    content: "",
                    toolCalls: [{ id: `c${step}`, name: "f", arguments: "{}" }],
                  });
                  messages.push({ role: "tool", content: "r", toolCallId: `c${step}` });
                } else {
                  messages.push({ role: kind === 1 ? "system" : "user", content: `m${step}.${i}` });
                }
              }
              const strategy = r(3) === 0 ? strategies[r(3)] : undefined;
              results.push(
                await outcome(
                  s.append(
                    cmd({
                      threadId,
                      messages,
                      strategy,
                      defaultStrategy: strategies[r(3)] ?? buffer,
                      replaceStrategy: r(2) === 0,
                      requestId: r(3) === 0 ? `q${r(4)}` : "",
                      requestHash: `h${messages.length}`,
                      expectedLastSeq: r(6) === 0 ? r(5) : undefined,
                      now,
                    }),
                  ),
                ),
              );
            } else if (op < 8) {
              const t = await s.getThread("ns", threadId);
              const token = await s.acquireFoldLease("ns", threadId, 60_000);
              if (t !== undefined && token !== undefined && t.lastSeq > t.summarizedThroughSeq) {
                const through = t.summarizedThroughSeq + 1 + r(t.lastSeq - t.summarizedThroughSeq);
                results.push(
                  await outcome(
                    s.commitSummary({
                      namespace: "ns",
                      threadId,
                      incarnation: t.incarnation,
                      leaseToken: token,
                      fromSeq: t.summarizedThroughSeq,
                      throughSeq: through,
                      summary: `s${step}`,
                      foldedCount: 1,
                      now,
                    }),
                  ),
                );
              }
              if (token !== undefined) await s.releaseFoldLease("ns", threadId, token);
            } else if (op < 9) {
              results.push(await s.clear("ns", threadId, now));
            } else {
              const t = await s.getThread("ns", threadId);
              await s.recordFoldFailure({
                namespace: "ns",
                threadId,
                incarnation: t?.incarnation ?? "none",
                reason: "boom",
                attempt: step,
                now,
              });
            }
          }
          const [ref, ...others] = results;
          for (const o of others) expect(o, `seed ${seed} step ${step}`).toEqual(ref);
          const [refState, ...otherStates] = await Promise.all(stores.map(observe));
          for (const o of otherStates) expect(o, `seed ${seed} step ${step}`).toEqual(refState);
        }
        const events = await Promise.all(
          stores.map(async (s, i) =>
            (await s.readEvents("ns", heads[i] ?? "", 10_000)).map(({ cursor: _, ...e }) => e),
          ),
        );
        expect(events[1]).toEqual(events[0]);
        expect(events[2]).toEqual(events[0]);
        // What the file holds, read back by a process that has no cache yet.
        const reference = await observe(stores[0] as Store);
        for (const [i, path] of paths.entries()) {
          await stores[i + 1]?.close();
          const reopened = createSqliteStore(path, quotas);
          stores[i + 1] = reopened;
          expect(await observe(reopened), `seed ${seed}, reopened`).toEqual(reference);
        }
      } finally {
        for (const s of stores) await s.close();
      }
    }
  });
});

describe("SQLite store's write worker", () => {
  const open: Store[] = [];
  afterEach(async () => {
    for (const s of open.splice(0)) await s.close();
  });
  const openStore = (options: Parameters<typeof createSqliteStore>[2] = {}): Store => {
    const s = createSqliteStore(freshPath(), {}, options);
    open.push(s);
    return s;
  };

  it("commits writes that arrive together, failing only the one that is refused", async () => {
    const s = openStore();
    const outcomes = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        codeOf(
          s.append(
            cmd({
              threadId: `t${i}`,
              messages: [user(`m${i}`)],
              // t5 says it expects a last_seq the new thread does not have.
              expectedLastSeq: i === 5 ? 3 : undefined,
            }),
          ),
        ),
      ),
    );
    expect(outcomes.filter((c) => c === "ok")).toHaveLength(11);
    expect(outcomes[5]).not.toBe("ok");
    expect(await s.read("ns", "t5")).toBeUndefined();
    for (const i of [0, 4, 6, 11]) {
      expect((await s.read("ns", `t${i}`))?.messages.map((m) => m.content)).toEqual([`m${i}`]);
    }
  });

  it("refuses writes beyond its queue with UNAVAILABLE, storing nothing, and takes them again once drained", async () => {
    const s = openStore({ maxQueuedWrites: 4 });
    const results = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) => s.append(cmd({ threadId: `q${i}` }))),
    );
    const refused = results.flatMap((r, i) => (r.status === "rejected" ? [[i, r.reason]] : []));
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(4);
    expect(refused).toHaveLength(16);
    for (const [i, reason] of refused) {
      expect(reason).toBeInstanceOf(MemoryError);
      expect((reason as MemoryError).code).toBe("unavailable");
      expect((reason as MemoryError).message).toMatch(/write queue is full/);
      expect(await s.getThread("ns", `q${i}`)).toBeUndefined();
    }
    expect(await s.listThreads("ns", "", 100)).toHaveLength(4);
    expect((await s.append(cmd({ threadId: "later" }))).lastSeq).toBe(1);
  });

  it("refuses an Add whose deadline has passed, storing nothing, and keeps one whose deadline is far off", async () => {
    const s = openStore();
    await expect(
      s.append(cmd({ threadId: "past", deadline: Date.now() - 1 })),
    ).rejects.toMatchObject({ code: "deadline_exceeded" });
    expect(await s.getThread("ns", "past")).toBeUndefined();
    // 30 days: beyond setTimeout's range, where a timer would fire at once.
    const far = await s.append(cmd({ threadId: "far", deadline: Date.now() + 30 * 86_400_000 }));
    expect(far.lastSeq).toBe(1);
    const soon = await s.append(cmd({ threadId: "soon", deadline: Date.now() + 60_000 }));
    expect(soon.lastSeq).toBe(1);
  });

  it("answers writes handed over before close, and refuses those after", async () => {
    const s = createSqliteStore(freshPath());
    const before = s.append(cmd({ threadId: "before" }));
    const closing = s.close();
    await expect(s.append(cmd({ threadId: "after" }))).rejects.toMatchObject({
      code: "unavailable",
    });
    expect((await before).lastSeq).toBe(1);
    await closing;
  });

  it("never serves a stale, trimmed, folded or cleared thread from its cache while writes are in flight", async () => {
    const cached = openStore();
    const reference = openStore({ cacheSize: 0 });
    const small: Strategy = { ...summary, maxStored: 3 };
    for (let step = 0; step < 60; step++) {
      const write = async (s: Store): Promise<unknown> => {
        if (step % 11 === 10) return s.clear("ns", "t", 2000 + step);
        if (step % 3 === 2) {
          const t = await s.getThread("ns", "t");
          if (t === undefined || t.lastSeq <= t.summarizedThroughSeq) return undefined;
          const token = await s.acquireFoldLease("ns", "t", 10_000);
          return s
            .commitSummary({
              namespace: "ns",
              threadId: "t",
              incarnation: t.incarnation,
              leaseToken: token ?? 0,
              fromSeq: t.summarizedThroughSeq,
              throughSeq: t.lastSeq - 1,
              summary: `s${step}`,
              foldedCount: 1,
              now: 2000 + step,
            })
            .finally(() => s.releaseFoldLease("ns", "t", token ?? 0));
        }
        return s.append(
          cmd({
            strategy: small,
            messages: [user(`a${step}`), user(`b${step}`)],
            now: 2000 + step,
          }),
        );
      };
      const view = { limit: undefined };
      const shape = (snap: ThreadSnapshot | undefined) =>
        snap === undefined
          ? undefined
          : {
              lastSeq: snap.thread.lastSeq,
              through: snap.thread.summarizedThroughSeq,
              messages: snap.messages.map((m) => [m.seq, m.content]),
            };
      const before = shape(await reference.read("ns", "t", view));
      await write(reference);
      const after = shape(await reference.read("ns", "t", view));
      // Warm the cache, then read while the same write is in the worker. Reads
      // in a synchronous spin: once the worker has committed, its answer
      // cannot reach this thread until the spin ends, so later reads in it see
      // the file ahead of what this thread has applied to the cache.
      await cached.read("ns", "t", view);
      let settled = false;
      const pending = write(cached).finally(() => {
        settled = true;
      });
      const seen = new Set<string>();
      while (!settled) {
        await new Promise((resolve) => setImmediate(resolve));
        // About 250 reads over 5 ms.
        const until = performance.now() + 5;
        for (let next = 0; performance.now() < until; ) {
          if (performance.now() < next) continue;
          next = performance.now() + 0.02;
          void cached.read("ns", "t", view).then((snap) => seen.add(JSON.stringify(shape(snap))));
        }
      }
      await pending;
      for (const during of seen) {
        expect([JSON.stringify(before), JSON.stringify(after)]).toContain(during);
      }
      expect(shape(await cached.read("ns", "t", view))).toEqual(after);
    }
  });
});

describe("SQLite store's Rewind", () => {
  const open: Store[] = [];
  afterEach(async () => {
    for (const s of open.splice(0)) await s.close();
  });
  const openStore = (
    path = freshPath(),
    limits: Partial<StoreLimits> = {},
    options: Parameters<typeof createSqliteStore>[2] = {},
  ): Store => {
    const s = createSqliteStore(path, limits, options);
    open.push(s);
    return s;
  };
  const rewindCmd = (over: Partial<RewindCommand> = {}): RewindCommand => ({
    namespace: "ns",
    threadId: "t",
    toSeq: 2,
    expectedLastSeq: undefined,
    requestId: "",
    requestHash: "",
    now: 5000,
    ...over,
  });
  /** The namespace's usage and the thread's bytes as the file holds them (the store closed). */
  const usageOf = (path: string) => {
    const db = new Database(path, { readonly: true });
    try {
      return {
        usage: db.prepare("SELECT threads, messages, bytes FROM namespace_usage").all(),
        threadBytes: db.prepare("SELECT thread_id, bytes FROM threads ORDER BY thread_id").all(),
      };
    } finally {
      db.close();
    }
  };
  /** A fold's commit of the messages from the start through `throughSeq`. */
  const fold = (incarnation: string, leaseToken: number, throughSeq: number) => ({
    namespace: "ns",
    threadId: "t",
    incarnation,
    leaseToken,
    fromSeq: 0,
    throughSeq,
    summary: `through ${throughSeq}`,
    foldedCount: throughSeq,
    now: 2000,
  });
  const contents = (snap: ThreadSnapshot | undefined) =>
    snap?.messages.map((m) => `${m.seq}:${m.content}`);

  it("drops the messages after to_seq with their room, forgets the Adds that stored them, and keeps all of it across a reopen", async () => {
    const path = freshPath();
    const a = openStore(path);
    const head = await a.headCursor("ns");
    const r1 = await a.append(
      cmd({ requestId: "r1", requestHash: "h1", messages: [user("one"), user("two")] }),
    );
    await a.append(
      cmd({ requestId: "r2", requestHash: "h2", messages: [user("3"), user("4"), user("5")] }),
    );
    const rewound = await a.rewind(rewindCmd({ requestId: "w1", requestHash: "hw" }));
    expect(rewound).toMatchObject({ removedCount: 3, summaryDropped: false, replayed: false });
    expect(rewound.thread).toMatchObject({ lastSeq: 2, updateTime: 5000, createTime: 1000 });
    const events = await a.readEvents("ns", head, 10);
    expect(events.at(-1)).toMatchObject({
      type: "thread_rewound",
      threadId: "t",
      time: 5000,
      toSeq: 2,
      removedCount: 3,
      summaryDropped: false,
    });
    const snapshot = await a.read("ns", "t");
    expect(contents(snapshot)).toEqual(["1:one", "2:two"]);
    await a.close();
    // Room given back: two messages of three bytes each remain.
    expect(usageOf(path)).toEqual({
      usage: [{ threads: 1, messages: 2, bytes: 6 }],
      threadBytes: [{ thread_id: "t", bytes: 6 }],
    });

    const b = openStore(path);
    expect(await b.read("ns", "t")).toEqual(snapshot);
    expect(await b.readEvents("ns", head, 10)).toEqual(events);
    // The Rewind's own request id is kept: a retry answers with its first result.
    expect(await b.rewind(rewindCmd({ requestId: "w1", requestHash: "hw", now: 6000 }))).toEqual({
      ...rewound,
      replayed: true,
    });
    expect(await codeOf(b.rewind(rewindCmd({ requestId: "w1", requestHash: "other" })))).toBe(
      "invalid_argument",
    );
    // r1 stored only what stays: still a retry. r2's messages went: it adds them again.
    expect(await b.append(cmd({ requestId: "r1", requestHash: "h1" }))).toEqual({
      ...r1,
      replayed: true,
    });
    const again = await b.append(
      cmd({ requestId: "r2", requestHash: "h2", messages: [user("3"), user("4"), user("5")] }),
    );
    expect([again.replayed, again.firstSeq, again.lastSeq]).toEqual([false, 3, 5]);
  });

  it("never serves a dropped message from its cache once an Add reuses the seq", async () => {
    const long: Strategy = { kind: "window", window: 8, excludeSystem: false, maxStored: 5000 };
    const cached = openStore();
    const reference = openStore(freshPath(), {}, { cacheSize: 0 });
    // Windowed reads first: a whole read goes to the file and replaces the entry.
    const views = [{ limit: undefined }, { limit: 3 }, undefined];
    const observe = async (s: Store) =>
      Promise.all(views.map(async (view) => contents(await s.read("ns", "t", view))));
    // 1,500 messages: more than a cached tail holds, so the entry is not the whole thread.
    const steps: ((s: Store) => Promise<unknown>)[] = [
      (s) =>
        s.append(
          cmd({ strategy: long, messages: Array.from({ length: 1500 }, (_, i) => user(`a${i}`)) }),
        ),
      (s) => s.rewind(rewindCmd({ toSeq: 1400 })),
      (s) => s.append(cmd({ messages: [user("b1401"), user("b1402")] })),
      (s) => s.rewind(rewindCmd({ toSeq: 1401 })),
      (s) => s.append(cmd({ messages: [user("c1402")] })),
      (s) => s.rewind(rewindCmd({ toSeq: 0 })),
      (s) => s.append(cmd({ messages: [user("d1"), user("d2")] })),
    ];
    for (const [i, step] of steps.entries()) {
      await step(reference);
      const expected = await observe(reference);
      await step(cached);
      // Read twice: the first is served from the entry the commit left, the
      // second from what the first read put there.
      expect(await observe(cached), `step ${i}`).toEqual(expected);
      expect(await observe(cached), `step ${i}, again`).toEqual(expected);
    }
    expect(await observe(cached)).toEqual([
      ["1:d1", "2:d2"],
      ["1:d1", "2:d2"],
      ["1:d1", "2:d2"],
    ]);
  });

  it("ends the fold lease, so a fold that ran across it cannot commit its summary", async () => {
    const s = openStore();
    const first = await s.append(
      cmd({ strategy: summary, messages: [user("1"), user("2"), user("3"), user("4")] }),
    );
    const token = (await s.acquireFoldLease("ns", "t", 60_000)) ?? 0;
    await s.rewind(rewindCmd({ toSeq: 3 }));
    // The fold had read through seq 4, which is gone.
    expect(await s.commitSummary(fold(first.thread.incarnation, token, 4))).toBeUndefined();
    expect((await s.getThread("ns", "t"))?.summary).toBe("");
    expect(await s.acquireFoldLease("ns", "t", 60_000)).toBeGreaterThan(token);
  });

  it("drops a summary covering dropped seqs, and the drop survives a reopen", async () => {
    const path = freshPath();
    const a = openStore(path);
    const first = await a.append(
      cmd({ strategy: summary, messages: [user("1"), user("2"), user("3"), user("4")] }),
    );
    const token = (await a.acquireFoldLease("ns", "t", 60_000)) ?? 0;
    await a.commitSummary(fold(first.thread.incarnation, token, 3));
    const r = await a.rewind(rewindCmd({ toSeq: 2 }));
    expect(r).toMatchObject({ removedCount: 2, summaryDropped: true });
    expect(r.thread).toMatchObject({ summary: "", summarizedThroughSeq: 0, summaryTime: 0 });
    await a.close();
    const b = openStore(path);
    expect((await b.read("ns", "t"))?.thread).toEqual(r.thread);
  });

  it("changes nothing when the core refuses it, when to_seq is last_seq, or past its deadline", async () => {
    const path = freshPath();
    const s = openStore(path, {}, {});
    await s.append(cmd({ messages: [user("1"), user("2"), user("3")] }));
    await s.append(cmd({ threadId: "ttl", ttlMs: 100, now: 1000 }));
    const head = await s.headCursor("ns");
    const before = await s.read("ns", "t");
    expect(await codeOf(s.rewind(rewindCmd({ threadId: "none" })))).toBe("not_found");
    // Expired (at 1100) though not swept yet: gone for a Rewind too.
    expect(await codeOf(s.rewind(rewindCmd({ threadId: "ttl", toSeq: 0 })))).toBe("not_found");
    expect(await codeOf(s.rewind(rewindCmd({ expectedLastSeq: 2 })))).toBe("aborted");
    expect(await codeOf(s.rewind(rewindCmd({ toSeq: 4 })))).toBe("out_of_range");
    expect(await codeOf(s.rewind(rewindCmd({ deadline: Date.now() - 1 })))).toBe(
      "deadline_exceeded",
    );
    const unchanged = await s.rewind(rewindCmd({ toSeq: 3, requestId: "u", requestHash: "hu" }));
    expect(unchanged).toEqual({
      thread: before?.thread,
      removedCount: 0,
      summaryDropped: false,
      replayed: false,
    });
    expect(await s.read("ns", "t")).toEqual(before);
    expect(await s.readEvents("ns", head, 10)).toEqual([]);
    // Its request id was recorded all the same.
    expect(
      (await s.rewind(rewindCmd({ toSeq: 3, requestId: "u", requestHash: "hu" }))).replayed,
    ).toBe(true);
    await s.close();
    expect(rowCounts(path)).toMatchObject({ threads: 2, messages: 4, requests: 1, events: 2 });
  });

  it("commits with the other writes of its group, failing alone", async () => {
    const s = openStore();
    for (let i = 0; i < 6; i++) {
      await s.append(cmd({ threadId: `t${i}`, messages: [user("1"), user("2"), user("3")] }));
    }
    const outcomes = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        codeOf(
          i % 2 === 0
            ? s.rewind(rewindCmd({ threadId: `t${i}`, toSeq: i === 2 ? 9 : 1 }))
            : s.append(cmd({ threadId: `t${i}`, messages: [user("4")] })),
        ),
      ),
    );
    expect(outcomes).toEqual(["ok", "ok", "out_of_range", "ok", "ok", "ok"]);
    const lastSeqs = await Promise.all(
      Array.from({ length: 6 }, async (_, i) => (await s.getThread("ns", `t${i}`))?.lastSeq),
    );
    expect(lastSeqs).toEqual([1, 4, 3, 4, 1, 4]);
  });

  it("drops messages by one primary-key range search, never a scan", async () => {
    const path = freshPath();
    await openStore(path).close();
    const db = new Database(path, { readonly: true });
    try {
      const plan = db
        .prepare(`EXPLAIN QUERY PLAN ${MESSAGE_QUERIES.deleteAfter}`)
        .all(1, 5)
        .map((row) => String((row as { detail: string }).detail))
        .join("\n");
      expect(plan).toMatch(/SEARCH messages USING PRIMARY KEY \(thread=\? AND seq>\?\)/);
      expect(plan).not.toMatch(/TEMP B-TREE|SCAN/);
    } finally {
      db.close();
    }
  });
});
