import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ChatMessage, MemoryEvent } from "../../src/core/types.js";
import { createPostgresStore } from "../../src/store/postgres/index.js";
import { ResumeTokens } from "../../src/store/resume-token.js";
import type { RewindCommand, Store } from "../../src/store/store.js";
import {
  holdNamespace,
  type PostgresServer,
  queryPostgres,
  startPostgresServer,
} from "../support/postgres-server.js";
import { freePort } from "../support/redis-server.js";
import { startTcpProxy } from "../support/tcp-proxy.js";
import { appendCommands, buffer, summary, user } from "./fixtures.js";

let server: PostgresServer;
beforeAll(async () => {
  // pg_stat_statements: the set-wise group commit's statements are counted.
  server = await startPostgresServer({
    settings: { shared_preload_libraries: "pg_stat_statements" },
  });
}, 60_000);
// Stopping removes every test's database: tens of seconds on a loaded machine.
afterAll(async () => {
  await server?.stop();
}, 60_000);

const cmd = appendCommands(buffer);

const query = queryPostgres;

/** Resolves once `cond` holds of the batches a listener pushed to `batches`, checked at each push. */
function until(
  batches: MemoryEvent[][],
  cond: (all: MemoryEvent[], batches: MemoryEvent[][]) => boolean,
  ms = 20_000,
) {
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("not delivered in time")), ms);
    const events = batches;
    const check = () => {
      if (cond(events.flat(), events)) {
        clearTimeout(timer);
        resolve();
        return true;
      }
      return false;
    };
    if (check()) return;
    const push = events.push.bind(events);
    events.push = (...batches: MemoryEvent[][]) => {
      const n = push(...batches);
      check();
      return n;
    };
  });
}

/** Makes PostgreSQL refuse a message whose content is "poison", on its INSERT or at COMMIT. */
async function refusePoison(url: string, when: "at insert" | "at commit") {
  const trigger =
    when === "at insert"
      ? "CREATE TRIGGER poison BEFORE INSERT ON messages"
      : "CREATE CONSTRAINT TRIGGER poison AFTER INSERT ON messages DEFERRABLE INITIALLY DEFERRED";
  await query(
    url,
    `CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN IF NEW.content = 'poison' THEN RAISE EXCEPTION 'poison ${when}'; END IF;
     RETURN NEW; END $$;
     ${trigger} FOR EACH ROW EXECUTE FUNCTION refuse_poison();`,
  );
}

/** The threads and messages namespace "ns" counts for its quotas. */
async function namespaceUsage(url: string): Promise<number[]> {
  const [usage] = await query<{ threads: string; messages: string }>(
    url,
    "SELECT threads, messages FROM namespaces WHERE namespace = 'ns'",
  );
  return [Number(usage?.threads), Number(usage?.messages)];
}

describe("Postgres store", () => {
  it("commits concurrent Adds in fewer transactions than Adds (group commit)", async () => {
    const url = await server.createDatabase();
    const store = await createPostgresStore(url, {}, { poolSize: 2 });
    try {
      const n = 64;
      const results = await Promise.all(
        Array.from({ length: n }, (_, i) => store.append(cmd({ threadId: `g${i}` }))),
      );
      expect(results.every((r) => r.lastSeq === 1)).toBe(true);
      // Rows written by one transaction (each Add in a savepoint of it) share its commit time.
      const [row] = await query<{ tx: string; rows: string }>(
        url,
        "SELECT count(DISTINCT pg_xact_commit_timestamp(xmin)) AS tx, count(*) AS rows FROM messages",
      );
      expect(Number(row?.rows)).toBe(n);
      expect(Number(row?.tx)).toBeLessThan(n / 4);
    } finally {
      await store.close();
    }
  });

  it("fails one refused Add of a group alone; the others commit", async () => {
    const url = await server.createDatabase();
    const store = await createPostgresStore(url, {}, { poolSize: 2 });
    try {
      await store.append(cmd({ threadId: "x" }));
      const outcomes = await Promise.allSettled(
        Array.from({ length: 20 }, (_, i) =>
          store.append(cmd({ threadId: i === 7 ? "x" : `y${i}`, expectedLastSeq: 0 })),
        ),
      );
      expect(outcomes.filter((o) => o.status === "rejected")).toHaveLength(1);
      expect(outcomes[7]?.status).toBe("rejected");
      expect(await store.listThreads("ns", "", 100)).toHaveLength(20);
    } finally {
      await store.close();
    }
  });

  it("runs each write of a group alone when the server refuses its COMMIT, answering each truly", async () => {
    const url = await server.createDatabase();
    const store = await createPostgresStore(url, {}, { poolSize: 2 });
    try {
      await store.append(cmd({ threadId: "seed" }));
      // A check PostgreSQL runs at COMMIT only: a message "poison" makes the COMMIT fail.
      await refusePoison(url, "at commit");
      const outcomes = await Promise.allSettled(
        Array.from({ length: 10 }, (_, i) =>
          store.append(cmd({ threadId: `c${i}`, messages: [user(i === 5 ? "poison" : "ok")] })),
        ),
      );
      const refused = outcomes.flatMap((o, i) => (o.status === "rejected" ? [i] : []));
      expect(refused).toEqual([5]);
      const reason = (outcomes[5] as PromiseRejectedResult).reason as {
        code: string;
        message: string;
      };
      expect(reason.code).toBe("unavailable");
      expect(reason.message).toContain("this write was not stored");
      expect(await store.getThread("ns", "c5")).toBeUndefined();
      const ids = await store.listThreads("ns", "", 100);
      expect(ids.filter((id) => id.startsWith("c"))).toHaveLength(9);
    } finally {
      await store.close();
    }
  });

  it("lets two store instances commit groups over the same namespaces without deadlocks", async () => {
    const url = await server.createDatabase();
    // One group at a time per instance, so what queues behind the first forms one big group.
    const stores = [
      await createPostgresStore(url, {}, { poolSize: 2 }),
      await createPostgresStore(url, {}, { poolSize: 2 }),
    ];
    try {
      for (const namespace of ["gate", "n0", "n1", "n2"]) {
        await stores[0]?.append(cmd({ namespace, threadId: "seed" }));
      }
      const gate = await holdNamespace(url, "gate");
      const firsts = stores.map((s) => s.append(cmd({ namespace: "gate" })));
      // Both instances queue Adds to every namespace, in opposite orders.
      const adds = stores.flatMap((store, k) =>
        Array.from({ length: 60 }, (_, i) => {
          const n = k === 0 ? i % 3 : 2 - (i % 3);
          return store.append(
            cmd({ namespace: `n${n}`, threadId: `t${i % 4}`, messages: [user(`${k}.${i}`)] }),
          );
        }),
      );
      await gate.release();
      await Promise.all([...firsts, ...adds]);
      for (const namespace of ["n0", "n1", "n2"]) {
        for (const id of (await stores[0]?.listThreads(namespace, "", 10)) ?? []) {
          const seqs = (await stores[1]?.read(namespace, id))?.messages.map((m) => m.seq) ?? [];
          expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, j) => j + 1));
        }
      }
    } finally {
      for (const s of stores) await s.close();
    }
    // Backends report their statistics as they exit: the stores have closed theirs.
    const [row] = await query<{ deadlocks: string }>(
      url,
      "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
    );
    expect(Number(row?.deadlocks)).toBe(0);
  });

  it("shows each store instance the other's events, through one database", async () => {
    const url = await server.createDatabase();
    const a = await createPostgresStore(url);
    const b = await createPostgresStore(url);
    try {
      const heard: MemoryEvent[][] = [];
      const stop = b.subscribe("ns", (events) => heard.push(events));
      const start = await a.headCursor("ns");
      // B's subscription starts at the head it reads: a's Adds go on until B hears one.
      const delivered = until(heard, (all) => all.length > 0);
      let done = false;
      void delivered.then(() => {
        done = true;
      });
      for (let i = 0; !done && i < 200; i++) {
        await a.append(cmd({ threadId: "from-a", messages: [user(String(i))] }));
        await a.read("ns", "from-a");
      }
      await delivered;
      stop();
      const head = await a.headCursor("ns");
      expect(await b.headCursor("ns")).toBe(head);
      // What B heard is a stretch of A's log, in order, each event once.
      const heardCursors = heard.flat().map((e) => e.cursor);
      const log = (await a.readEvents("ns", start, 1000)).map((e) => e.cursor);
      const from = log.indexOf(heardCursors[0] ?? "");
      expect(from).toBeGreaterThanOrEqual(0);
      expect(heardCursors).toEqual(log.slice(from, from + heardCursors.length));
      expect(log.at(-1)).toBe(head);
      expect((await b.read("ns", "from-a"))?.thread.lastSeq).toBe(
        (await a.getThread("ns", "from-a"))?.lastSeq,
      );
    } finally {
      await a.close();
      await b.close();
    }
  });

  it("keeps a subscription through a Postgres restart, and every acknowledged Add", async () => {
    const own = await startPostgresServer();
    const url = await own.createDatabase();
    let store: Store | undefined;
    try {
      store = await createPostgresStore(url);
      const s = store;
      const heard: MemoryEvent[][] = [];
      s.subscribe("ns", (events) => heard.push(events));
      await s.append(cmd({ threadId: "before" }));
      await until(heard, (all) => all.some((e) => e.threadId === "before"));
      await own.kill();
      const down = await s.append(cmd({ threadId: "down" })).then(
        () => "stored",
        (err: { code?: string }) => err.code,
      );
      expect(down).toBe("unavailable");
      await own.restart();
      // After the restart: an empty batch ("look again"), then the new events.
      const after = until(
        heard,
        (all, batches) =>
          all.some((e) => e.threadId === "after") && batches.some((b) => b.length === 0),
      );
      let stored = false;
      while (!stored) {
        stored = await s.append(cmd({ threadId: "after" })).then(
          () => true,
          () => false,
        );
      }
      await after;
      expect(await s.getThread("ns", "before")).toBeDefined();
      expect((await s.read("ns", "after"))?.messages.length).toBeGreaterThanOrEqual(1);
    } finally {
      await store?.close();
      await own.stop();
    }
  }, 60_000);
});

/**
 * Runs `writes` as one group: queued behind an Add that waits on the
 * namespace's lock (one group at a time with poolSize 2), then let go.
 */
async function oneGroup<T>(url: string, store: Store, writes: () => Promise<T>[]) {
  const lock = await holdNamespace(url, "ns");
  const blocker = store.append(cmd({ threadId: "blocker" }));
  const outcomes = Promise.allSettled(writes());
  await lock.release();
  await blocker;
  return outcomes;
}

/** The statements run in the database of `url` so far (pg_stat_statements), less this count's. */
async function statementsRun(url: string): Promise<number> {
  const [row] = await query<{ calls: string }>(
    url,
    `SELECT sum(calls) AS calls FROM pg_stat_statements
     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND query NOT LIKE '%pg_stat_statements%'`,
  );
  return Number(row?.calls);
}

const byBytes = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

const outcomeCode = (o: PromiseSettledResult<unknown> | undefined) =>
  o?.status === "rejected" ? (o.reason as { code?: string }).code : "ok";

describe("Postgres store set-wise group commit", () => {
  it("runs a group of Adds in as many statements whatever their number", async () => {
    const counts: number[] = [];
    for (const n of [4, 40]) {
      const url = await server.createDatabase();
      await query(url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
      const store = await createPostgresStore(url, {}, { poolSize: 2 });
      try {
        await store.append(cmd({ threadId: "seed" }));
        const outcomes = await oneGroup(url, store, () =>
          Array.from({ length: n }, (_, i) =>
            store.append(
              cmd({
                threadId: `t${i}`,
                requestId: `r${i}`,
                requestHash: `h${i}`,
                labels: { team: i % 2 === 0 ? "even" : "odd" },
              }),
            ),
          ),
        );
        expect(outcomes.map(outcomeCode)).toEqual(Array(n).fill("ok"));
        counts.push(await statementsRun(url));
        expect(await store.listThreads("ns", "", 100, { team: "even" })).toHaveLength(n / 2);
      } finally {
        await store.close();
      }
    }
    expect(counts[1]).toBe(counts[0]);
  });

  it("runs a group of Adds on forks (and on a parent whose head they froze) in as many statements as on plain threads", async () => {
    const counts: number[] = [];
    const ids = ["p", "f0", "f1", "f2", "f3"];
    for (const forked of [false, true]) {
      const url = await server.createDatabase();
      await query(url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
      const store = await createPostgresStore(url, {}, { poolSize: 2 });
      try {
        const many = Array.from({ length: 300 }, (_, i) => user(`m${i + 1}`));
        await store.append(cmd({ threadId: "p", messages: many }));
        for (const [i, id] of ids.slice(1).entries()) {
          if (!forked) await store.append(cmd({ threadId: id, messages: many }));
          else {
            await store.fork({
              namespace: "ns",
              threadId: "p",
              newThreadId: id,
              // f0 at the parent's head freezes it; the others share a prefix of it.
              atSeq: i === 0 ? undefined : 300 - i,
              expectedLastSeq: undefined,
              strategy: undefined,
              labels: undefined,
              ttlMs: undefined,
              requestId: "",
              requestHash: "",
              now: 2000,
            });
          }
        }
        await query(url, "SELECT pg_stat_statements_reset()");
        const outcomes = await oneGroup(url, store, () =>
          ids.map((id, i) =>
            store.append(
              cmd({ threadId: id, requestId: `r${i}`, requestHash: `h${i}`, now: 3000 }),
            ),
          ),
        );
        expect(outcomes.map(outcomeCode)).toEqual(Array(ids.length).fill("ok"));
        counts.push(await statementsRun(url));
        for (const id of ids) {
          const snap = await store.read("ns", id, { limit: 2 });
          expect(snap?.messages.at(-1)?.role).toBe("user");
          expect(snap?.thread.lastSeq).toBe(id === "p" || !forked ? 301 : 301 - Number(id[1]));
        }
      } finally {
        await store.close();
      }
    }
    expect(counts[1]).toBe(counts[0]);
  });

  it("decides each Add of one group in arrival order, a refusal or replay changing nothing else", async () => {
    const url = await server.createDatabase();
    const store = await createPostgresStore(url, { maxThreadsPerNamespace: 4 }, { poolSize: 2 });
    try {
      const keyed = (threadId: string, requestId: string, content: string) =>
        cmd({
          threadId,
          requestId,
          requestHash: `${requestId}:${content}`,
          messages: [user(content)],
        });
      await store.append(keyed("a", "r1", "a1"));
      const head = await store.headCursor("ns");
      const outcomes = await oneGroup(url, store, () => [
        store.append(cmd({ threadId: "a", messages: [user("a2")] })),
        store.append(cmd({ threadId: "a", messages: [user("no")], expectedLastSeq: 0 })),
        store.append(cmd({ threadId: "a", messages: [user("a3")] })),
        store.append(keyed("a", "r1", "a1")), // a retry of the first Add: replayed
        store.append(keyed("b", "r2", "b1")),
        store.append(cmd({ threadId: "c", messages: [user("c1")] })),
        store.append(cmd({ threadId: "d", messages: [user("d1")] })), // a fifth thread
        store.append(keyed("b", "r2", "b1")), // a retry of one recorded in this group
        store.append(cmd({ threadId: "a", messages: [user("a4")] })),
        store.append(keyed("b", "r1", "b2")), // ids are per thread
        store.append(keyed("a", "r1", "other")), // the id of another payload
      ]);
      expect(outcomes.map(outcomeCode)).toEqual([
        "ok",
        "aborted",
        "ok",
        "ok",
        "ok",
        "ok",
        "resource_exhausted",
        "ok",
        "ok",
        "ok",
        "invalid_argument",
      ]);
      const value = (i: number) =>
        (
          outcomes[i] as PromiseFulfilledResult<{
            firstSeq: number;
            lastSeq: number;
            replayed: boolean;
          }>
        ).value;
      expect([0, 2, 8].map((i) => value(i).lastSeq)).toEqual([2, 3, 4]);
      expect(value(3)).toMatchObject({ firstSeq: 1, lastSeq: 1, replayed: true });
      expect(value(7)).toMatchObject({ firstSeq: 1, lastSeq: 1, replayed: true });
      expect(value(9)).toMatchObject({ firstSeq: 2, lastSeq: 2, replayed: false });
      const contents = async (t: string) =>
        (await store.read("ns", t))?.messages.map((m) => [m.seq, m.content]);
      expect(await contents("a")).toEqual([
        [1, "a1"],
        [2, "a2"],
        [3, "a3"],
        [4, "a4"],
      ]);
      expect(await contents("b")).toEqual([
        [1, "b1"],
        [2, "b2"],
      ]);
      expect(await store.listThreads("ns", "", 100)).toEqual(["a", "b", "blocker", "c"]);
      expect(await namespaceUsage(url)).toEqual([4, 8]);
      const events = await store.readEvents("ns", head, 100);
      expect(events.map((e) => [e.threadId, e.type === "messages_added" && e.lastSeq])).toEqual([
        ["blocker", 1],
        ["a", 2],
        ["a", 3],
        ["b", 1],
        ["c", 1],
        ["a", 4],
        ["b", 2],
      ]);
      // One transaction for the whole group, the savepoint of the retry included.
      const [tx] = await query<{ n: string }>(
        url,
        `SELECT count(DISTINCT pg_xact_commit_timestamp(xmin)) AS n FROM messages
         WHERE thread_id <> 'blocker' AND seq > CASE WHEN thread_id = 'a' THEN 1 ELSE 0 END`,
      );
      expect(Number(tx?.n)).toBe(1);
    } finally {
      await store.close();
    }
  });

  it("runs trims and expired threads one by one among a group's Adds to the same threads", async () => {
    const url = await server.createDatabase();
    const store = await createPostgresStore(url, {}, { poolSize: 2 });
    const small = { ...buffer, maxStored: 3 };
    try {
      for (const c of ["t1", "t2", "t3"]) {
        await store.append(cmd({ threadId: "t", defaultStrategy: small, messages: [user(c)] }));
      }
      await store.append(cmd({ threadId: "e", ttlMs: 500, now: 1000 }));
      const later = 2000;
      const outcomes = await oneGroup(url, store, () => [
        store.append(
          cmd({ threadId: "t", defaultStrategy: small, messages: [user("t4")], now: later }),
        ),
        store.append(cmd({ threadId: "u", messages: [user("u1")], now: later })),
        store.append(
          cmd({ threadId: "t", defaultStrategy: small, messages: [user("t5")], now: later }),
        ),
        store.append(cmd({ threadId: "e", messages: [user("e-new")], now: later })),
        store.append(cmd({ threadId: "e", messages: [user("e-next")], now: later })),
        store.append(cmd({ threadId: "u", messages: [user("u2")], now: later })),
      ]);
      expect(outcomes.map(outcomeCode)).toEqual(Array(6).fill("ok"));
      const seqs = outcomes.map(
        (o) => (o as PromiseFulfilledResult<{ lastSeq: number }>).value.lastSeq,
      );
      expect(seqs).toEqual([4, 1, 5, 1, 2, 2]);
      const contents = async (t: string) =>
        (await store.read("ns", t, undefined))?.messages.map((m) => m.content);
      expect(await contents("t")).toEqual(["t3", "t4", "t5"]);
      expect(await contents("e")).toEqual(["e-new", "e-next"]);
      expect(await contents("u")).toEqual(["u1", "u2"]);
      expect(await namespaceUsage(url)).toEqual([4, 8]);
    } finally {
      await store.close();
    }
  });

  it("starts a group with ids holding quotes and backslashes, which its first round trip spells as literals", async () => {
    const url = await server.createDatabase();
    const store = await createPostgresStore(url, {}, { poolSize: 2 });
    const namespace = "o'ne\\ns";
    const ids = ["it's", "back\\slash", "''; DROP TABLE threads; --", "\\'"];
    try {
      for (let round = 1; round <= 2; round++) {
        const results = await Promise.all(
          ids.map((threadId) => store.append(cmd({ namespace, threadId }))),
        );
        expect(results.map((r) => r.lastSeq)).toEqual(Array(ids.length).fill(round));
      }
      expect(await store.listThreads(namespace, "", 100)).toEqual([...ids].sort(byBytes));
      expect(await store.listThreads("ns", "", 100)).toEqual([]);
    } finally {
      await store.close();
    }
  });

  it("runs each Add alone when a statement of their batch fails, the failing one refused alone", async () => {
    const url = await server.createDatabase();
    const store = await createPostgresStore(url, {}, { poolSize: 2 });
    try {
      await store.append(cmd({ threadId: "seed" }));
      // The batch's INSERT of the messages fails on "poison".
      await refusePoison(url, "at insert");
      const outcomes = await oneGroup(url, store, () =>
        Array.from({ length: 8 }, (_, i) =>
          store.append(
            cmd({
              threadId: i < 4 ? "same" : `o${i}`,
              messages: [user(i === 2 ? "poison" : `m${i}`)],
            }),
          ),
        ),
      );
      expect(outcomes.map(outcomeCode)).toEqual([
        "ok",
        "ok",
        "unavailable",
        "ok",
        "ok",
        "ok",
        "ok",
        "ok",
      ]);
      expect((outcomes[2] as PromiseRejectedResult).reason.message).toContain(
        "this write was not stored",
      );
      const same = await store.read("ns", "same");
      expect(same?.messages.map((m) => [m.seq, m.content])).toEqual([
        [1, "m0"],
        [2, "m1"],
        [3, "m3"],
      ]);
      expect(await store.listThreads("ns", "", 100)).toHaveLength(7);
    } finally {
      await store.close();
    }
  });
});

describe("Postgres store text", () => {
  it("keeps NUL characters, which PostgreSQL's text and jsonb refuse, in every field", async () => {
    const store = await createPostgresStore(await server.createDatabase());
    try {
      const nul: ChatMessage = {
        role: "assistant",
        content: "a\u0000b",
        name: "n\u0000",
        toolCalls: [{ id: "c\u00001", name: "f", arguments: '{"x":"\u0000"}' }],
        metadata: { k: "v\u0000" },
      };
      const r = await store.append(cmd({ strategy: summary, messages: [nul, user("\u0000")] }));
      expect((await store.read("ns", "t"))?.messages[0]).toMatchObject(nul);
      const token = (await store.acquireFoldLease("ns", "t", 10_000)) ?? 0;
      const head = await store.headCursor("ns");
      const folded = await store.commitSummary({
        namespace: "ns",
        threadId: "t",
        incarnation: r.thread.incarnation,
        leaseToken: token,
        fromSeq: 0,
        throughSeq: 1,
        summary: "s\u0000",
        foldedCount: 1,
        now: 2,
      });
      expect(folded?.summary).toBe("s\u0000");
      expect((await store.getThread("ns", "t"))?.summary).toBe("s\u0000");
      expect(await store.readEvents("ns", head, 10)).toMatchObject([{ summary: "s\u0000" }]);
      const again = await store.append(
        cmd({ threadId: "r", requestId: "q\u0000", requestHash: "h", messages: [nul] }),
      );
      expect(
        await store.append(
          cmd({ threadId: "r", requestId: "q\u0000", requestHash: "h", messages: [nul] }),
        ),
      ).toEqual({ ...again, replayed: true });
    } finally {
      await store.close();
    }
  });
});

describe("Postgres store history", () => {
  it("answers a token it signed that is ahead of the head (a restored database) out_of_range", async () => {
    const url = await server.createDatabase();
    const store = await createPostgresStore(url);
    try {
      await store.append(cmd());
      const meta = await query<{ key: string; value: string }>(url, "SELECT key, value FROM meta");
      const get = (k: string) => meta.find((r) => r.key === k)?.value ?? "";
      // Signed with this database's own key, as a token from before a restore would be.
      const tokens = new ResumeTokens(get("database_id"), get("token_secret"), "");
      const ahead = tokens.issue("ns", 5);
      const err = await store.readEvents("ns", ahead, 10).then(
        () => undefined,
        (e: { code?: string; message?: string }) => e,
      );
      expect(err?.code).toBe("out_of_range");
      expect(err?.message).toContain("re-read with Get and watch from now");
      expect(await store.readEvents("ns", tokens.issue("ns", 0), 10)).toHaveLength(1);
    } finally {
      await store.close();
    }
  });
});

/** As a database restored from another's backup would be: a new id and secret. */
const NEW_INCARNATION = `UPDATE meta SET value = CASE key WHEN 'database_id' THEN 'f00dfeed0001'
  ELSE repeat('ab', 32) END WHERE key IN ('database_id', 'token_secret')`;

describe("Postgres store incarnation", () => {
  it("adopts a database that took a new incarnation when its LISTEN connection comes back", async () => {
    const url = await server.createDatabase();
    const store = await createPostgresStore(url);
    try {
      const heard: MemoryEvent[][] = [];
      store.subscribe("ns", (events) => heard.push(events));
      await store.append(cmd({ threadId: "old" }));
      await until(heard, (all) => all.length === 1);
      const oldToken = await store.headCursor("ns");
      await query(url, NEW_INCARNATION);
      const lookAgain = until(heard, (_all, batches) => batches.some((b) => b.length === 0));
      await query(
        url,
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND query LIKE 'LISTEN%'`,
      );
      await lookAgain;
      const err = await store.readEvents("ns", oldToken, 10).then(
        () => undefined,
        (e: { code?: string }) => e.code,
      );
      expect(err).toBe("out_of_range");
      expect((await store.headCursor("ns")).startsWith("f00dfeed0001.")).toBe(true);
      // Subscriptions go on in the new incarnation.
      const next = until(heard, (all) => all.some((e) => e.threadId === "new"));
      await store.append(cmd({ threadId: "new" }));
      await next;
    } finally {
      await store.close();
    }
  });
});

describe("Postgres store incarnation, through health", () => {
  it("adopts a new incarnation at the next health check, telling subscriptions to look again", async () => {
    const url = await server.createDatabase();
    const store = await createPostgresStore(url);
    try {
      await store.append(cmd({ threadId: "old" }));
      const oldToken = await store.headCursor("ns");
      const heard: MemoryEvent[][] = [];
      store.subscribe("other", (events) => heard.push(events));
      await query(url, NEW_INCARNATION);
      const lookAgain = until(heard, (_all, batches) => batches.some((b) => b.length === 0));
      expect(await store.health(5000)).toEqual({ serving: true });
      await lookAgain;
      const err = await store.readEvents("ns", oldToken, 10).then(
        () => undefined,
        (e: { code?: string }) => e.code,
      );
      expect(err).toBe("out_of_range");
    } finally {
      await store.close();
    }
  });
});

describe("Postgres store writes waiting on a lock", () => {
  it("refuses an Add still queued at its deadline, storing nothing", async () => {
    const url = await server.createDatabase();
    // One group at a time: the second Add waits behind the first.
    const store = await createPostgresStore(url, {}, { poolSize: 2 });
    try {
      await store.append(cmd({ threadId: "seed" }));
      const lock = await holdNamespace(url, "ns");
      const first = store.append(cmd({ threadId: "first" }));
      const late = store.append(cmd({ threadId: "late", deadline: Date.now() + 300 }));
      const err = await late.then(
        () => undefined,
        (e: { code?: string }) => e.code,
      );
      expect(err).toBe("deadline_exceeded");
      await lock.release();
      expect((await first).lastSeq).toBe(1);
      expect(await store.getThread("ns", "late")).toBeUndefined();
    } finally {
      await store.close();
    }
  });

  it("closes within its grace, answering every write it was handed", async () => {
    const url = await server.createDatabase();
    const store = await createPostgresStore(url, {}, { poolSize: 2 });
    await store.append(cmd({ threadId: "seed" }));
    const lock = await holdNamespace(url, "ns");
    try {
      const writes = [store.append(cmd({ threadId: "a" })), store.append(cmd({ threadId: "b" }))];
      const settled = Promise.allSettled(writes);
      const started = Date.now();
      await store.close(300);
      const outcomes = await settled;
      expect(Date.now() - started).toBeLessThan(5_000);
      for (const o of outcomes) {
        expect(o.status).toBe("rejected");
        if (o.status === "rejected")
          expect((o.reason as { code?: string }).code).toBe("unavailable");
      }
    } finally {
      await lock.release();
    }
    // Nothing refused was stored.
    const rows = await query<{ n: string }>(url, "SELECT count(*) AS n FROM threads");
    expect(Number(rows[0]?.n)).toBe(1);
  });
});

describe("Postgres store behind a black-holed network", () => {
  it("answers a write whose connection goes silent within its timeout, and writes again after", async () => {
    const url = new URL(await server.createDatabase());
    const proxy = await startTcpProxy(Number(url.port));
    url.port = String(proxy.port);
    const store = await createPostgresStore(url.toString(), {}, { statementTimeoutMs: 1000 });
    try {
      await store.append(cmd({ threadId: "before" }));
      proxy.blackhole();
      const started = Date.now();
      const outcome = await store.append(cmd({ threadId: "silent" })).then(
        () => undefined,
        (e: { code?: string; message?: string }) => e,
      );
      expect(outcome?.code).toBe("unavailable");
      expect(outcome?.message).toContain("this write was not stored");
      // The group's answer times out (twice the statement timeout); the write then
      // run alone waits at most the connect timeout (10 s) for a connection: bounded.
      expect(Date.now() - started).toBeLessThan(20_000);
      proxy.restore();
      const r = await store.append(cmd({ threadId: "after" }));
      expect(r.lastSeq).toBe(1);
      // What the proxy held is delivered now; the abandoned transaction never commits.
      expect(await store.getThread("ns", "silent")).toBeUndefined();
    } finally {
      proxy.restore();
      await store.close();
      await proxy.close();
    }
  }, 30_000);
});

describe("Postgres store health", () => {
  it("reports not serving when Postgres does not answer within the timeout, and serving again", async () => {
    const url = new URL(await server.createDatabase());
    const proxy = await startTcpProxy(Number(url.port));
    url.port = String(proxy.port);
    const store = await createPostgresStore(url.toString());
    try {
      expect(await store.health(1000)).toEqual({ serving: true });
      proxy.blackhole();
      const started = Date.now();
      const h = await store.health(200);
      expect(Date.now() - started).toBeLessThan(1000);
      expect(h.serving).toBe(false);
      expect(h.reason).toContain("did not answer within 200 ms");
      expect(h.reason).not.toContain(`${url.hostname}:${url.port}`);
      proxy.restore();
      expect(await store.health(5000)).toEqual({ serving: true });
    } finally {
      proxy.restore();
      await store.close();
      await proxy.close();
    }
  });
});

describe("Postgres store at start-up", () => {
  it("refuses a database whose schema is newer than this server's, naming the versions", async () => {
    const url = await server.createDatabase();
    await (await createPostgresStore(url)).close();
    await query(url, "INSERT INTO windlass_schema (version) VALUES (99)");
    await expect(createPostgresStore(url)).rejects.toThrow(/schema version 99 is newer/);
  });

  it("exits 1 naming the store when PostgreSQL cannot be reached, never printing the password", async () => {
    const bin = new URL("../../bin/windlass-memory.js", import.meta.url).pathname;
    const closed = await freePort();
    const url = `postgres://windlass:hunter2@127.0.0.1:${closed}/memory`;
    const r = await promisify(execFile)(process.execPath, [bin, "serve", "--store", url], {
      env: { PATH: process.env.PATH ?? "" },
      timeout: 30_000,
    }).then(
      () => ({ code: 0 as number | null, stderr: "" }),
      (e: { code: number | null; stderr: string }) => e,
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("the Postgres store (--store) did not open");
    expect(r.stderr).not.toContain("hunter2");
  });
});

const rewindCmd = (over: Partial<RewindCommand> = {}): RewindCommand => ({
  namespace: "ns",
  threadId: "t",
  toSeq: 0,
  expectedLastSeq: undefined,
  requestId: "",
  requestHash: "",
  now: 2000,
  ...over,
});

/**
 * Namespace "ns" as the quotas count it (its namespaces row), as its thread
 * rows count it, and as its message rows are (content bytes: the tests'
 * messages have nothing else).
 */
async function usage(url: string) {
  const [row] = await query<Record<string, number>>(
    url,
    `SELECT n.threads::int AS threads, n.messages::int AS messages, n.bytes::int AS bytes,
       (SELECT count(*) FROM threads WHERE namespace = 'ns')::int AS thread_rows,
       (SELECT coalesce(sum(stored), 0) FROM threads WHERE namespace = 'ns')::int AS stored,
       (SELECT coalesce(sum(bytes), 0) FROM threads WHERE namespace = 'ns')::int AS stored_bytes,
       (SELECT count(*) FROM messages WHERE namespace = 'ns')::int AS message_rows,
       (SELECT coalesce(sum(octet_length(content)), 0) FROM messages
        WHERE namespace = 'ns')::int AS content_bytes
     FROM namespaces n WHERE n.namespace = 'ns'`,
  );
  if (row === undefined) throw new Error("no namespace row");
  expect([row.thread_rows, row.stored, row.stored_bytes]).toEqual([
    row.threads,
    row.messages,
    row.bytes,
  ]);
  expect([row.message_rows, row.content_bytes]).toEqual([row.messages, row.bytes]);
  return { threads: row.threads, messages: row.messages, bytes: row.bytes };
}

const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => "resolved",
    (e: { code?: string }) => e.code,
  );

describe("Postgres store rewind", () => {
  it("drops the messages after to_seq, gives their room back and logs thread_rewound", async () => {
    const url = await server.createDatabase();
    const store = await createPostgresStore(url);
    try {
      await store.append(
        cmd({ messages: ["a", "b", "c"].map(user), requestId: "r1", requestHash: "h1" }),
      );
      const before = await store.append(
        cmd({
          messages: [user("dd"), user("eee")],
          requestId: "r2",
          requestHash: "h2",
          labels: { k: "v" },
        }),
      );
      const head = await store.headCursor("ns");
      const r = await store.rewind(rewindCmd({ toSeq: 3, requestId: "rw", requestHash: "hw" }));
      expect(r).toEqual({
        thread: { ...before.thread, lastSeq: 3, updateTime: 2000 },
        removedCount: 2,
        summaryDropped: false,
        replayed: false,
      });
      expect((await store.read("ns", "t"))?.messages.map((m) => m.content)).toEqual([
        "a",
        "b",
        "c",
      ]);
      expect(await store.getThread("ns", "t")).toEqual(r.thread);
      expect(await store.listThreads("ns", "", 10, { k: "v" })).toEqual(["t"]);
      expect(await store.readEvents("ns", head, 10)).toMatchObject([
        {
          type: "thread_rewound",
          threadId: "t",
          time: 2000,
          toSeq: 3,
          removedCount: 2,
          summaryDropped: false,
        },
      ]);
      expect(await usage(url)).toEqual({ threads: 1, messages: 3, bytes: 3 });

      // The Add that stored seqs 4 and 5 is forgotten: a retry of it adds them again.
      const retried = cmd({
        messages: [user("dd"), user("eee")],
        requestId: "r2",
        requestHash: "h2",
        now: 3000,
      });
      expect(await store.append(retried)).toMatchObject({
        firstSeq: 4,
        lastSeq: 5,
        replayed: false,
      });
      // The one whose messages stayed is still answered with its first result.
      expect(await store.append(cmd({ requestId: "r1", requestHash: "h1" }))).toMatchObject({
        firstSeq: 1,
        lastSeq: 3,
        replayed: true,
      });
      // The Rewind's own id: the same payload gets the first answer, another is refused.
      expect(
        await store.rewind(rewindCmd({ toSeq: 3, requestId: "rw", requestHash: "hw", now: 4000 })),
      ).toEqual({ ...r, replayed: true });
      expect(
        await codeOf(store.rewind(rewindCmd({ toSeq: 2, requestId: "rw", requestHash: "x" }))),
      ).toBe("invalid_argument");
      // One id names one request: an Add's is not a Rewind's, nor the reverse, whatever the digest.
      expect(
        await codeOf(store.rewind(rewindCmd({ toSeq: 3, requestId: "r1", requestHash: "h1" }))),
      ).toBe("invalid_argument");
      expect(await codeOf(store.append(cmd({ requestId: "rw", requestHash: "hw" })))).toBe(
        "invalid_argument",
      );
      expect(await usage(url)).toEqual({ threads: 1, messages: 5, bytes: 8 });

      // Back to where it is: nothing changes and nothing is logged.
      const head2 = await store.headCursor("ns");
      const thread = await store.getThread("ns", "t");
      expect(await store.rewind(rewindCmd({ toSeq: 5, now: 5000 }))).toEqual({
        thread,
        removedCount: 0,
        summaryDropped: false,
        replayed: false,
      });
      expect(await store.getThread("ns", "t")).toEqual(thread);
      expect(await store.readEvents("ns", head2, 10)).toEqual([]);
    } finally {
      await store.close();
    }
  });

  it("refuses what core/rewind.ts refuses, changing nothing; keeps the ttl; an expired thread is not found", async () => {
    const url = await server.createDatabase();
    const store = await createPostgresStore(url);
    try {
      // Reads tell expiry by the clock: these times are now's.
      const t0 = Date.now();
      await store.append(cmd({ messages: ["a", "b", "c"].map(user), ttlMs: 60_000, now: t0 }));
      const head = await store.headCursor("ns");
      const thread = await store.getThread("ns", "t");
      const at = (now: number, over: Partial<RewindCommand>) => rewindCmd({ now, ...over });
      const refusals = await Promise.all([
        codeOf(store.rewind(at(t0 + 1, { threadId: "nope", toSeq: 0 }))),
        codeOf(store.rewind(at(t0 + 1, { toSeq: 1, expectedLastSeq: 2 }))),
        codeOf(store.rewind(at(t0 + 1, { toSeq: 4 }))),
        codeOf(store.rewind(at(t0 + 60_000, { toSeq: 1 }))),
      ]);
      expect(refusals).toEqual(["not_found", "aborted", "out_of_range", "not_found"]);
      expect(await store.getThread("ns", "t")).toEqual(thread);
      expect((await store.read("ns", "t"))?.messages).toHaveLength(3);
      expect(await store.readEvents("ns", head, 10)).toEqual([]);
      expect(await usage(url)).toEqual({ threads: 1, messages: 3, bytes: 3 });
      // A Rewind is no Add: the thread's expiry stays where its last Add put it.
      const r = await store.rewind(at(t0 + 2, { toSeq: 1, expectedLastSeq: 3 }));
      expect(r.thread).toMatchObject({ lastSeq: 1, ttlMs: 60_000, expireTime: t0 + 60_000 });
      expect(await store.getThread("ns", "t")).toEqual(r.thread);
    } finally {
      await store.close();
    }
  });

  it("ends the fold lease, so a fold in flight on another store instance never commits", async () => {
    const url = await server.createDatabase();
    const [a, b] = [await createPostgresStore(url), await createPostgresStore(url)];
    try {
      const added = await a.append(
        cmd({ strategy: summary, messages: ["m1", "m2", "m3", "m4", "m5", "m6"].map(user) }),
      );
      const fold = {
        namespace: "ns",
        threadId: "t",
        incarnation: added.thread.incarnation,
        foldedCount: 2,
        now: 1500,
      };
      const first = (await a.acquireFoldLease("ns", "t", 60_000)) ?? 0;
      await a.commitSummary({
        ...fold,
        leaseToken: first,
        fromSeq: 0,
        throughSeq: 2,
        summary: "s1",
      });
      await a.releaseFoldLease("ns", "t", first);
      // A's next fold (seqs 3 and 4) holds the lease when B rewinds to seq 3.
      const second = (await a.acquireFoldLease("ns", "t", 60_000)) ?? 0;
      expect(await b.rewind(rewindCmd({ toSeq: 3 }))).toMatchObject({
        removedCount: 3,
        summaryDropped: false,
        thread: { lastSeq: 3, summary: "s1", summarizedThroughSeq: 2 },
      });
      const late = { ...fold, leaseToken: second, fromSeq: 2, throughSeq: 4, summary: "s2" };
      expect(await a.commitSummary(late)).toBeUndefined();
      expect((await b.getThread("ns", "t"))?.summary).toBe("s1");
      // The lease is free at once, under a token above the one it fenced.
      expect(await b.acquireFoldLease("ns", "t", 60_000)).toBeGreaterThan(second + 1);

      // Back before the summary's end: the summary goes, its seqs are stored (oldest 1).
      const head = await a.headCursor("ns");
      expect(await a.rewind(rewindCmd({ toSeq: 1, now: 3000 }))).toMatchObject({
        removedCount: 2,
        summaryDropped: true,
        thread: {
          lastSeq: 1,
          summary: "",
          summarizedThroughSeq: 0,
          summaryTime: 0,
          updateTime: 3000,
        },
      });
      expect(await b.readEvents("ns", head, 10)).toMatchObject([
        { type: "thread_rewound", toSeq: 1, removedCount: 2, summaryDropped: true },
      ]);
      expect(await usage(url)).toEqual({ threads: 1, messages: 1, bytes: 2 });
    } finally {
      await a.close();
      await b.close();
    }
  });

  it("orders Rewinds among concurrent Adds of the thread from two instances: answers, log and rows agree", async () => {
    const url = await server.createDatabase();
    const [a, b] = [
      await createPostgresStore(url, {}, { poolSize: 4 }),
      await createPostgresStore(url, {}, { poolSize: 4 }),
    ];
    try {
      await a.append(cmd({ messages: [user("seed")] }));
      const head = await a.headCursor("ns");
      const adds = Array.from({ length: 40 }, (_, i) =>
        (i % 2 === 0 ? a : b).append(cmd({ messages: [user(`m${i}`)], now: 2000 + i })),
      );
      const rewinds = Array.from({ length: 6 }, (_, i) =>
        (i % 2 === 0 ? b : a).rewind(rewindCmd({ toSeq: 1, now: 3000 + i })),
      );
      const [added, rewound] = await Promise.all([Promise.all(adds), Promise.all(rewinds)]);
      // The log, replayed: each Add right after the thread's last seq, each Rewind back to 1.
      const events = await a.readEvents("ns", head, 1000);
      let lastSeq = 1;
      for (const e of events) {
        if (e.type === "messages_added") {
          expect(e.firstSeq).toBe(lastSeq + 1);
          lastSeq = e.lastSeq;
        } else if (e.type === "thread_rewound") {
          expect(e.removedCount).toBe(lastSeq - 1);
          lastSeq = 1;
        }
      }
      expect(events.filter((e) => e.type === "messages_added")).toHaveLength(40);
      const logged = events.flatMap((e) => (e.type === "thread_rewound" ? [e.removedCount] : []));
      const answered = rewound.map((r) => r.removedCount).filter((n) => n > 0);
      expect([...logged].sort()).toEqual([...answered].sort());
      // The rows are the log's end state, and each message the one its Add was told.
      const final = await b.read("ns", "t");
      expect(final?.thread.lastSeq).toBe(lastSeq);
      expect(final?.messages.map((m) => m.seq)).toEqual(
        Array.from({ length: lastSeq }, (_, i) => i + 1),
      );
      for (const m of final?.messages.slice(1) ?? []) {
        expect(added[Number(m.content.slice(1))]?.firstSeq).toBe(m.seq);
      }
      expect((await usage(url)).messages).toBe(lastSeq);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it("answers a Rewind only once it has committed, and refuses one still queued at its deadline", async () => {
    const url = await server.createDatabase();
    // One group at a time: the second Rewind waits behind the first.
    const store = await createPostgresStore(url, {}, { poolSize: 2 });
    try {
      await store.append(cmd({ messages: ["a", "b", "c"].map(user) }));
      const lock = await holdNamespace(url, "ns");
      let answered = false;
      const waiting = store.rewind(rewindCmd({ toSeq: 1 })).finally(() => {
        answered = true;
      });
      const late = store.rewind(rewindCmd({ toSeq: 2, deadline: Date.now() + 300 }));
      expect(await codeOf(late)).toBe("deadline_exceeded");
      expect(answered).toBe(false);
      expect(await query(url, "SELECT seq::int FROM messages ORDER BY seq")).toEqual([
        { seq: 1 },
        { seq: 2 },
        { seq: 3 },
      ]);
      await lock.release();
      expect((await waiting).removedCount).toBe(2);
      expect((await store.getThread("ns", "t"))?.lastSeq).toBe(1);
      expect(await usage(url)).toEqual({ threads: 1, messages: 1, bytes: 1 });
    } finally {
      await store.close();
    }
  });
});

/** What version 3 (forks) added, taken away again: the tables as version 2 made them. */
const UNDO_V3 = `ALTER TABLE threads DROP COLUMN head, DROP COLUMN lineage,
  DROP COLUMN parent_thread_id, DROP COLUMN parent_at_seq, DROP COLUMN parent_fork_time,
  DROP COLUMN parent_create_time; DROP TABLE segments; DROP SEQUENCE segment_ids;`;

describe("Postgres store schema version 1", () => {
  it("migrates to version 2, telling each recorded Add by the seqs it stored", async () => {
    const url = await server.createDatabase();
    let store = await createPostgresStore(url);
    const seeded = await store.append(cmd({ strategy: summary, messages: [user("s"), user("t")] }));
    const token = (await store.acquireFoldLease("ns", "t", 60_000)) ?? 0;
    // The summary's NUL and quote are in every result recorded from here on (JSON text).
    await store.commitSummary({
      namespace: "ns",
      threadId: "t",
      incarnation: seeded.thread.incarnation,
      leaseToken: token,
      fromSeq: 0,
      throughSeq: 1,
      summary: 's\u0000"}',
      foldedCount: 1,
      now: 1000,
    });
    const add = (messages: string[], requestId: string, requestHash: string) =>
      store.append(cmd({ messages: messages.map(user), requestId, requestHash }));
    await add(["a", "b"], "r1", "h1");
    await add([], "r0", "h0");
    await add(["c", "d"], "r2", "h2");
    await store.close();
    // The tables as version 1 made them.
    await query(
      url,
      `ALTER TABLE requests DROP COLUMN last_seq; ${UNDO_V3} DELETE FROM windlass_schema;
       INSERT INTO windlass_schema (version) VALUES (1)`,
    );
    store = await createPostgresStore(url);
    try {
      expect(
        await query(
          url,
          `SELECT convert_from(request_id, 'UTF8') AS id, last_seq::int FROM requests ORDER BY 1`,
        ),
      ).toEqual([
        { id: "r0", last_seq: 0 },
        { id: "r1", last_seq: 4 },
        { id: "r2", last_seq: 6 },
      ]);
      expect(await query(url, "SELECT max(version) AS v FROM windlass_schema")).toEqual([{ v: 3 }]);
      await store.rewind(rewindCmd({ toSeq: 4 }));
      expect(await add(["c", "d"], "r2", "h2")).toMatchObject({ firstSeq: 5, replayed: false });
      expect(await add(["a", "b"], "r1", "h1")).toMatchObject({ firstSeq: 3, replayed: true });
      expect(await add([], "r0", "h0")).toMatchObject({
        firstSeq: 0,
        replayed: true,
        thread: { summary: 's\u0000"}' },
      });
    } finally {
      await store.close();
    }
  });
});
