import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ChatMessage, Strategy } from "../../src/core/types.js";
import { createPostgresStore } from "../../src/store/postgres/index.js";
import type { ForkCommand, ImportThreadCommand, Store } from "../../src/store/store.js";
import {
  type PostgresServer,
  queryPostgres,
  startPostgresServer,
} from "../support/postgres-server.js";
import { appendCommands, user } from "./fixtures.js";

/**
 * The Postgres store's forks (core/lineage.ts as schema.ts version 3 lays
 * it out): rows written, statements run, the migration, replicas.
 */

let server: PostgresServer;
beforeAll(async () => {
  // pg_stat_statements: a Fork's statements are counted.
  server = await startPostgresServer({
    settings: { shared_preload_libraries: "pg_stat_statements" },
  });
}, 60_000);
afterAll(async () => {
  await server?.stop();
}, 60_000);

const query = queryPostgres;

const big: Strategy = { kind: "buffer", maxMessages: 0, excludeSystem: false, maxStored: 200_000 };
const cmd = appendCommands(big);

const forkCmd = (over: Partial<ForkCommand> = {}): ForkCommand => ({
  namespace: "ns",
  threadId: "t",
  newThreadId: "f",
  atSeq: undefined,
  expectedLastSeq: undefined,
  strategy: undefined,
  labels: undefined,
  ttlMs: undefined,
  requestId: "",
  requestHash: "",
  now: 2000,
  ...over,
});

const texts = (n: number, prefix = "m") =>
  Array.from({ length: n }, (_, i): ChatMessage => user(`${prefix}${i + 1}`));

async function contents(store: Store, threadId: string): Promise<string[]> {
  const snap = await store.read("ns", threadId);
  return snap?.messages.map((m) => m.content) ?? [];
}

async function segments(url: string) {
  return query<{ segment_id: string; refs: number; count: number }>(
    url,
    "SELECT segment_id, refs::int, count::int FROM segments ORDER BY segment_id",
  );
}

async function usage(url: string) {
  const [row] = await query<{ threads: number; messages: number }>(
    url,
    "SELECT threads::int, messages::int FROM namespaces WHERE namespace = 'ns'",
  );
  return row;
}

async function withStore<T>(f: (store: Store, url: string) => Promise<T>): Promise<T> {
  const url = await server.createDatabase();
  const store = await createPostgresStore(url, {}, { poolSize: 2 });
  try {
    return await f(store, url);
  } finally {
    await store.close();
  }
}

describe("Postgres store Fork", () => {
  it("freezes the parent's head in place past FORK_COPY_MAX, both threads reading and adding on", async () => {
    await withStore(async (store, url) => {
      await store.append(cmd({ messages: texts(300) }));
      const r = await store.fork(forkCmd({ atSeq: 200 }));
      expect(r).toMatchObject({ sharedCount: 200, summaryInherited: false, replayed: false });
      expect(r.thread).toMatchObject({
        threadId: "f",
        lastSeq: 200,
        parent: { threadId: "t", atSeq: 200 },
      });
      // The parent's messages stay where they are: its head, now a segment of two references.
      expect(await segments(url)).toEqual([{ segment_id: "t", refs: 2, count: 300 }]);
      expect(await usage(url)).toEqual({ threads: 2, messages: 300 });
      await store.append(cmd({ messages: [user("p301")] }));
      await store.append(cmd({ threadId: "f", messages: [user("f201")] }));
      expect(await contents(store, "t")).toEqual([...texts(300).map((m) => m.content), "p301"]);
      expect(await contents(store, "f")).toEqual([...texts(200).map((m) => m.content), "f201"]);
      const [head] = await query<{ head: string }>(
        url,
        "SELECT head FROM threads WHERE thread_id = 't'",
      );
      expect(head?.head.startsWith("t\u0001")).toBe(true);
      expect(await usage(url)).toEqual({ threads: 2, messages: 302 });
      expect((await store.getThread("ns", "f"))?.parent?.threadId).toBe("t");
    });
  });

  it("copies at most FORK_COPY_MAX messages of the head instead, sharing nothing", async () => {
    await withStore(async (store, url) => {
      await store.append(cmd({ messages: texts(100) }));
      const r = await store.fork(forkCmd({ atSeq: 40 }));
      expect(r.sharedCount).toBe(40);
      expect(await segments(url)).toEqual([]);
      expect(await contents(store, "f")).toEqual(texts(40).map((m) => m.content));
      expect(await usage(url)).toEqual({ threads: 2, messages: 140 });
    });
  });

  it("keeps a fork readable after its parent's Clear, and frees the segment with its last holder", async () => {
    await withStore(async (store, url) => {
      await store.append(cmd({ messages: texts(300) }));
      await store.fork(forkCmd({ atSeq: 250 }));
      await store.clear("ns", "t", 3000);
      expect(await segments(url)).toEqual([{ segment_id: "t", refs: 1, count: 300 }]);
      expect(await contents(store, "f")).toHaveLength(250);
      expect(await usage(url)).toEqual({ threads: 1, messages: 300 });
      // A thread of the parent's id made again opens a head of another id.
      await store.append(cmd({ messages: [user("again")] }));
      expect(await contents(store, "t")).toEqual(["again"]);
      expect(await store.listThreads("ns", "", 10, undefined, "t")).toEqual(["f"]);
      await store.clear("ns", "f", 3000);
      expect(await segments(url)).toEqual([]);
      expect(await usage(url)).toEqual({ threads: 1, messages: 1 });
      expect(await query(url, "SELECT count(*)::int AS n FROM messages")).toEqual([{ n: 1 }]);
    });
  });

  it("rewinds and trims across segments, releasing the entries it no longer holds", async () => {
    await withStore(async (store, url) => {
      await store.append(cmd({ messages: texts(300) }));
      await store.fork(forkCmd({ atSeq: 300 }));
      await store.append(cmd({ threadId: "f", messages: texts(5, "f") }));
      const rewound = await store.rewind({
        namespace: "ns",
        threadId: "f",
        toSeq: 150,
        expectedLastSeq: undefined,
        requestId: "",
        requestHash: "",
        now: 3000,
      });
      expect(rewound.removedCount).toBe(155);
      expect(await contents(store, "f")).toEqual(texts(150).map((m) => m.content));
      // A max_stored of 10 on the parent raises the low of its frozen entry, then drops it.
      const small: Strategy = { ...big, maxStored: 10 };
      await store.append(cmd({ messages: [user("x")], strategy: small, replaceStrategy: true }));
      expect(await contents(store, "t")).toEqual(
        [...texts(300).slice(291), user("x")].map((m) => m.content),
      );
      expect(await segments(url)).toEqual([{ segment_id: "t", refs: 2, count: 300 }]);
      await store.append(cmd({ messages: texts(11, "y") }));
      expect(await contents(store, "t")).toEqual(
        ["x", ...texts(11, "y").map((m) => m.content)].slice(2),
      );
      expect(await segments(url)).toEqual([{ segment_id: "t", refs: 1, count: 300 }]);
      await store.rewind({
        namespace: "ns",
        threadId: "f",
        toSeq: 0,
        expectedLastSeq: undefined,
        requestId: "",
        requestHash: "",
        now: 3000,
      });
      expect(await segments(url)).toEqual([]);
      expect(await usage(url)).toEqual({ threads: 2, messages: 10 });
    });
  });

  it("trims the fork to its own max_stored, referencing only what it keeps", async () => {
    await withStore(async (store, url) => {
      await store.append(cmd({ messages: texts(300) }));
      const r = await store.fork(forkCmd({ strategy: { ...big, maxStored: 50 } }));
      expect(r.sharedCount).toBe(300);
      expect(await contents(store, "f")).toEqual(
        texts(300)
          .slice(250)
          .map((m) => m.content),
      );
      expect(await segments(url)).toEqual([{ segment_id: "t", refs: 2, count: 300 }]);
    });
  });

  it("replays a Fork by its request id with the fork's current state", async () => {
    await withStore(async (store) => {
      await store.append(cmd({ messages: texts(3) }));
      const keyed = forkCmd({ requestId: "r", requestHash: "h" });
      await store.fork(keyed);
      await store.append(cmd({ threadId: "f", messages: [user("more")] }));
      const again = await store.fork(keyed);
      expect(again).toMatchObject({ replayed: true, sharedCount: 3, thread: { lastSeq: 4 } });
      await expect(store.fork({ ...keyed, requestHash: "other" })).rejects.toMatchObject({
        code: "invalid_argument",
      });
      await expect(store.fork(forkCmd())).rejects.toMatchObject({ code: "already_exists" });
    });
  });

  it("stores an imported origin as given and lists forks by parent, leaving out expired ones", async () => {
    await withStore(async (store) => {
      const origin = { threadId: "gone", atSeq: 7, forkTime: 900, parentCreateTime: 800 };
      await store.importThread({
        namespace: "ns",
        threadId: "imported",
        strategy: big,
        lastSeq: 0,
        summarizedThroughSeq: 0,
        summary: "",
        summaryTime: 0,
        createTime: 1000,
        updateTime: 1000,
        now: 1000,
        messages: [],
        parent: origin,
      });
      expect((await store.getThread("ns", "imported"))?.parent).toEqual(origin);
      expect(await store.listThreads("ns", "", 10, undefined, "gone")).toEqual(["imported"]);
      await store.append(cmd({ messages: texts(2) }));
      const now = Date.now();
      await store.fork(forkCmd({ newThreadId: "short", ttlMs: 1, now: now - 10 }));
      await store.fork(forkCmd({ newThreadId: "long", now }));
      expect(await store.listThreads("ns", "", 10, undefined, "t")).toEqual(["long"]);
      // The expired fork's id is free again: removed first, then forked anew.
      const again = await store.fork(forkCmd({ newThreadId: "short", now }));
      expect(again.thread.expireTime).toBeUndefined();
      expect(await store.listThreads("ns", "", 10, undefined, "t")).toEqual(["long", "short"]);
    });
  });

  it("refuses a Fork past MAX_LINEAGE segments and one past a quota, writing nothing", async () => {
    const url = await server.createDatabase();
    const store = await createPostgresStore(
      url,
      { maxMessagesPerNamespace: 9_000 },
      { poolSize: 2 },
    );
    try {
      // Each level adds more than FORK_COPY_MAX, so each Fork freezes one more segment.
      let id = "t";
      for (let level = 1; level <= 63; level++) {
        await store.append(cmd({ threadId: id, messages: texts(130, `${level}-`) }));
        await store.fork(forkCmd({ threadId: id, newThreadId: `l${level}` }));
        id = `l${level}`;
      }
      const deep = await store.read("ns", id);
      expect(deep?.messages).toHaveLength(63 * 130);
      expect(deep?.messages.map((m) => m.seq)).toEqual(
        Array.from({ length: 63 * 130 }, (_, i) => i + 1),
      );
      await store.append(cmd({ threadId: id, messages: texts(130, "last-") }));
      await expect(
        store.fork(forkCmd({ threadId: id, newThreadId: "too-deep" })),
      ).rejects.toMatchObject({
        code: "failed_precondition",
      });
      // A copy of 10 messages is past the message quota by one.
      await store.append(cmd({ threadId: "q", messages: texts(10 + 9_000 - 64 * 130 - 10 - 1) }));
      const before = await usage(url);
      await expect(
        store.fork(forkCmd({ threadId: "q", newThreadId: "q2", atSeq: 10 })),
      ).rejects.toMatchObject({
        code: "resource_exhausted",
      });
      expect(await usage(url)).toEqual(before);
      expect(await store.getThread("ns", "too-deep")).toBeUndefined();
      expect(await store.getThread("ns", "q2")).toBeUndefined();
    } finally {
      await store.close();
    }
  }, 120_000);

  it("inherits a summary at or before at_seq and leaves the parent's state as it was", async () => {
    await withStore(async (store) => {
      const summarize: Strategy = {
        kind: "summary",
        window: 2,
        summarizeEvery: 2,
        model: "extractive",
        excludeSystem: false,
        maxStored: 1000,
      };
      const seeded = await store.append(cmd({ strategy: summarize, messages: texts(200) }));
      const token = (await store.acquireFoldLease("ns", "t", 60_000)) ?? 0;
      await store.commitSummary({
        namespace: "ns",
        threadId: "t",
        incarnation: seeded.thread.incarnation,
        leaseToken: token,
        fromSeq: 0,
        throughSeq: 150,
        summary: "so far",
        foldedCount: 150,
        now: 1500,
      });
      const parentBefore = await store.getThread("ns", "t");
      const r = await store.fork(forkCmd({ atSeq: 180, labels: { team: "x" }, ttlMs: 0 }));
      expect(r.summaryInherited).toBe(true);
      expect(r.thread).toMatchObject({
        summary: "so far",
        summarizedThroughSeq: 150,
        labels: { team: "x" },
      });
      expect(r.thread.expireTime).toBeUndefined();
      expect(r.thread.incarnation).not.toBe(seeded.thread.incarnation);
      // The parent's head is frozen underneath it; its state (times, lease, summary) is as it was.
      expect(await store.getThread("ns", "t")).toEqual(parentBefore);
      const folded = await store.read("ns", "f");
      expect(folded?.messages.map((m) => m.seq)).toEqual(
        Array.from({ length: 180 }, (_, i) => i + 1),
      );
      expect((await store.read("ns", "t", { limit: 3 }))?.messages.at(-1)?.seq).toBe(200);
      expect(await store.acquireFoldLease("ns", "t", 60_000)).toBeUndefined();
    });
  });

  it("forks a 100,000-message parent in as many statements as a 300-message one", async () => {
    const counts: number[] = [];
    for (const n of [300, 100_000]) {
      const url = await server.createDatabase();
      await query(url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
      const store = await createPostgresStore(url, {}, { poolSize: 2 });
      try {
        await store.importThread({
          namespace: "ns",
          threadId: "t",
          strategy: big,
          lastSeq: n,
          summarizedThroughSeq: 0,
          summary: "",
          summaryTime: 0,
          createTime: 1000,
          updateTime: 1000,
          now: 1000,
          messages: texts(n).map((m, i) => ({ ...m, seq: i + 1, createTime: 1000 })),
        });
        await query(url, "SELECT pg_stat_statements_reset()");
        await store.fork(forkCmd({ atSeq: n - 10, labels: { team: "a" } }));
        counts.push(await statementsRun(url));
        expect(await store.getThread("ns", "f")).toMatchObject({ lastSeq: n - 10 });
        const snap = await store.read("ns", "f", { limit: 5 });
        expect(snap?.messages.at(-1)?.content).toBe(`m${n - 10}`);
      } finally {
        await store.close();
      }
    }
    expect(counts[1]).toBe(counts[0]);
  }, 120_000);

  it("migrates a version 2 database in place: its threads stay where they are and fork", async () => {
    const url = await server.createDatabase();
    let store = await createPostgresStore(url);
    await store.append(cmd({ messages: texts(200) }));
    await store.close();
    await query(
      url,
      `ALTER TABLE threads DROP COLUMN head, DROP COLUMN lineage, DROP COLUMN parent_thread_id,
         DROP COLUMN parent_at_seq, DROP COLUMN parent_fork_time, DROP COLUMN parent_create_time;
       DROP TABLE segments; DROP SEQUENCE segment_ids;
       DELETE FROM windlass_schema; INSERT INTO windlass_schema (version) VALUES (2)`,
    );
    store = await createPostgresStore(url);
    try {
      expect(await query(url, "SELECT max(version) AS v FROM windlass_schema")).toEqual([{ v: 3 }]);
      expect(await contents(store, "t")).toHaveLength(200);
      await store.fork(forkCmd({ atSeq: 190 }));
      expect(await contents(store, "f")).toHaveLength(190);
      await store.append(cmd({ messages: [user("next")] }));
      expect((await contents(store, "t")).at(-1)).toBe("next");
    } finally {
      await store.close();
    }
  });

  it("lets a replica on the same database see a fork, its messages and its forks index entry", async () => {
    const url = await server.createDatabase();
    const a = await createPostgresStore(url, {}, { poolSize: 2 });
    const b = await createPostgresStore(url, {}, { poolSize: 2 });
    try {
      await a.append(cmd({ messages: texts(200) }));
      const before = await b.headCursor("ns");
      await a.fork(forkCmd({ atSeq: 150, labels: { team: "x" } }));
      expect(await b.listThreads("ns", "", 10, { team: "x" }, "t")).toEqual(["f"]);
      expect(await b.listThreads("ns", "", 10, { team: "y" }, "t")).toEqual([]);
      expect(await contents(b, "f")).toHaveLength(150);
      // The replica's Add to the parent opens its new head, seen by the first.
      await b.append(cmd({ messages: [user("b")] }));
      expect((await contents(a, "t")).at(-1)).toBe("b");
      const events = await b.readEvents("ns", before, 100);
      expect(events.find((e) => e.type === "thread_forked")).toMatchObject({
        threadId: "f",
        parentThreadId: "t",
        atSeq: 150,
        sharedCount: 150,
      });
    } finally {
      await a.close();
      await b.close();
    }
  });

  it("keeps every fork a prefix of its parent while a replica adds to the parent meanwhile", async () => {
    const url = await server.createDatabase();
    const a = await createPostgresStore(url, {}, { poolSize: 4 });
    const b = await createPostgresStore(url, {}, { poolSize: 4 });
    try {
      await a.append(cmd({ messages: texts(150, "p") }));
      const adds = Array.from({ length: 20 }, (_, i) =>
        a.append(cmd({ messages: texts(10, `a${i}-`) })),
      );
      const forks = Array.from({ length: 10 }, (_, i) => b.fork(forkCmd({ newThreadId: `f${i}` })));
      const made = await Promise.all(forks);
      await Promise.all(adds);
      const parent = await contents(b, "t");
      expect(parent).toHaveLength(350);
      for (const f of made) {
        expect(await contents(a, f.thread.threadId)).toEqual(parent.slice(0, f.thread.lastSeq));
      }
      // Every reference is released with its holder: nothing is left behind.
      expect(await b.clearAll("ns", 5000)).toBe(11);
      expect(await segments(url)).toEqual([]);
      expect(await query(url, "SELECT count(*)::int AS n FROM messages")).toEqual([{ n: 0 }]);
      expect(await usage(url)).toMatchObject({ threads: 0, messages: 0 });
    } finally {
      await a.close();
      await b.close();
    }
  }, 60_000);
});

/** Thread "f", imported as a fork of "t" (n messages) sharing seqs through `through`, then `own` of its own. */
function sharingImport(n: number, through: number, own: number): ImportThreadCommand {
  return {
    namespace: "ns",
    threadId: "f",
    strategy: big,
    lastSeq: through + own,
    summarizedThroughSeq: 0,
    summary: "",
    summaryTime: 0,
    createTime: 2500,
    updateTime: 2600,
    messages: texts(own, "own").map((m, i) => ({ ...m, seq: through + i + 1, createTime: 2000 })),
    parent: { threadId: "t", atSeq: through, forkTime: 2500, parentCreateTime: 1000 },
    shareFrom: { threadId: "t", throughSeq: through, parentLastSeq: n },
    now: 3000,
  };
}

async function messageRows(url: string): Promise<number> {
  const [row] = await query<{ n: number }>(url, "SELECT count(*)::int AS n FROM messages");
  return row?.n ?? 0;
}

describe("Postgres store import of a fork sharing its parent's prefix", () => {
  it("freezes the parent's head in place past FORK_COPY_MAX, writing only its own rows", async () => {
    await withStore(async (store, url) => {
      await store.append(cmd({ messages: texts(300) }));
      expect(await store.importThread(sharingImport(300, 250, 3))).toBe(true);
      expect(await segments(url)).toEqual([{ segment_id: "t", refs: 2, count: 300 }]);
      expect(await messageRows(url)).toBe(303);
      expect(await usage(url)).toEqual({ threads: 2, messages: 303 });
      expect(await contents(store, "f")).toEqual([
        ...texts(250).map((m) => m.content),
        ...texts(3, "own").map((m) => m.content),
      ]);
      // The frozen head is released with its last holder, the import's own rows with it.
      await store.clear("ns", "t", 4000);
      await store.clear("ns", "f", 4000);
      expect(await segments(url)).toEqual([]);
      expect(await messageRows(url)).toBe(0);
      expect(await usage(url)).toEqual({ threads: 0, messages: 0 });
    });
  });

  it("copies at most FORK_COPY_MAX of the head into its own, sharing nothing", async () => {
    await withStore(async (store, url) => {
      await store.append(cmd({ messages: texts(100) }));
      expect(await store.importThread(sharingImport(100, 40, 2))).toBe(true);
      expect(await segments(url)).toEqual([]);
      expect(await messageRows(url)).toBe(142);
      expect(await usage(url)).toEqual({ threads: 2, messages: 142 });
      // A second import of the id changes nothing.
      expect(await store.importThread(sharingImport(100, 40, 2))).toBe(false);
      expect(await messageRows(url)).toBe(142);
    });
  });

  it("imports against a 100,000-message parent in as many statements as a 300-message one", async () => {
    const counts: number[] = [];
    for (const n of [300, 100_000]) {
      const url = await server.createDatabase();
      await query(url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
      const store = await createPostgresStore(url, {}, { poolSize: 2 });
      try {
        await store.importThread({
          ...sharingImport(n, n, 0),
          threadId: "t",
          messages: texts(n).map((m, i) => ({ ...m, seq: i + 1, createTime: 1000 })),
          parent: undefined,
          shareFrom: undefined,
        });
        await query(url, "SELECT pg_stat_statements_reset()");
        expect(await store.importThread(sharingImport(n, n - 10, 2))).toBe(true);
        counts.push(await statementsRun(url));
        const snap = await store.read("ns", "f", { limit: 5 });
        expect(snap?.messages.slice(-3).map((m) => m.content)).toEqual([
          `m${n - 10}`,
          "own1",
          "own2",
        ]);
      } finally {
        await store.close();
      }
    }
    expect(counts[1]).toBe(counts[0]);
  }, 120_000);
});

/** The statements run in the database of `url` since the reset (pg_stat_statements). */
async function statementsRun(url: string): Promise<number> {
  const [row] = await query<{ calls: string }>(
    url,
    `SELECT sum(calls) AS calls FROM pg_stat_statements
     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND query NOT LIKE '%pg_stat_statements%'`,
  );
  return Number(row?.calls);
}
