/**
 * Thread TTLs: set and moved on by ThreadStore.append, imported by
 * StoreAdmin.importThread, hidden from reads and listings once due, and
 * removed by StoreAdmin.sweepExpired with an expired thread_cleared.
 */
import { describe, expect, it } from "vitest";
import { type ContractBackend, cmd, importCommand, storeOfEachCase } from "./support.js";

export function expiryContract(backend: ContractBackend): void {
  describe("expiry", () => {
    const store = storeOfEachCase(backend);

    it("imports a thread's ttl and expire time with it", async () => {
      const t0 = Date.now();
      const given = importCommand({ ttlMs: 60_000, expireTime: t0 + 30_000 });
      expect(await store.importThread(given)).toBe(true);
      expect(await store.getThread("ns", "imp")).toMatchObject({
        ttlMs: 60_000,
        expireTime: t0 + 30_000,
      });
      expect(await store.sweepExpired(t0 + 29_999, 10)).toBe(0);
      expect(await store.sweepExpired(t0 + 30_000, 10)).toBe(1);
      expect(await store.listThreads("ns", "", 10)).toEqual([]);
    });

    it("expires an idle thread: gone at its expire time, swept with an expired thread_cleared", async () => {
      const t0 = Date.now();
      const keep = await store.append(cmd({ threadId: "keep", ttlMs: 3_600_000, now: t0 }));
      expect(keep.thread).toMatchObject({ ttlMs: 3_600_000, expireTime: t0 + 3_600_000 });
      expect((await store.getThread("ns", "keep"))?.expireTime).toBe(t0 + 3_600_000);
      await store.append(cmd({ threadId: "old", ttlMs: 1000, now: t0 - 5000 }));
      const plain = await store.append(cmd({ threadId: "plain", now: t0 }));
      expect(plain.thread.ttlMs).toBeUndefined();
      expect(plain.thread.expireTime).toBeUndefined();
      // Expired but not swept: gone for reads and listings already.
      expect(await store.read("ns", "old")).toBeUndefined();
      expect(await store.getThread("ns", "old")).toBeUndefined();
      expect(await store.listThreads("ns", "", 10)).toEqual(["keep", "plain"]);

      const head = await store.headCursor("ns");
      expect(await store.sweepExpired(t0, 100)).toBe(1);
      expect(await store.sweepExpired(t0, 100)).toBe(0);
      const events = await store.readEvents("ns", head, 10);
      expect(events.map((e) => [e.type, e.threadId])).toEqual([["thread_cleared", "old"]]);
      expect(events[0]).toMatchObject({ reason: "expired" });
      expect(await store.listThreads("ns", "", 10)).toEqual(["keep", "plain"]);
    });

    it("fills a listing page past expired threads that are not swept yet, labelled or not", async () => {
      const t0 = Date.now();
      const labels = { agent: "x" };
      // a0 … a9: every other one expired; the page of 3 must skip them.
      for (let i = 0; i < 10; i++) {
        const ttl = i % 2 === 0 ? { ttlMs: 1000, now: t0 - 5000 } : { now: t0 };
        await store.append(cmd({ threadId: `a${i}`, labels, ...ttl }));
      }
      expect(await store.listThreads("ns", "", 3)).toEqual(["a1", "a3", "a5"]);
      expect(await store.listThreads("ns", "a5", 3)).toEqual(["a7", "a9"]);
      expect(await store.listThreads("ns", "", 3, labels)).toEqual(["a1", "a3", "a5"]);
      expect(await store.listThreads("ns", "a5", 10, labels)).toEqual(["a7", "a9"]);
    });

    it("moves the expiry on with every Add; an Add to an expired thread starts a new one", async () => {
      const t0 = Date.now();
      await store.append(cmd({ threadId: "s", ttlMs: 10_000, now: t0 }));
      const moved = await store.append(cmd({ threadId: "s", now: t0 + 5000 }));
      expect(moved.thread).toMatchObject({ ttlMs: 10_000, expireTime: t0 + 15_000 });
      expect(await store.sweepExpired(t0 + 12_000, 100)).toBe(0);
      expect(await store.getThread("ns", "s")).toBeDefined();
      expect(await store.sweepExpired(t0 + 15_000, 100)).toBe(1);

      await store.append(cmd({ threadId: "r", ttlMs: 1000, now: t0 - 5000 }));
      const head = await store.headCursor("ns");
      const again = await store.append(cmd({ threadId: "r", now: t0 }));
      expect(again.firstSeq).toBe(1);
      expect(again.thread.ttlMs).toBeUndefined();
      const events = await store.readEvents("ns", head, 10);
      expect(events.map((e) => e.type)).toEqual(["thread_cleared", "messages_added"]);
      expect(events[0]).toMatchObject({ reason: "expired", threadId: "r" });

      // The server's default applies to a new thread; ttl 0 takes it off.
      const d = await store.append(cmd({ threadId: "d", defaultTtlMs: 500, now: t0 }));
      expect(d.thread.ttlMs).toBe(500);
      const off = await store.append(cmd({ threadId: "d", defaultTtlMs: 500, ttlMs: 0, now: t0 }));
      expect(off.thread.ttlMs).toBeUndefined();
      expect(await store.sweepExpired(t0 + 1000, 100)).toBe(0);

      // A cleared thread is no longer due; the sweep honours its limit.
      await store.append(cmd({ threadId: "c", ttlMs: 1000, now: t0 }));
      await store.clear("ns", "c", t0);
      for (const id of ["x1", "x2", "x3"]) {
        await store.append(cmd({ threadId: id, ttlMs: 1000, now: t0 }));
      }
      expect(await store.sweepExpired(t0 + 2000, 2)).toBe(2);
      expect(await store.sweepExpired(t0 + 2000, 2)).toBe(1);
      expect(await store.listThreads("ns", "", 10)).toEqual(["d", "r"]);
    });
  });
}
