import { randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { MAX_LINEAGE } from "../../src/core/lineage.js";
import type { StoredMessage } from "../../src/core/types.js";
import { createSqliteStore, MESSAGE_QUERIES } from "../../src/store/sqlite/index.js";
import { forksListSql } from "../../src/store/sqlite/labels.js";
import type {
  ForkCommand,
  ImportThreadCommand,
  Store,
  StoreLimits,
} from "../../src/store/store.js";
import { forkCmd as contractForkCmd } from "./contract/support.js";
import { appendCommands, buffer, user } from "./fixtures.js";

/** One directory per test file; every store gets a fresh file in it. */
const dir = mkdtempSync(join(tmpdir(), "windlass-sqlite-forks-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const freshPath = (): string => join(dir, `${randomUUID()}.db`);

const add = appendCommands(buffer);

const forkCmd = (over: Partial<ForkCommand> = {}) => contractForkCmd("f", over);

const contents = (messages: readonly StoredMessage[] | undefined): string[] =>
  (messages ?? []).map((m) => m.content);

const numbered = (from: number, to: number): string[] =>
  Array.from({ length: to - from + 1 }, (_, i) => `m${from + i}`);

/** A thread "t" of `n` messages m1..mn, imported in one write. */
async function importParent(s: Store, n: number, strategy = buffer): Promise<void> {
  const messages: StoredMessage[] = numbered(1, n).map((content, i) => ({
    role: "user",
    content,
    seq: i + 1,
    createTime: 1000,
  }));
  await s.importThread({
    namespace: "ns",
    threadId: "t",
    strategy,
    lastSeq: n,
    summarizedThroughSeq: 0,
    summary: "",
    summaryTime: 0,
    createTime: 1000,
    updateTime: 1000,
    messages,
    now: 1000,
  });
}

/** Thread "f" imported as a fork of "t" (n messages) sharing seqs through `through`, then f1.. of its own. */
const sharedImport = (n: number, through: number, own: number): ImportThreadCommand => ({
  namespace: "ns",
  threadId: "f",
  strategy: buffer,
  lastSeq: through + own,
  summarizedThroughSeq: 0,
  summary: "",
  summaryTime: 0,
  createTime: 2000,
  updateTime: 2000,
  messages: Array.from({ length: own }, (_, i) => ({
    role: "user" as const,
    content: `f${through + i + 1}`,
    seq: through + i + 1,
    createTime: 2000,
  })),
  parent: { threadId: "t", atSeq: through, forkTime: 2000, parentCreateTime: 1000 },
  shareFrom: { threadId: "t", throughSeq: through, parentLastSeq: n },
  now: 2000,
});

/** Counts of rows with a connection of its own (the store must be closed). */
function tableCounts(path: string): { messages: number; segments: number; threads: number } {
  const db = new Database(path, { readonly: true });
  try {
    const count = (t: string) => Number(db.prepare(`SELECT count(*) FROM ${t}`).pluck().get());
    return { messages: count("messages"), segments: count("segments"), threads: count("threads") };
  } finally {
    db.close();
  }
}

/** The namespace's usage as the file holds it, read beside the running store (WAL). */
function usageOf(path: string): unknown {
  const db = new Database(path, { readonly: true });
  try {
    return db
      .prepare("SELECT threads, messages, bytes FROM namespace_usage WHERE namespace = 'ns'")
      .get();
  } finally {
    db.close();
  }
}

describe("SQLite store: forks", () => {
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

  it("freezes a long head: both threads read their messages, Adds go apart, and usage counts them once", async () => {
    const path = freshPath();
    const s = openStore(path);
    await importParent(s, 200);
    const forked = await s.fork(forkCmd({ atSeq: 150 }));
    expect(forked.sharedCount).toBe(150);
    expect(forked.thread.parent).toMatchObject({ threadId: "t", atSeq: 150 });
    await s.append(add({ messages: [user("p201")] }));
    await s.append(add({ threadId: "f", messages: [user("f151")] }));
    expect(contents((await s.read("ns", "t"))?.messages)).toEqual([...numbered(1, 200), "p201"]);
    expect(contents((await s.read("ns", "f"))?.messages)).toEqual([...numbered(1, 150), "f151"]);
    expect(contents((await s.read("ns", "f", { limit: 3 }))?.messages).slice(-2)).toEqual([
      "m150",
      "f151",
    ]);
    expect((await s.getThread("ns", "f"))?.parent?.threadId).toBe("t");
    expect(usageOf(path)).toMatchObject({ threads: 2, messages: 202 });
    expect(await s.listThreads("ns", "", 10, undefined, "t")).toEqual(["f"]);
    await s.close();
    // 200 shared once, plus one head message each.
    expect(tableCounts(path)).toMatchObject({ messages: 202, segments: 1 });
  });

  it("keeps a fork readable after its parent's Clear, and frees the shared segment with the last holder", async () => {
    const path = freshPath();
    const s = openStore(path);
    await importParent(s, 300);
    await s.fork(forkCmd());
    expect(await s.clear("ns", "t", 3000)).toBe(true);
    expect(contents((await s.read("ns", "f"))?.messages)).toEqual(numbered(1, 300));
    expect(usageOf(path)).toMatchObject({ threads: 1, messages: 300 });
    // Re-created parent: a new key that names no frozen segment, and the fork still listed under it.
    await s.append(add({ messages: [user("new")] }));
    expect(contents((await s.read("ns", "t"))?.messages)).toEqual(["new"]);
    expect(contents((await s.read("ns", "f"))?.messages)).toEqual(numbered(1, 300));
    expect(await s.listThreads("ns", "", 10, undefined, "t")).toEqual(["f"]);
    expect(await s.clear("ns", "f", 3000)).toBe(true);
    expect(usageOf(path)).toMatchObject({ threads: 1, messages: 1 });
    await s.close();
    expect(tableCounts(path)).toMatchObject({ messages: 1, segments: 0, threads: 1 });
  });

  it("copies a short head instead of freezing it; trims and Rewinds of either leave the other whole", async () => {
    const path = freshPath();
    const s = openStore(path);
    await importParent(s, 50);
    const forked = await s.fork(forkCmd({ atSeq: 40 }));
    expect(forked.sharedCount).toBe(40);
    await s.rewind({
      namespace: "ns",
      threadId: "t",
      toSeq: 10,
      expectedLastSeq: undefined,
      requestId: "",
      requestHash: "",
      now: 3000,
    });
    expect(contents((await s.read("ns", "t"))?.messages)).toEqual(numbered(1, 10));
    expect(contents((await s.read("ns", "f"))?.messages)).toEqual(numbered(1, 40));
    expect(usageOf(path)).toMatchObject({ threads: 2, messages: 50 });
    await s.close();
    expect(tableCounts(path)).toMatchObject({ messages: 50, segments: 0 });
  });

  it("trims a fork with a smaller max_stored across the shared segment; rewinds past it release it", async () => {
    const path = freshPath();
    const s = openStore(path);
    await importParent(s, 500);
    const small = { ...buffer, maxStored: 10 };
    const forked = await s.fork(forkCmd({ strategy: small }));
    expect(forked.thread.strategy.maxStored).toBe(10);
    expect(contents((await s.read("ns", "f"))?.messages)).toEqual(numbered(491, 500));
    expect(contents((await s.read("ns", "t"))?.messages)).toEqual(numbered(1, 500));
    await s.rewind({
      namespace: "ns",
      threadId: "t",
      toSeq: 0,
      expectedLastSeq: undefined,
      requestId: "",
      requestHash: "",
      now: 3000,
    });
    expect((await s.read("ns", "t"))?.messages).toEqual([]);
    expect(contents((await s.read("ns", "f"))?.messages)).toEqual(numbered(491, 500));
    expect(usageOf(path)).toMatchObject({ threads: 2, messages: 500 });
    await s.clear("ns", "f", 4000);
    expect(usageOf(path)).toMatchObject({ threads: 1, messages: 0, bytes: 0 });
  });

  it("forks a 100,000-message parent without reading its messages", async () => {
    const path = freshPath();
    const s = openStore(path);
    await importParent(s, 100_000);
    let started = performance.now();
    await s.read("ns", "t");
    const wholeRead = performance.now() - started;
    started = performance.now();
    const forked = await s.fork(forkCmd({ strategy: { ...buffer, maxStored: 5 } }));
    const forkTime = performance.now() - started;
    expect(forked.sharedCount).toBe(100_000);
    expect(contents((await s.read("ns", "f"))?.messages)).toEqual(numbered(99_996, 100_000));
    // A read of the parent's messages alone costs more than the whole Fork.
    expect(forkTime).toBeLessThan(wholeRead);
    expect(forkTime).toBeLessThan(200);
    started = performance.now();
    await s.clear("ns", "t", 3000);
    await s.clear("ns", "f", 3000);
    // The free of 100,000 messages at refcount 0: one DELETE of the segment, as a Clear of such a thread was.
    expect(performance.now() - started).toBeLessThan(5000);
    await s.close();
    expect(tableCounts(path)).toMatchObject({ messages: 0, segments: 0, threads: 0 });
  });

  it("replays a Fork's request id with the fork as it is now; refuses a taken new_thread_id", async () => {
    const path = freshPath();
    const s = openStore(path);
    await importParent(s, 5);
    const first = await s.fork(forkCmd({ requestId: "r", requestHash: "h" }));
    await s.append(add({ threadId: "f", messages: [user("later")] }));
    const again = await s.fork(forkCmd({ requestId: "r", requestHash: "h" }));
    expect(again).toMatchObject({ replayed: true, sharedCount: 5, summaryInherited: false });
    expect(again.thread.lastSeq).toBe(6);
    expect(first.replayed).toBe(false);
    await expect(s.fork(forkCmd())).rejects.toMatchObject({ code: "already_exists" });
    await expect(s.fork(forkCmd({ threadId: "none", newThreadId: "g" }))).rejects.toMatchObject({
      code: "not_found",
    });
  });

  it("forks a fork across its frozen entry and its own head; each reads its own seqs", async () => {
    const path = freshPath();
    const s = openStore(path);
    await importParent(s, 200);
    await s.fork(forkCmd());
    await s.append(add({ threadId: "f", messages: numbered(201, 260).map(user) }));
    // f: the frozen 1..200 and its own head 201..260; g copies 201..230 and shares 1..200.
    const g = await s.fork(forkCmd({ threadId: "f", newThreadId: "g", atSeq: 230 }));
    expect(g.sharedCount).toBe(230);
    await s.append(add({ threadId: "g", messages: [user("g231")] }));
    expect(contents((await s.read("ns", "g"))?.messages)).toEqual([...numbered(1, 230), "g231"]);
    expect(contents((await s.read("ns", "g", { limit: 40 }))?.messages).at(-32)).toBe("m200");
    expect(contents((await s.read("ns", "f"))?.messages)).toEqual(numbered(1, 260));
    expect(await s.listThreads("ns", "", 10, undefined, "f")).toEqual(["g"]);
    expect(usageOf(path)).toMatchObject({ threads: 3, messages: 200 + 60 + 30 + 1 });
    for (const id of ["t", "f"]) await s.clear("ns", id, 3000);
    expect(contents((await s.read("ns", "g"))?.messages)).toEqual([...numbered(1, 230), "g231"]);
    expect(usageOf(path)).toMatchObject({ threads: 1, messages: 231 });
  });

  it("serves a parent's Get after its head froze and it grew again, never a stale tail", async () => {
    const s = openStore(freshPath());
    await importParent(s, 300);
    // Cached tail of t, ending at 300.
    expect(contents((await s.read("ns", "t", { limit: 5 }))?.messages).at(-1)).toBe("m300");
    await s.fork(forkCmd());
    await s.append(add({ messages: [user("p301"), user("p302")] }));
    expect(contents((await s.read("ns", "t", { limit: 5 }))?.messages).slice(-3)).toEqual([
      "m300",
      "p301",
      "p302",
    ]);
    await s.rewind({
      namespace: "ns",
      threadId: "t",
      toSeq: 299,
      expectedLastSeq: undefined,
      requestId: "",
      requestHash: "",
      now: 3000,
    });
    await s.append(add({ messages: [user("again")] }));
    expect(contents((await s.read("ns", "t", { limit: 5 }))?.messages).slice(-2)).toEqual([
      "m299",
      "again",
    ]);
    expect(contents((await s.read("ns", "f", { limit: 5 }))?.messages).at(-1)).toBe("m300");
  });

  it("leaves the parent's state alone, logs thread_forked on the fork only, lists forks with labels", async () => {
    const s = openStore(freshPath());
    const head = await s.headCursor("ns");
    await importParent(s, 3);
    const before = await s.getThread("ns", "t");
    await s.fork(forkCmd({ labels: { team: "a" } }));
    await s.fork(forkCmd({ newThreadId: "e", labels: { team: "b" } }));
    expect(await s.getThread("ns", "t")).toEqual(before);
    const events = await s.readEvents("ns", head, 10);
    expect(events.filter((e) => e.type === "thread_forked").map((e) => e.threadId)).toEqual([
      "f",
      "e",
    ]);
    expect(events.find((e) => e.threadId === "f")).toMatchObject({
      type: "thread_forked",
      parentThreadId: "t",
      atSeq: 3,
      sharedCount: 3,
      summaryInherited: false,
    });
    expect(await s.listThreads("ns", "", 10, undefined, "t")).toEqual(["e", "f"]);
    expect(await s.listThreads("ns", "", 10, { team: "a" }, "t")).toEqual(["f"]);
    expect(await s.listThreads("ns", "e", 10, undefined, "t")).toEqual(["f"]);
    await s.clear("ns", "f", 3000);
    expect(await s.listThreads("ns", "", 10, undefined, "t")).toEqual(["e"]);
  });

  it("imports a thread with its parent origin as given, and returns it", async () => {
    const s = openStore(freshPath());
    const parent = { threadId: "gone", atSeq: 4, forkTime: 5, parentCreateTime: 6 };
    await s.importThread({
      namespace: "ns",
      threadId: "i",
      strategy: buffer,
      lastSeq: 1,
      summarizedThroughSeq: 0,
      summary: "",
      summaryTime: 0,
      createTime: 1,
      updateTime: 1,
      messages: [{ role: "user", content: "x", seq: 1, createTime: 1 }],
      parent,
      now: 1,
    });
    expect((await s.read("ns", "i"))?.thread.parent).toEqual(parent);
  });

  it("refuses a Fork past the namespace's thread quota or the lineage bound, writing nothing", async () => {
    const path = freshPath();
    const s = openStore(path, { maxThreadsPerNamespace: 2 });
    await importParent(s, 3);
    await s.fork(forkCmd());
    await expect(s.fork(forkCmd({ newThreadId: "g" }))).rejects.toMatchObject({
      code: "resource_exhausted",
    });
    expect(await s.getThread("ns", "g")).toBeUndefined();
    // The fork copied its 3 messages (a head of at most FORK_COPY_MAX is copied).
    expect(usageOf(path)).toMatchObject({ threads: 2, messages: 6 });

    const deep = openStore(freshPath());
    await importParent(deep, 129, { ...buffer, maxStored: 100_000 });
    // Each Fork freezes t's head, one entry more for t's next fork to reference.
    for (let i = 1; i < MAX_LINEAGE; i++) {
      await deep.fork(forkCmd({ newThreadId: `f${i}` }));
      await deep.append(add({ messages: numbered(1, 129).map(user) }));
    }
    await expect(deep.fork(forkCmd({ newThreadId: "last" }))).resolves.toMatchObject({
      sharedCount: 129 * MAX_LINEAGE,
    });
    await deep.append(add({ messages: numbered(1, 129).map(user) }));
    await expect(deep.fork(forkCmd({ newThreadId: "over" }))).rejects.toMatchObject({
      code: "failed_precondition",
    });
    expect(await deep.getThread("ns", "over")).toBeUndefined();
    expect((await deep.read("ns", "t"))?.messages).toHaveLength(129 * (MAX_LINEAGE + 1));
  });

  it("trims a parent past its frozen entries with its Adds, releasing them, and keeps its forks whole", async () => {
    const path = freshPath();
    const s = openStore(path);
    await importParent(s, 600);
    await s.fork(forkCmd());
    await s.append(add({ messages: numbered(601, 900).map(user) }));
    await s.fork(forkCmd({ newThreadId: "g" }));
    await s.clear("ns", "f", 3000);
    // max_stored 1000: the Add drops 1..500, a part of the first segment (frozen: its rows stay).
    await s.append(add({ messages: numbered(901, 1500).map(user) }));
    expect(contents((await s.read("ns", "t"))?.messages)).toEqual(numbered(501, 1500));
    expect(contents((await s.read("ns", "g"))?.messages)).toEqual(numbered(1, 900));
    expect(usageOf(path)).toMatchObject({ threads: 2, messages: 1500 });
    // Past the first segment: t releases it; g still holds it.
    await s.append(add({ messages: numbered(1501, 1600).map(user) }));
    expect(contents((await s.read("ns", "t"))?.messages)).toEqual(numbered(601, 1600));
    expect(usageOf(path)).toMatchObject({ threads: 2, messages: 1600 });
    await s.clear("ns", "g", 3000);
    // The first segment goes with its last holder; the second (601..900) stays with t.
    expect(usageOf(path)).toMatchObject({ threads: 1, messages: 1000 });
    await s.close();
    expect(tableCounts(path)).toMatchObject({ messages: 1000, segments: 1 });
  });

  it("removes an expired thread of the new id first, logging its thread_cleared", async () => {
    const s = openStore(freshPath());
    await importParent(s, 3);
    await s.append(add({ threadId: "f", ttlMs: 10, now: 1000 }));
    const head = await s.headCursor("ns");
    const forked = await s.fork(forkCmd({ now: 5000 }));
    expect(forked.thread.lastSeq).toBe(3);
    const events = await s.readEvents("ns", head, 10);
    expect(events.map((e) => e.type)).toEqual(["thread_cleared", "thread_forked"]);
    expect(contents((await s.read("ns", "f"))?.messages)).toEqual(numbered(1, 3));
  });

  it("reads a segment's range and lists a parent's forks by searches, never a scan or a sort", async () => {
    const path = freshPath();
    const s = openStore(path);
    await importParent(s, 3);
    await s.fork(forkCmd({ labels: { a: "1" } }));
    await s.close();
    const db = new Database(path, { readonly: true });
    const planOf = (sql: string, params: unknown[]) =>
      db
        .prepare(`EXPLAIN QUERY PLAN ${sql}`)
        .all(...params)
        .map((row) => String((row as { detail: string }).detail))
        .join("\n");
    try {
      const range = planOf(MESSAGE_QUERIES.range, [1, 1, 3, -1]);
      expect(range).toMatch(
        /SEARCH messages USING PRIMARY KEY \(thread=\? AND seq>\? AND seq<\?\)/,
      );
      for (const count of [0, 1, 2]) {
        const labels = Array.from({ length: count }, () => ["a", "1"]).flat();
        const plan = planOf(forksListSql(count), [...labels, "ns", "t", "", Date.now(), 10]);
        expect(plan).toMatch(
          /SEARCH f USING PRIMARY KEY \(namespace=\? AND parent_id=\? AND thread_id>\?\)/,
        );
        expect(plan).not.toMatch(/TEMP B-TREE|SCAN/);
      }
    } finally {
      db.close();
    }
  });

  it("imports a fork sharing a long head: the head freezes, shared messages are stored once, the file reopens whole", async () => {
    const path = freshPath();
    const s = openStore(path);
    await importParent(s, 200);
    // Cached tail of t: the freeze must drop it, as a Fork's does.
    expect(contents((await s.read("ns", "t", { limit: 3 }))?.messages).at(-1)).toBe("m200");
    expect(await s.importThread(sharedImport(200, 150, 2))).toBe(true);
    await s.append(add({ messages: [user("p201")] }));
    await s.append(add({ threadId: "f", messages: [user("f153")] }));
    const forkSeqs = [...numbered(1, 150), "f151", "f152", "f153"];
    expect(contents((await s.read("ns", "t", { limit: 2 }))?.messages).slice(-2)).toEqual([
      "m200",
      "p201",
    ]);
    expect(contents((await s.read("ns", "f", { limit: 4 }))?.messages).slice(-4)).toEqual(
      forkSeqs.slice(-4),
    );
    expect(contents((await s.read("ns", "f"))?.messages)).toEqual(forkSeqs);
    expect(usageOf(path)).toMatchObject({ threads: 2, messages: 204 });
    await s.close();
    // 200 shared once (one frozen segment), plus the heads: p201, and f151 to f153.
    expect(tableCounts(path)).toMatchObject({ messages: 204, segments: 1, threads: 2 });
    const again = openStore(path);
    expect(contents((await again.read("ns", "f"))?.messages)).toEqual(forkSeqs);
    expect(contents((await again.read("ns", "t"))?.messages)).toEqual([
      ...numbered(1, 200),
      "p201",
    ]);
    expect(await again.listThreads("ns", "", 10, undefined, "t")).toEqual(["f"]);
  });

  it("imports a fork copying a short head: its head holds the copied and its own, each charged once", async () => {
    const path = freshPath();
    const s = openStore(path);
    await importParent(s, 50);
    expect(await s.importThread(sharedImport(50, 40, 1))).toBe(true);
    // A windowed read first (cached from the file), then the whole thread past it.
    expect(contents((await s.read("ns", "f", { limit: 2 }))?.messages).slice(-2)).toEqual([
      "m40",
      "f41",
    ]);
    expect(contents((await s.read("ns", "f"))?.messages)).toEqual([...numbered(1, 40), "f41"]);
    await s.append(add({ threadId: "f", messages: [user("f42")] }));
    expect(contents((await s.read("ns", "f", { limit: 3 }))?.messages).slice(-3)).toEqual([
      "m40",
      "f41",
      "f42",
    ]);
    expect(contents((await s.read("ns", "t"))?.messages)).toEqual(numbered(1, 50));
    expect(usageOf(path)).toMatchObject({ threads: 2, messages: 50 + 42 });
    await s.close();
    expect(tableCounts(path)).toMatchObject({ messages: 92, segments: 0, threads: 2 });
  });

  it("refuses an imported fork past the thread quota, writing nothing and freezing nothing", async () => {
    const path = freshPath();
    const s = openStore(path, { maxThreadsPerNamespace: 1 });
    await importParent(s, 200);
    await expect(s.importThread(sharedImport(200, 150, 1))).rejects.toMatchObject({
      code: "resource_exhausted",
    });
    expect(await s.getThread("ns", "f")).toBeUndefined();
    await s.close();
    expect(tableCounts(path)).toMatchObject({ messages: 200, segments: 0, threads: 1 });
  });

  it("migrates a schema 3 file in place: its threads keep their messages, fork, and survive a Clear of the parent", async () => {
    const path = freshPath();
    const old = new Database(path);
    old.exec(readFileSync(join(import.meta.dirname, "fixtures", "sqlite-schema-v3.sql"), "utf8"));
    const put = old.prepare("INSERT INTO meta (key, value) VALUES (?, ?)");
    put.run("schema_version", 3);
    put.run("database_id", "0123456789ab");
    put.run("token_secret", "00".repeat(32));
    put.run("lease_counter", 0);
    old
      .prepare(
        `INSERT INTO threads (id, namespace, thread_id, incarnation, strategy, last_seq,
           summarized_through_seq, summary, summary_time, create_time, update_time, bytes)
         VALUES (7, 'ns', 't', 'inc-1', ?, 200, 0, '', 0, 100, 200, 0)`,
      )
      .run(JSON.stringify(buffer));
    const msg = old.prepare("INSERT INTO messages VALUES (7, ?, 'user', 100, ?, NULL)");
    for (let i = 1; i <= 200; i++) msg.run(i, `m${i}`);
    old.exec("INSERT INTO namespace_usage VALUES ('ns', 1, 200, 0)");
    old.close();

    const s = openStore(path);
    expect(contents((await s.read("ns", "t"))?.messages)).toEqual(numbered(1, 200));
    await s.fork(forkCmd());
    await s.clear("ns", "t", 3000);
    await s.append(add({ threadId: "u", messages: [user("u1")] }));
    expect(contents((await s.read("ns", "f"))?.messages)).toEqual(numbered(1, 200));
    expect(contents((await s.read("ns", "u"))?.messages)).toEqual(["u1"]);
    await s.close();
    const db = new Database(path, { readonly: true });
    try {
      expect(db.pragma("integrity_check", { simple: true })).toBe("ok");
      expect(db.prepare("SELECT value FROM meta WHERE key = 'schema_version'").pluck().get()).toBe(
        4,
      );
      expect(db.pragma("foreign_key_list(messages)")).toEqual([]);
      // The new thread's key came from the counter, above the migrated 7.
      expect(
        db.prepare("SELECT id FROM threads WHERE thread_id = 'u'").pluck().get(),
      ).toBeGreaterThan(7);
    } finally {
      db.close();
    }
  });
});
