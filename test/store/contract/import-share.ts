/**
 * StoreAdmin.importThread with shareFrom: an imported fork that shares its
 * parent's stored messages through a seq (an export's thread.v2 line) is
 * written as a Fork there would be, whether that copies the parent's head or
 * freezes it; what it holds, every refusal, its independence from the parent
 * afterwards, the quotas and the event.
 */
import { describe, expect, it } from "vitest";
import type { ImportThreadCommand, Store } from "../../../src/store/store.js";
import { user, window20 } from "../fixtures.js";
import { expected, expectMessageRoom, parentOf, triples } from "./forks.js";
import {
  type ContractBackend,
  cmd,
  numbered,
  quotaCase,
  rejects,
  rewindCmd,
  storedRange,
  storeOfEachCase,
} from "./support.js";

const PATHS = [
  { path: "copy", n: 10 },
  { path: "freeze", n: 200 },
] as const;

/** Thread "f", a fork of "t" (n messages) sharing seqs through `through`, with `own` messages of its own after it. */
function sharedImport(
  n: number,
  through: number,
  own: number,
  over: Partial<ImportThreadCommand> = {},
): ImportThreadCommand {
  return {
    namespace: "ns",
    threadId: "f",
    strategy: window20,
    lastSeq: through + own,
    summarizedThroughSeq: 0,
    summary: "",
    summaryTime: 0,
    createTime: 2500,
    updateTime: 2600,
    messages: own === 0 ? [] : storedRange(through + 1, through + own, 2000),
    parent: { threadId: "t", atSeq: through, forkTime: 2500, parentCreateTime: 1000 },
    shareFrom: { threadId: "t", throughSeq: through, parentLastSeq: n },
    now: 3000,
    ...over,
  };
}

/** The triples of storedRange(from, to, time). */
const ownTriples = (from: number, to: number, time: number) =>
  storedRange(from, to, time).map((m) => [m.seq, m.content, m.createTime]);

export function importShareContract(backend: ContractBackend): void {
  describe("import of a fork sharing its parent's prefix", () => {
    const store = storeOfEachCase(backend);
    importShapeCases(store);
    importRefusalCases(store);
    importIndependenceCases(store);
    importQuotaCases(backend);
  });
}

function importShapeCases(store: Store): void {
  for (const { path, n } of PATHS) {
    it(`holds the parent's messages through the seq, then its own (${path})`, async () => {
      await parentOf(store, n);
      const given = sharedImport(n, n - 2, 3);
      const head = await store.headCursor("ns");
      expect(await store.importThread(given)).toBe(true);
      const snap = await store.read("ns", "f");
      expect(triples(snap)).toEqual([...expected(1, n - 2, n), ...ownTriples(n - 1, n + 1, 2000)]);
      expect(snap?.messages.at(-2)).toEqual(given.messages[1]);
      const thread = await store.getThread("ns", "f");
      expect(thread).toMatchObject({
        lastSeq: n + 1,
        createTime: 2500,
        updateTime: 2600,
        strategy: window20,
        parent: given.parent,
      });
      expect(triples(await store.read("ns", "t"))).toEqual(expected(1, n, n));
      expect(await store.listThreads("ns", "", 10, undefined, "t")).toEqual(["f"]);
      const events = (await store.readEvents("ns", head, 10)).map(({ cursor: _, ...e }) => e);
      expect(events).toEqual([
        { type: "messages_added", threadId: "f", time: 3000, firstSeq: 1, lastSeq: n + 1 },
      ]);
    });

    it(`holds only the shared messages when it has none of its own (${path})`, async () => {
      await parentOf(store, n);
      expect(await store.importThread(sharedImport(n, n, 0))).toBe(true);
      expect(triples(await store.read("ns", "f"))).toEqual(expected(1, n, n));
      expect((await store.getThread("ns", "f"))?.lastSeq).toBe(n);
    });
  }

  it("shares from a parent whose own oldest messages were trimmed", async () => {
    await store.append(cmd({ strategy: { ...window20, maxStored: 150 }, messages: numbered(200) }));
    expect(await store.importThread(sharedImport(200, 180, 1))).toBe(true);
    const seqs = (await store.read("ns", "f"))?.messages.map((m) => m.seq);
    expect(seqs?.[0]).toBe(51);
    expect(seqs?.length).toBe(131);
  });
}

function importRefusalCases(store: Store): void {
  const refusedWith = async (given: ImportThreadCommand, words: string) => {
    const head = await store.headCursor("ns");
    const err = await rejects(store.importThread(given), "failed_precondition");
    expect(err.message).toContain(words);
    expect(err.field).toBe("parent");
    expect(await store.getThread("ns", "f")).toBeUndefined();
    expect(await store.readEvents("ns", head, 10)).toEqual([]);
  };

  it("refuses, writing nothing, when the parent is not there", async () => {
    await refusedWith(sharedImport(10, 8, 1), "not in the store");
  });

  it("refuses, writing nothing, when the parent's last_seq is not the one compared", async () => {
    await parentOf(store, 10);
    await refusedWith(sharedImport(9, 8, 1), "its last_seq is 10, not 9");
  });

  it("refuses, writing nothing, when the parent does not store the shared seq", async () => {
    await store.append(cmd({ strategy: { ...window20, maxStored: 5 }, messages: numbered(10) }));
    await refusedWith(sharedImport(10, 4, 1), "stores seqs 6 to 10");
    await refusedWith(sharedImport(10, 11, 1), "stores seqs 6 to 10");
  });

  it("refuses, writing nothing, when the parent has expired", async () => {
    const t0 = Date.now();
    await store.append(cmd({ messages: numbered(10), ttlMs: 1000, now: t0 - 5000 }));
    await refusedWith(sharedImport(10, 8, 1, { now: t0 }), "not in the store");
  });

  it("changes nothing and returns false when the thread exists", async () => {
    await parentOf(store, 10);
    await store.append(cmd({ threadId: "f", messages: [user("mine")] }));
    expect(await store.importThread(sharedImport(10, 8, 1))).toBe(false);
    expect((await store.read("ns", "f"))?.messages.map((m) => m.content)).toEqual(["mine"]);
  });
}

function importIndependenceCases(store: Store): void {
  for (const { path, n } of PATHS) {
    it(`keeps its messages through the parent's Rewind, re-add and Clear (${path})`, async () => {
      await parentOf(store, n);
      expect(await store.importThread(sharedImport(n, n - 2, 2))).toBe(true);
      const mine = [...expected(1, n - 2, n), ...ownTriples(n - 1, n, 2000)];
      await store.rewind(rewindCmd(3, { now: 4000 }));
      await store.append(cmd({ messages: [user("new")], now: 4100 }));
      expect(triples(await store.read("ns", "f"))).toEqual(mine);
      await store.append(cmd({ threadId: "f", messages: [user("later")], now: 4200 }));
      expect((await store.read("ns", "t"))?.messages.map((m) => m.content)).toEqual([
        "1",
        "2",
        "3",
        "new",
      ]);
      await store.clear("ns", "t", 4300);
      expect(triples(await store.read("ns", "f"))).toEqual([...mine, [n + 1, "later", 4200]]);
      await store.clear("ns", "f", 4400);
      expect(await store.listThreads("ns", "", 10)).toEqual([]);
    });
  }
}

function importQuotaCases(backend: ContractBackend): void {
  quotaCase(backend)(
    "charges one thread, the copied messages and its own, never the shared ones",
    async () => {
      const q = await backend.open({ maxThreadsPerNamespace: 3, maxMessagesPerNamespace: 250 });
      try {
        await q.append(cmd({ messages: numbered(200) }));
        expect(await q.importThread(sharedImport(200, 200, 2))).toBe(true);
        // 200 + 2 stored: 48 more messages fit (the probe takes the third thread).
        await expectMessageRoom(q, 48);
        await rejects(
          q.importThread(sharedImport(200, 200, 49, { threadId: "g" })),
          "resource_exhausted",
        );
        expect(await q.getThread("ns", "g")).toBeUndefined();
        await expectMessageRoom(q, 48);
      } finally {
        await q.close();
      }
    },
  );
}
