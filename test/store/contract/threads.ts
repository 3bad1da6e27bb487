/**
 * ThreadStore: append and read (seqs, every message field, windowed reads
 * against full ones, trims by max_stored, expected_last_seq and the thread's
 * strategy). Request ids are in requests.ts, Clear and ListThreads in
 * admin.ts, labels, expiry and quotas in modules of their own.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { recall, recallSize, visibleMessages } from "../../../src/core/recall.js";
import type { ChatMessage, Strategy } from "../../../src/core/types.js";
import { READ_SLACK, type Store } from "../../../src/store/store.js";
import { summary, user, window20 } from "../fixtures.js";
import {
  type ContractBackend,
  cmd,
  rejects,
  storeOfEachCase,
  tryFold,
  windowedCaseArb,
} from "./support.js";

export function threadsContract(backend: ContractBackend): void {
  describe("threads and messages", () => {
    const store = storeOfEachCase(backend);

    it("assigns consecutive seqs from 1 and reads messages back in order", async () => {
      const r1 = await store.append(cmd({ messages: [user("a"), user("b")] }));
      expect([r1.firstSeq, r1.lastSeq, r1.thread.lastSeq]).toEqual([1, 2, 2]);
      const r2 = await store.append(cmd({ messages: [user("c")], now: 2000 }));
      expect([r2.firstSeq, r2.lastSeq]).toEqual([3, 3]);
      const snap = await store.read("ns", "t");
      expect(snap?.messages.map((m) => [m.seq, m.content])).toEqual([
        [1, "a"],
        [2, "b"],
        [3, "c"],
      ]);
      expect(snap?.messages[2]?.createTime).toBe(2000);
      expect(snap?.thread.strategy).toEqual(window20);
      expect(snap?.thread.createTime).toBe(1000);
      expect(snap?.thread.updateTime).toBe(2000);
    });

    it("hands out one strategy object per strategy across reads, so its wire form is built once", async () => {
      await store.append(cmd({ threadId: "s1", strategy: window20, messages: [user("a")] }));
      await store.append(cmd({ threadId: "s2", strategy: window20, messages: [user("b")] }));
      const first = await store.read("ns", "s1");
      const again = await store.read("ns", "s1");
      const other = await store.getThread("ns", "s2");
      expect(first?.thread.strategy).toEqual(window20);
      expect(again?.thread.strategy).toBe(first?.thread.strategy);
      expect(other?.strategy).toBe(first?.thread.strategy);
    });

    it("returns at least what a Get needs from a windowed read", async () => {
      const many = Array.from({ length: 40 }, (_, i) => user(String(i + 1)));
      await store.append(
        cmd({ threadId: "w", strategy: { ...window20, window: 3 }, messages: many }),
      );
      const w = await store.read("ns", "w", { limit: undefined });
      const seqs = w?.messages.map((m) => m.seq) ?? [];
      expect(seqs.length).toBeGreaterThanOrEqual(w?.complete ? 40 : 3 + READ_SLACK);
      expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => 41 - seqs.length + i));
      const all = await store.read("ns", "w", { limit: 0 });
      expect(all?.complete).toBe(true);
      expect(all?.messages).toHaveLength(40);
      expect((await store.read("ns", "w"))?.complete).toBe(true);

      await store.append(cmd({ threadId: "s", strategy: summary, messages: many }));
      const thread = await store.getThread("ns", "s");
      const token = (await store.acquireFoldLease("ns", "s", 10_000)) ?? 0;
      await store.commitSummary({
        namespace: "ns",
        threadId: "s",
        incarnation: thread?.incarnation ?? "",
        leaseToken: token,
        fromSeq: 0,
        throughSeq: 5,
        summary: "s",
        foldedCount: 5,
        now: 2,
      });
      const s = await store.read("ns", "s", { limit: 1 });
      const unfolded = s?.messages.filter((m) => m.seq > 5).map((m) => m.seq);
      expect(unfolded).toEqual(Array.from({ length: 35 }, (_, i) => i + 6));
    });

    it("answers every Get from a windowed read exactly as from a full read (property)", async () => {
      let run = 0;
      await fc.assert(
        fc.asyncProperty(windowedCaseArb, async (c) => {
          run += 1;
          const threadId = `p${run}`;
          const strategy = c.strategy;
          const add = (messages: ChatMessage[]) =>
            store.append(cmd({ threadId, strategy, messages, now: run }));
          for (const batch of c.batches) await add(batch);
          const folded = await foldThrough(store, threadId, c.foldFraction);
          if (folded) await add(c.after);

          // Twice: a store with a cache fills it on the first and serves the second from it.
          const first = await store.read("ns", threadId, { limit: c.limit });
          const again = await store.read("ns", threadId, { limit: c.limit });
          const full = await store.read("ns", threadId);
          if (first === undefined || again === undefined || full === undefined) {
            throw new Error("thread missing");
          }
          expect(again).toEqual(first);
          expect(first.thread).toEqual(full.thread);
          const all = full.messages;
          const win = first.messages;
          // The newest messages, in order, and `complete` exactly when none is left out.
          expect(win).toEqual(all.slice(all.length - win.length));
          expect(first.complete).toBe(win.length === all.length);
          const size = recallSize(strategy, c.limit);
          if (size <= 0) expect(first.complete).toBe(true);
          else expect(win.length).toBeGreaterThanOrEqual(Math.min(all.length, size + READ_SLACK));
          const through = full.thread.summarizedThroughSeq;
          if (strategy.kind === "summary") {
            expect(win.filter((m) => m.seq > through)).toEqual(all.filter((m) => m.seq > through));
          }
          // Recall over the windowed read is the full read's whenever the
          // service keeps it (memory-service.ts readForGet): the read was
          // complete, the thread is a summary one, or the recalled messages
          // do not start at the oldest visible message read.
          const state = {
            summary: full.thread.summary,
            summarizedThroughSeq: through,
            summaryTime: full.thread.summaryTime,
          };
          const fromWindow = recall(strategy, state, win, { limit: c.limit });
          const fromAll = recall(strategy, state, all, { limit: c.limit });
          const kept =
            first.complete ||
            strategy.kind === "summary" ||
            fromWindow.messages[0] !== visibleMessages(strategy, win)[0];
          if (kept) expect(fromWindow).toEqual(fromAll);
          else expect(visibleMessages(strategy, win).length).toBeLessThan(all.length);
        }),
        { numRuns: 40 },
      );
    }, 120_000);

    it("never serves a cleared, trimmed or folded thread's old messages from a windowed read", async () => {
      const view = { limit: undefined };
      const seqsOf = async (threadId: string, v?: { limit: number | undefined }) =>
        (await store.read("ns", threadId, v))?.messages.map((m) => [m.seq, m.content]);
      const many = Array.from({ length: 60 }, (_, i) => user(`old${i}`));

      // Clear, then Add again: only the new incarnation's messages.
      await store.append(cmd({ threadId: "c", messages: many }));
      expect(await seqsOf("c", view)).toHaveLength(20 + READ_SLACK);
      await store.clear("ns", "c", 2);
      expect(await store.read("ns", "c", view)).toBeUndefined();
      await store.append(cmd({ threadId: "c", messages: [user("x"), user("y")] }));
      const fresh = await store.read("ns", "c", view);
      expect(fresh?.complete).toBe(true);
      expect(fresh?.messages.map((m) => [m.seq, m.content])).toEqual([
        [1, "x"],
        [2, "y"],
      ]);

      // Trims by later Adds.
      const five: Strategy = { ...window20, maxStored: 5 };
      await store.append(cmd({ threadId: "t5", strategy: five, messages: many.slice(0, 10) }));
      expect(await seqsOf("t5", view)).toEqual(await seqsOf("t5"));
      await store.append(cmd({ threadId: "t5", messages: [user("n1"), user("n2"), user("n3")] }));
      const trimmed = await store.read("ns", "t5", view);
      expect(trimmed?.complete).toBe(true);
      expect(trimmed?.messages.map((m) => m.seq)).toEqual([9, 10, 11, 12, 13]);
      expect(await seqsOf("t5")).toEqual(trimmed?.messages.map((m) => [m.seq, m.content]));

      // A summary commit, which trims what it folded.
      const s: Strategy = { ...summary, maxStored: 4 };
      await store.append(cmd({ threadId: "s", strategy: s, messages: many.slice(0, 10) }));
      expect(await seqsOf("s", view)).toHaveLength(10);
      const thread = await store.getThread("ns", "s");
      const token = await store.acquireFoldLease("ns", "s", 10_000);
      await store.commitSummary({
        namespace: "ns",
        threadId: "s",
        incarnation: thread?.incarnation ?? "",
        leaseToken: token ?? 0,
        fromSeq: 0,
        throughSeq: 8,
        summary: "sum",
        foldedCount: 8,
        now: 3,
      });
      const afterFold = await store.read("ns", "s", view);
      expect(afterFold?.thread.summarizedThroughSeq).toBe(8);
      expect(afterFold?.thread.summary).toBe("sum");
      expect(afterFold?.messages.map((m) => m.seq)).toEqual([7, 8, 9, 10]);
      expect(await seqsOf("s")).toEqual(afterFold?.messages.map((m) => [m.seq, m.content]));
      await store.append(cmd({ threadId: "s", messages: [user("after")] }));
      expect((await store.read("ns", "s", view))?.messages.map((m) => m.seq)).toEqual([
        8, 9, 10, 11,
      ]);
    });

    it("keeps every message field", async () => {
      const m: ChatMessage = {
        role: "assistant",
        content: "",
        name: "bot",
        toolCalls: [{ id: "c1", name: "f", arguments: '{"x":1}' }],
        metadata: { k: "v" },
      };
      const t: ChatMessage = { role: "tool", content: "42", toolCallId: "c1" };
      await store.append(cmd({ messages: [m, t] }));
      const snap = await store.read("ns", "t");
      expect(snap?.messages[0]).toMatchObject(m);
      expect(snap?.messages[1]).toMatchObject(t);
    });

    it("keeps each message's token count and encoding, and reads a message without one as without", async () => {
      const counted: ChatMessage = { role: "user", content: "hello there", tokens: 5 };
      const cl100k: ChatMessage = {
        role: "assistant",
        content: "hi",
        tokens: 4,
        tokenEncoding: "cl100k_base",
      };
      const uncounted: ChatMessage = { role: "user", content: "old" };
      await store.append(cmd({ messages: [counted, cl100k, uncounted] }));
      const read = async () => (await store.read("ns", "t"))?.messages ?? [];
      for (const messages of [await read(), await read()]) {
        expect(messages[0]?.tokens).toBe(5);
        expect(messages[0]?.tokenEncoding).toBeUndefined();
        expect(messages[1]?.tokens).toBe(4);
        expect(messages[1]?.tokenEncoding).toBe("cl100k_base");
        expect(messages[2]?.tokens).toBeUndefined();
      }
      const windowed = await store.read("ns", "t", { limit: 1 });
      expect(windowed?.messages.at(-1)?.tokens).toBeUndefined();
      expect(windowed?.messages.find((m) => m.seq === 2)?.tokens ?? 4).toBe(4);
    });

    it("returns undefined for a thread that does not exist and keeps namespaces apart", async () => {
      await store.append(cmd());
      expect(await store.read("other", "t")).toBeUndefined();
      expect(await store.getThread("ns", "nope")).toBeUndefined();
      expect(await store.listThreads("other", "", 10)).toEqual([]);
    });

    it("creates a thread with an empty Add and adds no event for it", async () => {
      const head = await store.headCursor("ns");
      const r = await store.append(cmd({ messages: [] }));
      expect([r.firstSeq, r.lastSeq, r.thread.lastSeq]).toEqual([0, 0, 0]);
      expect(await store.listThreads("ns", "", 10)).toEqual(["t"]);
      expect(await store.readEvents("ns", head, 10)).toEqual([]);
    });

    it("trims the oldest beyond max_stored without reusing seqs", async () => {
      const small: Strategy = { ...window20, maxStored: 3 };
      await store.append(cmd({ strategy: small, messages: [user("1"), user("2")] }));
      await store.append(cmd({ messages: [user("3"), user("4"), user("5")] }));
      const snap = await store.read("ns", "t");
      expect(snap?.messages.map((m) => m.seq)).toEqual([3, 4, 5]);
      const r = await store.append(cmd({ messages: [user("6")] }));
      expect(r.firstSeq).toBe(6);
    });

    it("enforces expected_last_seq and the thread's strategy atomically", async () => {
      await rejects(store.append(cmd({ expectedLastSeq: 1 })), "aborted");
      expect(await store.read("ns", "t")).toBeUndefined();
      await store.append(cmd({ expectedLastSeq: 0 }));
      await rejects(store.append(cmd({ expectedLastSeq: 0 })), "aborted");
      const err = await rejects(
        store.append(cmd({ strategy: { ...window20, window: 5 } })),
        "failed_precondition",
      );
      expect(err.message).toContain("window=20");
      expect(err.message).toContain("window=5");
      expect((await store.read("ns", "t"))?.messages).toHaveLength(1);
      const r = await store.append(
        cmd({ strategy: { ...window20, window: 5 }, replaceStrategy: true, messages: [] }),
      );
      expect(r.thread.strategy).toMatchObject({ window: 5 });
      expect((await store.read("ns", "t"))?.messages).toHaveLength(1);
    });
  });
}

/** Folds the thread's oldest `fraction` of stored seqs into a summary; whether it did. */
async function foldThrough(store: Store, threadId: string, fraction: number): Promise<boolean> {
  const thread = await store.getThread("ns", threadId);
  if (thread?.strategy.kind !== "summary") return false;
  const throughSeq = Math.floor(thread.lastSeq * fraction);
  if (throughSeq <= 0) return false;
  return (await tryFold(store, threadId, throughSeq)) !== undefined;
}
