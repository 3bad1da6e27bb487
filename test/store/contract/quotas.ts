/**
 * The namespace quotas (StoreLimits) as ThreadStore.append and
 * StoreAdmin.importThread apply them: threads, messages and UTF-8 bytes per
 * namespace, counted after trims, given back by Clear, trims and summaries,
 * and never passed by parallel Adds.
 */
import { describe, expect, it } from "vitest";
import type { MemoryError } from "../../../src/core/errors.js";
import type { ChatMessage, Strategy } from "../../../src/core/types.js";
import { summary, user, window20 } from "../fixtures.js";
import { type ContractBackend, cmd, importCommand, rejects, storedRange } from "./support.js";

export function quotasContract(backend: ContractBackend): void {
  // Per shard where the backend splits namespaces (support.ts quotaCase).
  if (backend.namespaceShards !== undefined) return;
  describe("namespace quotas", () => {
    it("refuses an Add past each namespace quota, naming it, storing nothing; Clear gives the room back", async () => {
      const q = await backend.open({
        maxThreadsPerNamespace: 2,
        maxMessagesPerNamespace: 5,
        maxBytesPerNamespace: 30,
      });
      try {
        await q.append(cmd({ threadId: "a", messages: [user("12345")] }));
        await q.append(cmd({ threadId: "b", messages: [] }));
        const head = await q.headCursor("ns");
        let err = await rejects(q.append(cmd({ threadId: "c" })), "resource_exhausted");
        expect(err.message).toContain("namespace quota max_threads_per_namespace (2) reached");
        expect(await q.listThreads("ns", "", 10)).toEqual(["a", "b"]);
        // Quotas are per namespace.
        await q.append(cmd({ namespace: "other", threadId: "c" }));

        await q.append(cmd({ threadId: "b", messages: ["1", "2", "3", "4"].map(user) }));
        err = await rejects(
          q.append(cmd({ threadId: "a", messages: [user("x")] })),
          "resource_exhausted",
        );
        expect(err.message).toContain("max_messages_per_namespace (5)");
        expect((await q.read("ns", "a"))?.messages).toHaveLength(1);

        expect(await q.clear("ns", "b", 2000)).toBe(true);
        // 5 bytes stored in a; 26 more would make 31.
        const big = user("x".repeat(26));
        err = await rejects(
          q.append(cmd({ threadId: "a", messages: [big] })),
          "resource_exhausted",
        );
        expect(err.message).toContain("max_bytes_per_namespace (30)");
        expect((await q.read("ns", "a"))?.thread.lastSeq).toBe(1);
        // Refused Adds logged nothing.
        expect((await q.readEvents("ns", head, 10)).map((e) => [e.type, e.threadId])).toEqual([
          ["messages_added", "b"],
          ["thread_cleared", "b"],
        ]);
        await q.append(cmd({ threadId: "a", messages: [user("x".repeat(25))] }));
        await q.append(cmd({ threadId: "c", messages: [] }));
        await rejects(q.append(cmd({ threadId: "d", messages: [] })), "resource_exhausted");
        // Clear(all) gives everything back.
        expect(await q.clearAll("ns", 3000)).toBe(2);
        await q.append(cmd({ threadId: "d", messages: [user("x".repeat(30))] }));
        await q.append(cmd({ threadId: "e", messages: [] }));
      } finally {
        await q.close();
      }
    });

    it("counts every field of a message in the byte quota, as UTF-8", async () => {
      // content 2 (é) + name 2 + tool call id 2, name 1, arguments 2 + metadata 1 + 1 = 11 bytes.
      const m: ChatMessage = {
        role: "assistant",
        content: "é",
        name: "bo",
        toolCalls: [{ id: "c1", name: "f", arguments: "{}" }],
        metadata: { k: "v" },
      };
      const q = await backend.open({ maxBytesPerNamespace: 11 });
      try {
        await q.append(cmd({ messages: [m] }));
        const err = await rejects(q.append(cmd({ messages: [user("x")] })), "resource_exhausted");
        expect(err.message).toContain("max_bytes_per_namespace (11)");
        // An empty message costs nothing.
        await q.append(cmd({ messages: [user("")] }));
      } finally {
        await q.close();
      }
    });

    it("counts after the Add's own trim, and gives back what trims and summaries drop", async () => {
      const q = await backend.open({ maxMessagesPerNamespace: 4 });
      try {
        const small: Strategy = { ...window20, maxStored: 3 };
        await q.append(cmd({ strategy: small, messages: ["1", "2", "3"].map(user) }));
        // Each adds one and drops one: the namespace stays at 3.
        for (let i = 4; i < 10; i++) await q.append(cmd({ messages: [user(String(i))] }));
        await q.append(cmd({ threadId: "u", messages: [user("x")] }));
        await rejects(
          q.append(cmd({ threadId: "u", messages: [user("y")] })),
          "resource_exhausted",
        );

        // Summary threads keep unfolded messages; a commit trims the folded ones.
        await q.clearAll("ns", 2000);
        const s: Strategy = { ...summary, maxStored: 1 };
        await q.append(
          cmd({ threadId: "s", strategy: s, messages: ["1", "2", "3", "4"].map(user) }),
        );
        await rejects(
          q.append(cmd({ threadId: "s", messages: [user("5")] })),
          "resource_exhausted",
        );
        const thread = await q.getThread("ns", "s");
        const token = (await q.acquireFoldLease("ns", "s", 10_000)) ?? 0;
        await q.commitSummary({
          namespace: "ns",
          threadId: "s",
          incarnation: thread?.incarnation ?? "",
          leaseToken: token,
          fromSeq: 0,
          throughSeq: 3,
          summary: "sum",
          foldedCount: 3,
          now: 3000,
        });
        expect((await q.read("ns", "s"))?.messages.map((m) => m.seq)).toEqual([4]);
        await q.append(cmd({ threadId: "s", messages: ["5", "6", "7"].map(user) }));
        await rejects(
          q.append(cmd({ threadId: "t2", messages: [user("8")] })),
          "resource_exhausted",
        );
      } finally {
        await q.close();
      }
    });

    it("never lets parallel Adds past a quota", async () => {
      const q = await backend.open({ maxThreadsPerNamespace: 5, maxMessagesPerNamespace: 12 });
      try {
        const outcomes = await Promise.allSettled(
          Array.from({ length: 40 }, (_, i) => q.append(cmd({ threadId: `p${i}`, messages: [] }))),
        );
        expect(outcomes.filter((o) => o.status === "fulfilled")).toHaveLength(5);
        for (const o of outcomes) {
          if (o.status === "rejected")
            expect((o.reason as MemoryError).code).toBe("resource_exhausted");
        }
        expect(await q.listThreads("ns", "", 100)).toHaveLength(5);
        const [first] = await q.listThreads("ns", "", 1);
        const adds = await Promise.allSettled(
          Array.from({ length: 30 }, (_, i) =>
            q.append(cmd({ threadId: first ?? "", messages: [user(String(i))] })),
          ),
        );
        expect(adds.filter((o) => o.status === "fulfilled")).toHaveLength(12);
        expect((await q.read("ns", first ?? ""))?.messages).toHaveLength(12);
      } finally {
        await q.close();
      }
    });

    it("counts an imported thread in the namespace quotas and refuses one past them", async () => {
      const q = await backend.open({ maxThreadsPerNamespace: 1, maxMessagesPerNamespace: 4 });
      try {
        await rejects(
          q.importThread(importCommand({ threadId: "big", messages: storedRange(1, 5, 10) })),
          "resource_exhausted",
        );
        expect(await q.listThreads("ns", "", 10)).toEqual([]);
        expect(await q.importThread(importCommand())).toBe(true);
        const err = await rejects(q.append(cmd({ threadId: "another" })), "resource_exhausted");
        expect(err.message).toContain("max_threads_per_namespace");
        // The import's three messages count: three more, less the one folded
        // message max_stored then drops, would make five.
        await rejects(
          q.append(cmd({ threadId: "imp", messages: [user("x"), user("y"), user("z")] })),
          "resource_exhausted",
        );
        await q.append(cmd({ threadId: "imp", messages: [user("x"), user("y")] }));
        expect(await q.clear("ns", "imp", 1)).toBe(true);
        expect(await q.importThread(importCommand({ messages: [], lastSeq: 0 }))).toBe(true);
        expect((await q.read("ns", "imp"))?.messages).toEqual([]);
      } finally {
        await q.close();
      }
    });
  });
}
