import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MemoryError } from "../../src/core/errors.js";
import { recall, recallSize, visibleMessages } from "../../src/core/recall.js";
import type { ChatMessage, MemoryEvent, StoredMessage, Strategy } from "../../src/core/types.js";
import { tokenParts } from "../../src/store/resume-token.js";
import {
  CLEAR_BATCH,
  type ImportThreadCommand,
  READ_SLACK,
  type Store,
  type StoreLimits,
} from "../../src/store/store.js";
import { appendCommands, summary, user, window20 } from "./fixtures.js";

/** Makes a fresh, empty store with the limits a case needs. */
export type StoreFactory = (limits: Partial<StoreLimits>) => Promise<Store>;

const cmd = appendCommands(window20);

async function rejects(p: Promise<unknown>, code: string): Promise<MemoryError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(MemoryError);
    expect((err as MemoryError).code).toBe(code);
    return err as MemoryError;
  }
  throw new Error(`expected a ${code} error`);
}

/**
 * The Store contract, written once and run against every implementation
 * (one *.test.ts per store calls this with its factory).
 */
export function runStoreContract(name: string, factory: StoreFactory): void {
  describe(`Store contract: ${name}`, () => {
    let store: Store;
    beforeEach(async () => {
      store = await factory({});
    });
    afterEach(async () => {
      await store.close();
    });

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

    it("replays a repeated request_id and refuses it for another payload", async () => {
      const first = await store.append(
        cmd({ requestId: "r1", requestHash: "h1", messages: [user("a"), user("b")] }),
      );
      await store.append(cmd({ messages: [user("c")] }));
      const again = await store.append(
        cmd({ requestId: "r1", requestHash: "h1", messages: [user("a"), user("b")] }),
      );
      expect(again.replayed).toBe(true);
      expect([again.firstSeq, again.lastSeq]).toEqual([first.firstSeq, first.lastSeq]);
      expect((await store.read("ns", "t"))?.messages).toHaveLength(3);
      const err = await rejects(
        store.append(cmd({ requestId: "r1", requestHash: "h2" })),
        "invalid_argument",
      );
      expect(err.field).toBe("request_id");
      expect((await store.read("ns", "t"))?.messages).toHaveLength(3);
    });

    it("forgets request ids when the thread is cleared", async () => {
      await store.append(cmd({ requestId: "r1", requestHash: "h1" }));
      await store.clear("ns", "t", 2000);
      const r = await store.append(cmd({ requestId: "r1", requestHash: "h1" }));
      expect(r.replayed).toBe(false);
      expect(r.firstSeq).toBe(1);
    });

    it("starts a cleared thread again from seq 1 with a new incarnation", async () => {
      const a = await store.append(cmd({ messages: [user("a"), user("b")] }));
      expect(await store.clear("ns", "t", 2000)).toBe(true);
      expect(await store.clear("ns", "t", 2000)).toBe(false);
      expect(await store.read("ns", "t")).toBeUndefined();
      const b = await store.append(cmd());
      expect(b.firstSeq).toBe(1);
      expect(b.thread.incarnation).not.toBe(a.thread.incarnation);
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
      expect(events.map((e) => [e.type, e.threadId])).toEqual(
        ids.map((id) => ["thread_cleared", id]),
      );
    });

    it("lists thread ids in byte order, after a key, in pages", async () => {
      for (const id of ["b", "a", "é", "Z", "a2"]) await store.append(cmd({ threadId: id }));
      expect(await store.listThreads("ns", "", 10)).toEqual(["Z", "a", "a2", "b", "é"]);
      expect(await store.listThreads("ns", "", 2)).toEqual(["Z", "a"]);
      expect(await store.listThreads("ns", "a", 2)).toEqual(["a2", "b"]);
    });

    it("logs one event per mutation in order and resumes after any cursor", async () => {
      const head = await store.headCursor("ns");
      const a = await store.append(cmd({ strategy: summary, messages: [user("1"), user("2")] }));
      const token = (await store.acquireFoldLease("ns", "t", 10_000)) ?? 0;
      await store.commitSummary({
        namespace: "ns",
        threadId: "t",
        incarnation: a.thread.incarnation,
        leaseToken: token,
        fromSeq: 0,
        throughSeq: 1,
        summary: "s",
        foldedCount: 1,
        now: 7,
      });
      await store.recordFoldFailure({
        namespace: "ns",
        threadId: "t",
        incarnation: a.thread.incarnation,
        reason: "boom",
        attempt: 1,
        now: 8,
      });
      await store.recordFoldFailure({
        namespace: "ns",
        threadId: "t",
        incarnation: "stale",
        reason: "ignored",
        attempt: 1,
        now: 8,
      });
      await store.clear("ns", "t", 9);
      const events = await store.readEvents("ns", head, 100);
      expect(events.map((e) => e.type)).toEqual([
        "messages_added",
        "summary_updated",
        "summary_failed",
        "thread_cleared",
      ]);
      expect(events[0]).toMatchObject({ threadId: "t", firstSeq: 1, lastSeq: 2 });
      expect(events[1]).toMatchObject({ summary: "s", summarizedThroughSeq: 1, foldedCount: 1 });
      expect(events[2]).toMatchObject({ reason: "boom", attempt: 1, time: 8 });
      const [e0, e1, e2] = events as [MemoryEvent, MemoryEvent, MemoryEvent];
      expect(store.compareCursors(e0.cursor, e1.cursor)).toBeLessThan(0);
      expect(store.compareCursors(e1.cursor, e1.cursor)).toBe(0);
      expect(store.compareCursors(head, e0.cursor)).toBeLessThan(0);
      expect((await store.readEvents("ns", e1.cursor, 100)).map((e) => e.cursor)).toEqual(
        events.slice(2).map((e) => e.cursor),
      );
      expect(await store.readEvents("ns", e0.cursor, 1)).toEqual([events[1]]);
      expect(await store.headCursor("ns")).toBe(events[3]?.cursor);
      expect(await store.readEvents("other", await store.headCursor("other"), 10)).toEqual([]);
      expect(e2.cursor).not.toBe(e1.cursor);
    });

    it("refuses a malformed cursor and one whose history is gone", async () => {
      await rejects(store.readEvents("ns", "garbage", 10), "invalid_argument");
      const small = await factory({ eventRetention: 5 });
      try {
        const head = await small.headCursor("ns");
        for (let i = 0; i < 300; i++) await small.append(cmd({ messages: [user(String(i))] }));
        await rejects(small.readEvents("ns", head, 10), "out_of_range");
        const recent = await small.headCursor("ns");
        expect(await small.readEvents("ns", recent, 10)).toEqual([]);
      } finally {
        await small.close();
      }
    });

    it("numbers each namespace's events on its own: other tenants' writes show in none of its tokens", async () => {
      const starts = { a: await store.headCursor("a"), c: await store.headCursor("c") };
      for (let i = 0; i < 4; i++) {
        await store.append(cmd({ namespace: "a", messages: [user(String(i))] }));
        const headA = await store.headCursor("a");
        // Another tenant writes 7 times: A's head token does not move.
        for (let j = 0; j < 7; j++) await store.append(cmd({ namespace: "b", threadId: `b${j}` }));
        expect(await store.headCursor("a")).toBe(headA);
        // The same writes in namespace c, with nobody writing in between.
        await store.append(cmd({ namespace: "c", messages: [user(String(i))] }));
      }
      const shape = (cursor: string) => {
        const parts = tokenParts(cursor);
        return parts === undefined ? cursor : [parts.storeId, parts.position];
      };
      const a = (await store.readEvents("a", starts.a, 100)).map((e) => shape(e.cursor));
      const c = (await store.readEvents("c", starts.c, 100)).map((e) => shape(e.cursor));
      expect(a).toHaveLength(4);
      expect(a).toEqual(c);
      expect(shape(starts.a)).toEqual(shape(starts.c));
      expect(shape(await store.headCursor("a"))).toEqual(shape(await store.headCursor("c")));
    });

    it("refuses forged, edited, truncated and other namespaces' tokens, and other databases' as out of range", async () => {
      const start = await store.headCursor("ns");
      await store.append(cmd({ messages: [user("1")] }));
      await store.append(cmd({ messages: [user("2")] }));
      const head = await store.headCursor("ns");
      const parts = tokenParts(head);
      expect(parts).toBeDefined();
      const { storeId, position, mac } = parts ?? { storeId: "", position: 0, mac: "" };
      const flip = (s: string, i: number) =>
        s.slice(0, i) + (s[i] === "A" ? "B" : "A") + s.slice(i + 1);
      const refused = [
        // Ahead of the namespace's head, with the head's MAC or an edited one.
        `${storeId}.${position + 3}.${mac}`,
        `${storeId}.${position + 1}.${flip(mac, 0)}`,
        // Behind it: an edited position is not reinterpreted either.
        `${storeId}.${position - 1}.${mac}`,
        `${storeId}.${position}.${flip(mac, 5)}`,
        `${storeId}.${position}.${mac.slice(0, -1)}`,
        head.slice(0, -1),
        head.slice(0, 10),
        `${head}x`,
        ` ${head}`,
        "",
      ];
      for (const token of refused) {
        const err = await rejects(store.readEvents("ns", token, 10), "invalid_argument");
        expect(err.field, token).toBe("resume_token");
      }
      // Another namespace's token, even at a position that namespace has.
      await store.append(cmd({ namespace: "other", messages: [user("x")] }));
      await store.append(cmd({ namespace: "other", messages: [user("y")] }));
      const err = await rejects(store.readEvents("other", head, 10), "invalid_argument");
      expect(err.message).toContain("resume_token");
      await rejects(
        store.readEvents("ns", await store.headCursor("other"), 10),
        "invalid_argument",
      );
      // Another database's token: out_of_range, never resumed somewhere else.
      const elsewhere = await factory({});
      try {
        await elsewhere.append(cmd({ messages: [user("1")] }));
        const foreign = await elsewhere.headCursor("ns");
        const out = await rejects(store.readEvents("ns", foreign, 10), "out_of_range");
        expect(out.message).toContain("re-read with Get and watch from now");
      } finally {
        await elsewhere.close();
      }
      // The genuine tokens still work.
      expect((await store.readEvents("ns", start, 10)).map((e) => e.cursor)).toHaveLength(2);
      expect(await store.readEvents("ns", head, 10)).toEqual([]);
    });

    it("refuses an Add past each namespace quota, naming it, storing nothing; Clear gives the room back", async () => {
      const q = await factory({
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
      const q = await factory({ maxBytesPerNamespace: 11 });
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
      const q = await factory({ maxMessagesPerNamespace: 4 });
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
      const q = await factory({ maxThreadsPerNamespace: 5, maxMessagesPerNamespace: 12 });
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

    it("delivers every later event to subscribers, in order, until unsubscribed", async () => {
      const head = await store.headCursor("ns");
      const seen: MemoryEvent[] = [];
      const stop = store.subscribe("ns", (events) => seen.push(...events));
      await store.append(cmd({ threadId: "a" }));
      await store.append(cmd({ namespace: "other" }));
      await store.clearAll("ns", 5);
      await waitFor(() => seen.length >= 2);
      stop();
      // A subscriber that joins now hears "b"; once it has, the first one
      // would have too, had it still been subscribed.
      const later: MemoryEvent[] = [];
      const stopLater = store.subscribe("ns", (events) => later.push(...events));
      await store.append(cmd({ threadId: "b" }));
      await waitFor(() => later.length >= 1);
      stopLater();
      expect(later.map((e) => e.threadId)).toEqual(["b"]);
      expect(seen.map((e) => [e.type, e.threadId])).toEqual([
        ["messages_added", "a"],
        ["thread_cleared", "a"],
      ]);
      // A published event is the logged one: same cursor (however the store
      // makes it), same fields, nothing of the store's own.
      const logged = await store.readEvents("ns", head, 10);
      expect(seen.map((e) => e.cursor)).toEqual(logged.slice(0, 2).map((e) => e.cursor));
      expect(seen.map((e) => ({ ...e }))).toEqual(logged.slice(0, 2).map((e) => ({ ...e })));
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

    it("imports a thread's labels with it", async () => {
      const labels = { user_id: "u1", agent: "a" };
      expect(await store.importThread(importCommand({ labels }))).toBe(true);
      expect((await store.getThread("ns", "imp"))?.labels).toEqual(labels);
      expect(await store.listThreads("ns", "", 10, { agent: "a" })).toEqual(["imp"]);
      await store.clear("ns", "imp", 1);
      expect(await store.listThreads("ns", "", 10, { agent: "a" })).toEqual([]);
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

    it("counts an imported thread in the namespace quotas and refuses one past them", async () => {
      const q = await factory({ maxThreadsPerNamespace: 1, maxMessagesPerNamespace: 4 });
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

/** Stored messages with seqs from..to, each with every optional field on one of them. */
function storedRange(from: number, to: number, time: number): StoredMessage[] {
  const out: StoredMessage[] = [];
  for (let seq = from; seq <= to; seq++) {
    out.push(
      seq === from + 1
        ? {
            role: "assistant",
            content: "",
            name: "bot",
            toolCalls: [{ id: "c1", name: "lookup", arguments: '{"q":"x"}' }],
            metadata: { k: "v" },
            seq,
            createTime: time + seq,
          }
        : seq === from + 2
          ? { role: "tool", content: "found é", toolCallId: "c1", seq, createTime: time + seq }
          : { role: "user", content: `m${seq}`, seq, createTime: time + seq },
    );
  }
  return out;
}

/** Thread "imp": a summary thread folded through 5, holding seqs 5..7, max_stored 3. */
function importCommand(over: Partial<ImportThreadCommand> = {}): ImportThreadCommand {
  return {
    namespace: "ns",
    threadId: "imp",
    strategy: { ...summary, maxStored: 3 },
    lastSeq: 7,
    summarizedThroughSeq: 5,
    summary: "earlier talk",
    summaryTime: 400,
    createTime: 100,
    updateTime: 500,
    messages: storedRange(5, 7, 200),
    now: 9000,
    ...over,
  };
}

async function waitFor(cond: () => boolean, ms = 2000): Promise<void> {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Folds the thread's oldest `fraction` of stored seqs into a summary; whether it did. */
async function foldThrough(store: Store, threadId: string, fraction: number): Promise<boolean> {
  const thread = await store.getThread("ns", threadId);
  if (thread?.strategy.kind !== "summary") return false;
  const throughSeq = Math.floor(thread.lastSeq * fraction);
  if (throughSeq <= 0) return false;
  const token = await store.acquireFoldLease("ns", threadId, 10_000);
  const after = await store.commitSummary({
    namespace: "ns",
    threadId,
    incarnation: thread.incarnation,
    leaseToken: token ?? 0,
    fromSeq: 0,
    throughSeq,
    summary: `through ${throughSeq}`,
    foldedCount: throughSeq,
    now: 1,
  });
  if (token !== undefined) await store.releaseFoldLease("ns", threadId, token);
  return after !== undefined;
}

/** Messages of one Add: users, systems, assistants each followed by their 0-3 tool results, orphans. */
const addArb: fc.Arbitrary<ChatMessage[]> = fc
  .array(
    fc.oneof(
      { arbitrary: fc.constant(-1), weight: 3 },
      { arbitrary: fc.constant(-2), weight: 1 },
      { arbitrary: fc.constant(-3), weight: 1 },
      { arbitrary: fc.integer({ min: 0, max: 3 }), weight: 4 },
    ),
    { maxLength: 14 },
  )
  .map((units) => {
    const out: ChatMessage[] = [];
    for (const [i, u] of units.entries()) {
      if (u === -1) out.push({ role: "user", content: `u${i}` });
      else if (u === -2) out.push({ role: "system", content: `s${i}` });
      else if (u === -3) out.push({ role: "tool", content: `orphan${i}`, toolCallId: `gone${i}` });
      else {
        const ids = Array.from({ length: u }, (_, k) => `c${i}-${k}`);
        const toolCalls = ids.map((id) => ({ id, name: "f", arguments: "{}" }));
        out.push({ role: "assistant", content: `a${i}`, ...(u > 0 ? { toolCalls } : {}) });
        for (const id of ids) out.push({ role: "tool", content: `r${id}`, toolCallId: id });
      }
    }
    return out;
  });

const strategyArb: fc.Arbitrary<Strategy> = fc
  .record({
    kind: fc.constantFrom("buffer", "window", "summary"),
    size: fc.integer({ min: 0, max: 8 }),
    excludeSystem: fc.boolean(),
    maxStored: fc.integer({ min: 4, max: 80 }),
  })
  .map(({ kind, size, excludeSystem, maxStored }): Strategy => {
    switch (kind) {
      case "buffer":
        return { kind, maxMessages: size, excludeSystem, maxStored };
      case "window":
        return { kind, window: Math.max(1, size), excludeSystem, maxStored };
      default:
        return { ...summary, window: size, excludeSystem, maxStored };
    }
  });

/** A thread to build (Adds, maybe a fold, more Adds) and the limit of the Get to read it for. */
const windowedCaseArb = fc.record({
  strategy: strategyArb,
  batches: fc.array(addArb, { minLength: 1, maxLength: 6 }),
  foldFraction: fc.double({ min: 0, max: 1, noNaN: true }),
  after: addArb,
  limit: fc.option(fc.integer({ min: 0, max: 10 }), { nil: undefined }),
});
