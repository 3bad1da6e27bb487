/**
 * StoreAdmin's importThread and clearAll, with ThreadStore's Clear (a new
 * incarnation after it) and listThreads (byte order, pages).
 */
import { describe, expect, it } from "vitest";
import type { MemoryEvent } from "../../../src/core/types.js";
import { CLEAR_BATCH } from "../../../src/store/store.js";
import { user } from "../fixtures.js";
import { type ContractBackend, cmd, importCommand, storeOfEachCase } from "./support.js";

export function adminContract(backend: ContractBackend): void {
  describe("administration", () => {
    const store = storeOfEachCase(backend);

    it("starts a cleared thread again from seq 1 with a new incarnation", async () => {
      const a = await store.append(cmd({ messages: [user("a"), user("b")] }));
      expect(await store.clear("ns", "t", 2000)).toBe(true);
      expect(await store.clear("ns", "t", 2000)).toBe(false);
      expect(await store.read("ns", "t")).toBeUndefined();
      const b = await store.append(cmd());
      expect(b.firstSeq).toBe(1);
      expect(b.thread.incarnation).not.toBe(a.thread.incarnation);
    });

    it("clears every thread of a namespace only", async () => {
      await store.append(cmd({ threadId: "a" }));
      await store.append(cmd({ threadId: "b" }));
      await store.append(cmd({ namespace: "other", threadId: "c" }));
      expect(await store.clearAll("ns", 5)).toBe(2);
      expect(await store.listThreads("ns", "", 10)).toEqual([]);
      expect(await store.listThreads("other", "", 10)).toEqual(["c"]);
    });

    it("clears a namespace larger than one batch, letting other calls in between batches", async () => {
      const ids = Array.from(
        { length: 2 * CLEAR_BATCH + 3 },
        (_, i) => `t${String(i).padStart(5, "0")}`,
      );
      await Promise.all(ids.map((threadId) => store.append(cmd({ threadId }))));
      const head = await store.headCursor("ns");
      const order: string[] = [];
      const clearing = store.clearAll("ns", 5).then((n) => {
        order.push("cleared");
        return n;
      });
      await store.append(cmd({ namespace: "other" }));
      order.push("other namespace written");
      expect(await clearing).toBe(ids.length);
      expect(order).toEqual(["other namespace written", "cleared"]);
      expect(await store.listThreads("ns", "", 10)).toEqual([]);
      const events: MemoryEvent[] = [];
      for (let cursor = head; ; ) {
        const page = await store.readEvents("ns", cursor, 400);
        events.push(...page);
        const last = page[page.length - 1];
        if (last === undefined) break;
        cursor = last.cursor;
      }
      // In id order; across a sharded namespace's shards, by time only (support.ts).
      const logged = events.map((e) => [e.type, e.threadId]);
      if (backend.namespaceShards !== undefined)
        logged.sort((a, b) => (a[1] ?? "").localeCompare(b[1] ?? ""));
      expect(logged).toEqual(ids.map((id) => ["thread_cleared", id]));
    });

    it("lists thread ids in byte order, after a key, in pages", async () => {
      for (const id of ["b", "a", "é", "Z", "a2"]) await store.append(cmd({ threadId: id }));
      expect(await store.listThreads("ns", "", 10)).toEqual(["Z", "a", "a2", "b", "é"]);
      expect(await store.listThreads("ns", "", 2)).toEqual(["Z", "a"]);
      expect(await store.listThreads("ns", "a", 2)).toEqual(["a2", "b"]);
    });

    it("imports a whole thread as given, once; later Adds, trims and folds go on from it", async () => {
      const given = importCommand();
      const head = await store.headCursor("ns");
      expect(await store.importThread(given)).toBe(true);
      const snap = await store.read("ns", "imp");
      const { incarnation, ...thread } = snap?.thread ?? { incarnation: "" };
      expect(incarnation).not.toBe("");
      expect(thread).toEqual({
        threadId: "imp",
        strategy: given.strategy,
        lastSeq: 7,
        summarizedThroughSeq: 5,
        summary: "earlier talk",
        summaryTime: 400,
        createTime: 100,
        updateTime: 500,
      });
      expect(snap?.messages).toEqual(given.messages);
      expect(await store.listThreads("ns", "", 10)).toEqual(["imp"]);
      const events = await store.readEvents("ns", head, 10);
      expect(events.map((e) => [e.type, e.threadId, e.time])).toEqual([
        ["messages_added", "imp", 9000],
      ]);
      expect(events[0]).toMatchObject({ firstSeq: 5, lastSeq: 7 });

      // Importing again, even with other content, changes nothing.
      expect(await store.importThread({ ...given, summary: "other", messages: [] })).toBe(false);
      expect(await store.read("ns", "imp")).toEqual(snap);
      expect(await store.readEvents("ns", head, 10)).toHaveLength(1);

      // Seqs go on from last_seq; max_stored (3) trims the imported front.
      const r = await store.append(
        cmd({ threadId: "imp", messages: [user("next"), user("last")], now: 10_000 }),
      );
      expect([r.firstSeq, r.lastSeq]).toEqual([8, 9]);
      const after = await store.read("ns", "imp");
      expect(after?.messages.map((m) => m.seq)).toEqual([6, 7, 8, 9]);
      expect(after?.thread.summarizedThroughSeq).toBe(5);
      const token = (await store.acquireFoldLease("ns", "imp", 10_000)) ?? 0;
      const folded = await store.commitSummary({
        namespace: "ns",
        threadId: "imp",
        incarnation,
        leaseToken: token,
        fromSeq: 5,
        throughSeq: 8,
        summary: "all but the last",
        foldedCount: 3,
        now: 11_000,
      });
      expect(folded?.summarizedThroughSeq).toBe(8);
      // Seq 6 goes past max_stored, then 7, a tool result left without its call.
      expect((await store.read("ns", "imp"))?.messages.map((m) => m.seq)).toEqual([8, 9]);
    });
  });
}
