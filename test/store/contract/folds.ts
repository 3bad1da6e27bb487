/**
 * FoldStore: fold leases with their fencing tokens, and commitSummary's
 * compare-and-set on incarnation, summarized_through_seq and the lease,
 * with the trim of folded messages it does.
 */
import { describe, expect, it } from "vitest";
import type { Strategy } from "../../../src/core/types.js";
import { summary, user, window20 } from "../fixtures.js";
import { type ContractBackend, cmd, fold, storeOfEachCase } from "./support.js";

export function foldsContract(backend: ContractBackend): void {
  describe("fold leases and summaries", () => {
    const store = storeOfEachCase(backend);

    it("trims only summarised messages for the summary strategy", async () => {
      const s: Strategy = { ...summary, maxStored: 2 };
      await store.append(cmd({ strategy: s, messages: [user("1"), user("2"), user("3")] }));
      expect((await store.read("ns", "t"))?.messages.map((m) => m.seq)).toEqual([1, 2, 3]);
      const thread = await store.getThread("ns", "t");
      const token = await store.acquireFoldLease("ns", "t", 10_000);
      expect(token).toBeDefined();
      const after = await store.commitSummary({
        namespace: "ns",
        threadId: "t",
        incarnation: thread?.incarnation ?? "",
        leaseToken: token ?? 0,
        fromSeq: 0,
        throughSeq: 2,
        summary: "s",
        foldedCount: 2,
        now: 5,
      });
      expect(after?.summarizedThroughSeq).toBe(2);
      expect((await store.read("ns", "t"))?.messages.map((m) => m.seq)).toEqual([2, 3]);
    });

    it("keeps the summary over Adds that keep the strategy and drops it when the strategy changes", async () => {
      await store.append(cmd({ strategy: summary, messages: [user("1"), user("2"), user("3")] }));
      await fold(store, "t", 2);
      // No strategy named, and the same one named: the summary stays.
      await store.append(cmd({ strategy: undefined, messages: [user("4")] }));
      const kept = await store.append(cmd({ strategy: summary, messages: [user("5")] }));
      expect(kept.thread).toMatchObject({
        summary: "through 2",
        summarizedThroughSeq: 2,
        summaryTime: 1500,
      });
      const moved = await store.append(
        cmd({
          strategy: window20,
          replaceStrategy: true,
          messages: [user("6")],
        }),
      );
      expect(moved.thread).toMatchObject({ summary: "", summarizedThroughSeq: 0, summaryTime: 0 });
      // Further Adds to the window thread leave it without a summary.
      const next = await store.append(cmd({ strategy: undefined, messages: [user("7")] }));
      expect(next.thread).toMatchObject({ summary: "", summarizedThroughSeq: 0, summaryTime: 0 });
      expect((await store.getThread("ns", "t"))?.summary).toBe("");
    });

    it("never commits a summary into another incarnation, a moved thread or without the lease", async () => {
      const a = await store.append(cmd({ strategy: summary, messages: [user("1"), user("2")] }));
      const token = (await store.acquireFoldLease("ns", "t", 10_000)) ?? 0;
      expect(await store.acquireFoldLease("ns", "t", 10_000)).toBeUndefined();
      const base = {
        namespace: "ns",
        threadId: "t",
        incarnation: a.thread.incarnation,
        leaseToken: token,
        fromSeq: 0,
        throughSeq: 1,
        summary: "s1",
        foldedCount: 1,
        now: 3000,
      };
      expect(await store.commitSummary({ ...base, leaseToken: token + 1 })).toBeUndefined();
      expect(await store.commitSummary({ ...base, fromSeq: 1, throughSeq: 2 })).toBeUndefined();
      expect((await store.commitSummary(base))?.summary).toBe("s1");
      // The same fold committed twice: the second finds summarized_through_seq moved.
      expect(await store.commitSummary(base)).toBeUndefined();
      await store.releaseFoldLease("ns", "t", token);
      await store.clear("ns", "t", 4000);
      await store.append(cmd({ strategy: summary, messages: [user("x"), user("y")] }));
      const t2 = (await store.acquireFoldLease("ns", "t", 10_000)) ?? 0;
      expect(t2).toBeGreaterThan(token);
      expect(await store.commitSummary({ ...base, leaseToken: t2 })).toBeUndefined();
      expect((await store.getThread("ns", "t"))?.summary).toBe("");
    });

    it("lets an expired lease be taken again with a larger token", async () => {
      await store.append(cmd());
      const t1 = (await store.acquireFoldLease("ns", "t", 30)) ?? 0;
      await new Promise((r) => setTimeout(r, 60));
      const t2 = await store.acquireFoldLease("ns", "t", 1000);
      expect(t2).toBeGreaterThan(t1);
    });
  });
}
