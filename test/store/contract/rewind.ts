/**
 * ThreadStore.rewind (core/rewind.ts decides; the store applies it
 * atomically): what it drops and keeps, what it refuses, the summary and
 * fold lease it affects, its event, request ids and quota room.
 */
import { describe, expect, it } from "vitest";
import type { MemoryEvent, Strategy } from "../../../src/core/types.js";
import { summary, user, window20 } from "../fixtures.js";
import {
  type ContractBackend,
  cmd,
  fold,
  numbered,
  quotaCase,
  refused,
  rewindCmd,
  seqsOf,
  storeOfEachCase,
  waitFor,
} from "./support.js";

export function rewindContract(backend: ContractBackend): void {
  describe("rewind", () => {
    const store = storeOfEachCase(backend);

    /** The thread and every event of "ns" after `head`, to show that nothing changed. */
    const everything = async (head: string, threadId = "t") => ({
      snapshot: await store.read("ns", threadId),
      events: await store.readEvents("ns", head, 100),
    });

    it("drops the newest message; reads return only kept messages; the next Add reuses the seq", async () => {
      await store.append(cmd({ messages: [user("a"), user("b"), user("c")] }));
      // Read first, so a store that caches decoded messages has them cached.
      expect(seqsOf(await store.read("ns", "t", { limit: undefined }))).toEqual([1, 2, 3]);
      const r = await store.rewind(rewindCmd(2));
      expect(r).toMatchObject({ removedCount: 1, summaryDropped: false, replayed: false });
      expect(r.thread).toMatchObject({ lastSeq: 2, updateTime: 2000, createTime: 1000 });
      expect(seqsOf(await store.read("ns", "t"))).toEqual([1, 2]);
      expect(seqsOf(await store.read("ns", "t", { limit: undefined }))).toEqual([1, 2]);
      expect(await store.getThread("ns", "t")).toEqual(r.thread);

      const again = await store.append(cmd({ messages: [user("d")], now: 3000 }));
      expect([again.firstSeq, again.lastSeq]).toEqual([3, 3]);
      for (const snap of [
        await store.read("ns", "t"),
        await store.read("ns", "t", { limit: undefined }),
      ]) {
        expect(snap?.messages.map((m) => [m.seq, m.content, m.createTime])).toEqual([
          [1, "a", 1000],
          [2, "b", 1000],
          [3, "d", 3000],
        ]);
      }
    });

    it("drops several messages, down to none, and keeps labels and retention", async () => {
      const ttlMs = 3_600_000;
      const t0 = Date.now();
      const first = await store.append(
        cmd({ messages: numbered(5), labels: { user: "u1" }, ttlMs, now: t0 }),
      );
      const r = await store.rewind(rewindCmd(2, { now: t0 + 1 }));
      expect(r.removedCount).toBe(3);
      expect(r.thread).toEqual({ ...first.thread, lastSeq: 2, updateTime: t0 + 1 });
      expect(seqsOf(await store.read("ns", "t"))).toEqual([1, 2]);
      const empty = await store.rewind(rewindCmd(0, { now: t0 + 2 }));
      expect(empty.removedCount).toBe(2);
      expect(empty.thread).toMatchObject({ lastSeq: 0, labels: { user: "u1" }, ttlMs });
      expect(empty.thread.expireTime).toBe(t0 + ttlMs);
      expect((await store.read("ns", "t"))?.messages).toEqual([]);
      expect(await store.listThreads("ns", "", 10, { user: "u1" })).toEqual(["t"]);
      const next = await store.append(cmd({ messages: [user("x")], now: t0 + 3 }));
      expect(next.firstSeq).toBe(1);
    });

    it("changes nothing and logs nothing when to_seq is already last_seq", async () => {
      await store.append(cmd({ messages: numbered(3) }));
      const head = await store.headCursor("ns");
      const before = await everything(head);
      const r = await store.rewind(rewindCmd(3));
      expect(r).toEqual({
        thread: before.snapshot?.thread,
        removedCount: 0,
        summaryDropped: false,
        replayed: false,
      });
      expect(await everything(head)).toEqual(before);
    });

    it("refuses a missing thread, a stale expected_last_seq and a to_seq past last_seq, changing nothing", async () => {
      await store.append(cmd({ messages: numbered(3) }));
      const head = await store.headCursor("ns");
      const before = await everything(head);
      await refused(store.rewind(rewindCmd(1, { threadId: "none" })), "not_found", "thread_id");
      await refused(store.rewind(rewindCmd(1, { namespace: "other" })), "not_found", "thread_id");
      await refused(
        store.rewind(rewindCmd(1, { expectedLastSeq: 2, requestId: "r", requestHash: "h" })),
        "aborted",
        "expected_last_seq",
      );
      await refused(store.rewind(rewindCmd(4)), "out_of_range", "to_seq");
      expect(await everything(head)).toEqual(before);
      // A refused request recorded nothing: its id is free for the Rewind that passes.
      const r = await store.rewind(rewindCmd(1, { expectedLastSeq: 3, requestId: "r" }));
      expect(r).toMatchObject({ removedCount: 2, replayed: false });
    });

    it("refuses to go back past trimmed messages, or past a summary holding them, changing nothing", async () => {
      const small: Strategy = { ...window20, maxStored: 3 };
      await store.append(cmd({ strategy: small, messages: numbered(5) }));
      const folding = { ...summary, maxStored: 3 };
      await store.append(cmd({ threadId: "s", strategy: folding, messages: numbered(6) }));
      // Folding through 5 trims 1..3: the summary alone holds them now.
      await fold(store, "s", 5);
      expect(seqsOf(await store.read("ns", "s"))).toEqual([4, 5, 6]);
      const head = await store.headCursor("ns");
      const before = [await everything(head, "t"), await everything(head, "s")];
      await refused(store.rewind(rewindCmd(1)), "failed_precondition", "to_seq");
      await refused(store.rewind(rewindCmd(4, { threadId: "s" })), "failed_precondition", "to_seq");
      expect([await everything(head, "t"), await everything(head, "s")]).toEqual(before);

      // The earliest points: just before the oldest stored message, and the summary's end.
      expect((await store.rewind(rewindCmd(2))).removedCount).toBe(3);
      expect((await store.read("ns", "t"))?.messages).toEqual([]);
      const s = await store.rewind(rewindCmd(5, { threadId: "s" }));
      expect(s).toMatchObject({ removedCount: 1, summaryDropped: false });
      expect(s.thread).toMatchObject({ summary: "through 5", summarizedThroughSeq: 5 });
    });

    it("keeps a summary of kept messages only, and drops one that covered a dropped message", async () => {
      await store.append(cmd({ strategy: summary, messages: numbered(6) }));
      const folded = await fold(store, "t", 3);
      const kept = await store.rewind(rewindCmd(4));
      expect(kept).toMatchObject({ removedCount: 2, summaryDropped: false });
      expect(kept.thread).toMatchObject({
        summary: "through 3",
        summarizedThroughSeq: 3,
        summaryTime: folded.summaryTime,
      });
      const dropped = await store.rewind(rewindCmd(2, { now: 2500 }));
      expect(dropped).toMatchObject({ removedCount: 2, summaryDropped: true });
      expect(dropped.thread).toMatchObject({
        summary: "",
        summarizedThroughSeq: 0,
        summaryTime: 0,
      });
      const snap = await store.read("ns", "t");
      expect(snap?.thread).toEqual(dropped.thread);
      expect(seqsOf(snap)).toEqual([1, 2]);
    });

    it("fences a fold that took its lease before the Rewind; a lease taken after it commits", async () => {
      const a = await store.append(cmd({ strategy: summary, messages: numbered(6) }));
      const stale = await store.acquireFoldLease("ns", "t", 60_000);
      if (stale === undefined) throw new Error("no lease");
      await store.rewind(rewindCmd(4));
      const commit = (leaseToken: number) =>
        store.commitSummary({
          namespace: "ns",
          threadId: "t",
          incarnation: a.thread.incarnation,
          leaseToken,
          fromSeq: 0,
          throughSeq: 4,
          summary: "folded",
          foldedCount: 4,
          now: 3000,
        });
      expect(await commit(stale)).toBeUndefined();
      expect((await store.getThread("ns", "t"))?.summary).toBe("");
      // The Rewind ended the lease: a new one is free at once, with a later token.
      const fresh = await store.acquireFoldLease("ns", "t", 60_000);
      if (fresh === undefined) throw new Error("the Rewind left the lease held");
      expect(fresh).toBeGreaterThan(stale);
      expect(await commit(stale)).toBeUndefined();
      expect((await commit(fresh))?.summarizedThroughSeq).toBe(4);
    });

    it("logs thread_rewound, for readEvents and subscribers alike", async () => {
      await store.append(cmd({ strategy: summary, messages: numbered(3) }));
      await fold(store, "t", 3);
      const heard: MemoryEvent[] = [];
      const stop = store.subscribe("ns", (events) => heard.push(...events));
      try {
        const head = await store.headCursor("ns");
        await store.rewind(rewindCmd(1));
        const logged = await store.readEvents("ns", head, 10);
        expect(logged).toEqual([
          expect.objectContaining({
            type: "thread_rewound",
            threadId: "t",
            time: 2000,
            toSeq: 1,
            removedCount: 2,
            summaryDropped: true,
          }),
        ]);
        await waitFor(() => heard.some((e) => e.type === "thread_rewound"), 5000);
        const rewound = heard.filter((e) => e.type === "thread_rewound");
        expect(rewound.map(({ cursor: _, ...e }) => e)).toEqual(
          logged.map(({ cursor: _, ...e }) => e),
        );
      } finally {
        stop();
      }
    });

    it("replays a repeated request_id with the first result, changing nothing; refuses it for another payload", async () => {
      await store.append(cmd({ messages: numbered(4) }));
      const once = { requestId: "r1", requestHash: "rewind-2" };
      const first = await store.rewind(rewindCmd(2, once));
      expect(first).toMatchObject({ removedCount: 2, replayed: false });
      await store.append(cmd({ messages: [user("x")], now: 3000 }));
      const head = await store.headCursor("ns");
      const before = await everything(head);
      const again = await store.rewind(rewindCmd(2, { ...once, now: 4000 }));
      expect(again).toEqual({ ...first, replayed: true });
      expect(await everything(head)).toEqual(before);
      await refused(
        store.rewind(rewindCmd(1, { requestId: "r1", requestHash: "rewind-1" })),
        "invalid_argument",
        "request_id",
      );
      // One id names one request: an Add may not reuse a Rewind's.
      await refused(
        store.append(cmd({ requestId: "r1", requestHash: "add-x" })),
        "invalid_argument",
        "request_id",
      );
      expect(await everything(head)).toEqual(before);

      // An unchanged Rewind records its id too.
      const unchanged = await store.rewind(rewindCmd(3, { requestId: "r2", requestHash: "h" }));
      expect(unchanged.removedCount).toBe(0);
      await store.append(cmd({ messages: [user("y")], now: 5000 }));
      expect(await store.rewind(rewindCmd(3, { requestId: "r2", requestHash: "h" }))).toEqual({
        ...unchanged,
        replayed: true,
      });
      expect((await store.getThread("ns", "t"))?.lastSeq).toBe(4);
    });

    it("forgets the request id of an Add whose messages it dropped, and only that one", async () => {
      const older = { requestId: "a", requestHash: "add-a", messages: [user("x"), user("y")] };
      const newer = { requestId: "b", requestHash: "add-b", messages: [user("z")] };
      const a = await store.append(cmd(older));
      const b = await store.append(cmd(newer));
      expect([a.lastSeq, b.lastSeq]).toEqual([2, 3]);
      await store.rewind(rewindCmd(2));
      // b's seq now names nothing: a retry of b appends it again.
      const retriedB = await store.append(cmd({ ...newer, now: 3000 }));
      expect(retriedB).toMatchObject({ firstSeq: 3, lastSeq: 3, replayed: false });
      const retriedA = await store.append(cmd({ ...older, now: 3000 }));
      expect(retriedA).toMatchObject({ firstSeq: 1, lastSeq: 2, replayed: true });
      const snap = await store.read("ns", "t");
      expect(snap?.messages.map((m) => [m.seq, m.content, m.createTime])).toEqual([
        [1, "x", 1000],
        [2, "y", 1000],
        [3, "z", 3000],
      ]);
      // The retried b is recorded again: once more is a replay.
      expect((await store.append(cmd({ ...newer, now: 4000 }))).replayed).toBe(true);
    });

    quotaCase(backend)(
      "gives the dropped messages' room back to the namespace quotas",
      async () => {
        const q = await backend.open({ maxMessagesPerNamespace: 3, maxBytesPerNamespace: 10 });
        try {
          await q.append(cmd({ messages: [user("aaaa"), user("bbbb"), user("c")] }));
          const more = cmd({ messages: [user("dd")], now: 3000 });
          await refused(q.append(more), "resource_exhausted", undefined);
          await q.rewind(rewindCmd(1));
          expect((await q.append(more)).firstSeq).toBe(2);
          // 6 bytes in 2 messages: one more of 4 bytes fits, then the message quota is full.
          expect((await q.append(cmd({ messages: [user("eeee")] }))).lastSeq).toBe(3);
          await refused(q.append(cmd({ messages: [user("")] })), "resource_exhausted", undefined);
          // Back to 6 bytes: 5 more would pass the byte quota, 4 fit.
          await q.rewind(rewindCmd(2));
          await refused(
            q.append(cmd({ messages: [user("fffff")] })),
            "resource_exhausted",
            undefined,
          );
          expect((await q.append(cmd({ messages: [user("ffff")] }))).lastSeq).toBe(3);
        } finally {
          await q.close();
        }
      },
    );

    it("treats an expired thread as not found", async () => {
      const t0 = Date.now();
      await store.append(cmd({ messages: numbered(3), ttlMs: 1000, now: t0 - 5000 }));
      await refused(store.rewind(rewindCmd(1, { now: t0 })), "not_found", "thread_id");
    });

    it("rewinds one namespace's thread only", async () => {
      for (const namespace of ["a", "b"]) {
        await store.append(cmd({ namespace, messages: numbered(3) }));
      }
      const headB = await store.headCursor("b");
      expect((await store.rewind(rewindCmd(1, { namespace: "a" }))).removedCount).toBe(2);
      expect(seqsOf(await store.read("a", "t"))).toEqual([1]);
      expect(seqsOf(await store.read("b", "t"))).toEqual([1, 2, 3]);
      expect(await store.readEvents("b", headB, 10)).toEqual([]);
      await refused(store.rewind(rewindCmd(1, { namespace: "c" })), "not_found", "thread_id");
    });
  });
}
