/**
 * Thread labels: set, kept and replaced by ThreadStore.append, imported by
 * StoreAdmin.importThread, and ThreadStore.listThreads filtered by them.
 */
import { describe, expect, it } from "vitest";
import { type ContractBackend, cmd, importCommand, storeOfEachCase } from "./support.js";

export function labelsContract(backend: ContractBackend): void {
  describe("labels", () => {
    const store = storeOfEachCase(backend);

    it("sets labels with an Add, keeps them without, replaces them with others, and lists by them", async () => {
      const alice = { user_id: "alice", agent: "support" };
      const r = await store.append(cmd({ threadId: "a1", labels: alice }));
      expect(r.thread.labels).toEqual(alice);
      await store.append(cmd({ threadId: "a2", labels: { user_id: "alice", agent: "sales" } }));
      await store.append(cmd({ threadId: "a3", labels: alice, messages: [] }));
      await store.append(cmd({ threadId: "b1", labels: { user_id: "bob", agent: "support" } }));
      await store.append(cmd({ threadId: "none" }));
      await store.append(cmd({ namespace: "other", threadId: "a1", labels: alice }));
      expect((await store.getThread("ns", "a1"))?.labels).toEqual(alice);
      expect((await store.read("ns", "a3"))?.thread.labels).toEqual(alice);
      expect((await store.getThread("ns", "none"))?.labels).toBeUndefined();

      const list = (labels: Record<string, string>, after = "", limit = 10) =>
        store.listThreads("ns", after, limit, labels);
      expect(await list({ user_id: "alice" })).toEqual(["a1", "a2", "a3"]);
      expect(await list({ agent: "support" })).toEqual(["a1", "a3", "b1"]);
      expect(await list({ user_id: "alice", agent: "support" })).toEqual(["a1", "a3"]);
      expect(await list({ user_id: "alice", agent: "support" }, "a1")).toEqual(["a3"]);
      expect(await list({ user_id: "alice" }, "", 2)).toEqual(["a1", "a2"]);
      expect(await list({ user_id: "carol" })).toEqual([]);
      expect(await list({ user_id: "alice", agent: "nobody" })).toEqual([]);
      expect(await list({})).toEqual(["a1", "a2", "a3", "b1", "none"]);

      // An Add without labels keeps them; one with labels replaces them all.
      await store.append(cmd({ threadId: "a1", now: 2000 }));
      expect((await store.getThread("ns", "a1"))?.labels).toEqual(alice);
      const moved = await store.append(cmd({ threadId: "a1", labels: { user_id: "bob" } }));
      expect(moved.thread.labels).toEqual({ user_id: "bob" });
      expect(await list({ user_id: "alice" })).toEqual(["a2", "a3"]);
      expect(await list({ agent: "support" })).toEqual(["a3", "b1"]);
      expect(await list({ user_id: "bob" })).toEqual(["a1", "b1"]);

      // A retried Add answers with the labels it set.
      const first = await store.append(
        cmd({ threadId: "r", requestId: "q", requestHash: "h", labels: { k: "v" } }),
      );
      const again = await store.append(
        cmd({ threadId: "r", requestId: "q", requestHash: "h", labels: { k: "v" } }),
      );
      expect(again).toEqual({ ...first, replayed: true });
      expect(again.thread.labels).toEqual({ k: "v" });

      // Clear takes a thread out of every label; a new incarnation starts without.
      await store.clear("ns", "a3", 3000);
      await store.append(cmd({ threadId: "a3" }));
      expect(await list({ user_id: "alice" })).toEqual(["a2"]);
      expect((await store.getThread("ns", "a3"))?.labels).toBeUndefined();
      await store.clearAll("ns", 4000);
      expect(await list({ user_id: "bob" })).toEqual([]);
      expect(await store.listThreads("other", "", 10, { user_id: "alice" })).toEqual(["a1"]);
      await store.append(cmd({ threadId: "b1" }));
      expect(await list({ user_id: "bob" })).toEqual([]);
    });

    it("lists by a label across many threads, in pages, without missing or repeating any", async () => {
      for (let i = 0; i < 300; i++) {
        const id = `t${String(i).padStart(3, "0")}`;
        await store.append(
          cmd({
            threadId: id,
            labels: { parity: String(i % 2), tens: String(Math.floor(i / 10)) },
          }),
        );
      }
      const seen: string[] = [];
      let after = "";
      for (;;) {
        const page = await store.listThreads("ns", after, 7, { parity: "1" });
        seen.push(...page);
        if (page.length < 7) break;
        after = page[page.length - 1] ?? "";
      }
      expect(seen).toEqual(
        Array.from({ length: 150 }, (_, k) => `t${String(2 * k + 1).padStart(3, "0")}`),
      );
      expect(await store.listThreads("ns", "", 100, { parity: "0", tens: "29" })).toEqual([
        "t290",
        "t292",
        "t294",
        "t296",
        "t298",
      ]);
    });

    it("imports a thread's labels with it", async () => {
      const labels = { user_id: "u1", agent: "a" };
      expect(await store.importThread(importCommand({ labels }))).toBe(true);
      expect((await store.getThread("ns", "imp"))?.labels).toEqual(labels);
      expect(await store.listThreads("ns", "", 10, { agent: "a" })).toEqual(["imp"]);
      await store.clear("ns", "imp", 1);
      expect(await store.listThreads("ns", "", 10, { agent: "a" })).toEqual([]);
    });
  });
}
