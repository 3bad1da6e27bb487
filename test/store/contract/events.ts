/**
 * EventLog: one event per mutation, readEvents after a cursor, resume tokens
 * numbered per namespace and refused when forged, edited, another
 * namespace's or another database's, and subscribers.
 */
import { describe, expect, it } from "vitest";
import type { MemoryEvent } from "../../../src/core/types.js";
import { cursorParts } from "../../../src/store/resume-token.js";
import { summary, user } from "../fixtures.js";
import { type ContractBackend, cmd, rejects, storeOfEachCase, waitFor } from "./support.js";

export function eventsContract(backend: ContractBackend): void {
  describe("event log", () => {
    const store = storeOfEachCase(backend);

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
      const small = await backend.open({ eventRetention: 5 });
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
        const parts = cursorParts(cursor);
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
      const parts = cursorParts(head);
      expect(parts).toBeDefined();
      const { storeId, position: at, mac } = parts ?? { storeId: "", position: "0", mac: "" };
      // The last (or only) position moved by n: a sharded namespace's cursor names one per shard.
      const moved = (n: number) => at.replace(/\d+$/, (p) => String(Number(p) + n));
      const flip = (s: string, i: number) =>
        s.slice(0, i) + (s[i] === "A" ? "B" : "A") + s.slice(i + 1);
      const refused = [
        // Ahead of the namespace's head, with the head's MAC or an edited one.
        `${storeId}.${moved(3)}.${mac}`,
        `${storeId}.${moved(1)}.${flip(mac, 0)}`,
        // Behind it: an edited position is not reinterpreted either.
        `${storeId}.${moved(-1)}.${mac}`,
        `${storeId}.${at}.${flip(mac, 5)}`,
        `${storeId}.${at}.${mac.slice(0, -1)}`,
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
      const elsewhere = await backend.open({});
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
      if (backend.namespaceShards !== undefined) {
        // Sharded (support.ts): no cursor to subscribers, and a and b in
        // different shards are ordered by time only; each thread's events in order.
        const ofA = logged.filter((e) => e.threadId === "a").map((e) => ({ ...e, cursor: "" }));
        expect(seen.map((e) => ({ ...e }))).toEqual(ofA);
        return;
      }
      expect(seen.map((e) => e.cursor)).toEqual(logged.slice(0, 2).map((e) => e.cursor));
      expect(seen.map((e) => ({ ...e }))).toEqual(logged.slice(0, 2).map((e) => ({ ...e })));
    });
  });
}
