/**
 * ThreadStore.fork (core/fork.ts decides, core/lineage.ts shares the
 * messages): what the new thread holds and inherits, every refusal, replays,
 * the independence of parent and fork afterwards (whether the Fork copied the
 * parent's head or froze it), Clear and expiry, quotas, the thread_forked
 * event and ListThreads(forks_of).
 */
import { describe, expect, it } from "vitest";
import type { ChatMessage, Strategy } from "../../../src/core/types.js";
import type { Store, ThreadSnapshot } from "../../../src/store/store.js";
import { buffer, summary, user, window20 } from "../fixtures.js";
import { forkPropertyContract } from "./forks-model.js";
import {
  type ContractBackend,
  cmd,
  fold,
  forkCmd,
  importCommand,
  numbered,
  quotaCase,
  refused,
  rejects,
  rewindCmd,
  seqsOf,
  storeOfEachCase,
} from "./support.js";

/** Seq, content and create time of every message: what a fork must hold exactly. */
export const triples = (snap: ThreadSnapshot | undefined) =>
  snap?.messages.map((m) => [m.seq, m.content, m.createTime]);

/** A fork of at most FORK_COPY_MAX messages is copied, a longer one freezes the parent's head. */
const PATHS = [
  { path: "copy", n: 10 },
  { path: "freeze", n: 200 },
] as const;

/** Thread "t": messages "1".."n", the first half added at 1000, the rest at 1500. */
export async function parentOf(
  store: Store,
  n: number,
  strategy: Strategy = window20,
): Promise<void> {
  const half = Math.floor(n / 2);
  const all = numbered(n);
  await store.append(cmd({ strategy, messages: all.slice(0, half), now: 1000 }));
  await store.append(cmd({ messages: all.slice(half), now: 1500 }));
}

/** The expected triples of seqs from..to of a parentOf thread of n messages. */
export function expected(from: number, to: number, n: number): (string | number)[][] {
  const out: (string | number)[][] = [];
  for (let seq = from; seq <= to; seq++) {
    out.push([seq, String(seq), seq <= Math.floor(n / 2) ? 1000 : 1500]);
  }
  return out;
}

/** Exactly `room` more messages of one byte fit in the namespace of `q` (then it is as before). */
export async function expectMessageRoom(q: Store, room: number): Promise<void> {
  if (room > 0)
    await q.append(cmd({ threadId: "probe", messages: numbered(room).map(() => user("x")) }));
  else await q.append(cmd({ threadId: "probe", messages: [] }));
  await rejects(q.append(cmd({ threadId: "probe", messages: [user("x")] })), "resource_exhausted");
  await q.clear("ns", "probe", 9000);
}

export function forksContract(backend: ContractBackend): void {
  describe("fork", () => {
    const store = storeOfEachCase(backend);
    forkShapeCases(store);
    forkToolRunTrimCases(store);
    forkRefusalCases(store, backend);
    forkReplayCases(store);
    forkIndependenceCases(store);
    forkClearCases(store, backend);
    forkQuotaCases(backend);
    forkEventAndListCases(store);
  });
  forkPropertyContract(backend);
}

function forkShapeCases(store: Store): void {
  for (const { path, n } of PATHS) {
    for (const [where, at] of [
      ["last_seq", n],
      ["a middle seq", n / 2 + 3],
      ["0", 0],
    ] as const) {
      it(`forks at ${where} (${path} path): seqs, contents, create times and origin; the parent unchanged`, async () => {
        await parentOf(store, n);
        const before = await store.read("ns", "t");
        const r = await store.fork(forkCmd("f", { atSeq: where === "last_seq" ? undefined : at }));
        expect(r).toMatchObject({ sharedCount: at, summaryInherited: false, replayed: false });
        expect(r.thread).toMatchObject({
          threadId: "f",
          lastSeq: at,
          createTime: 2000,
          updateTime: 2000,
          strategy: window20,
          parent: { threadId: "t", atSeq: at, forkTime: 2000, parentCreateTime: 1000 },
        });
        expect(r.thread.incarnation).not.toBe(before?.thread.incarnation);
        const snap = await store.read("ns", "f");
        expect(snap?.thread).toEqual(r.thread);
        expect(await store.getThread("ns", "f")).toEqual(r.thread);
        expect(triples(snap)).toEqual(expected(1, at, n));
        expect(await store.read("ns", "t")).toEqual(before);
        expect(await store.listThreads("ns", "", 10)).toEqual(["f", "t"]);
      });
    }
  }

  it("inherits strategy, labels and ttl, or takes the ones given", async () => {
    const t0 = Date.now();
    const ttlMs = 3_600_000;
    await store.append(cmd({ messages: numbered(3), labels: { user: "u1" }, ttlMs, now: t0 }));
    const same = await store.fork(forkCmd("f1", { now: t0 + 5 }));
    expect(same.thread).toMatchObject({
      strategy: window20,
      labels: { user: "u1" },
      ttlMs,
      expireTime: t0 + 5 + ttlMs,
    });
    const other = await store.fork(
      forkCmd("f2", { now: t0 + 6, strategy: buffer, labels: { user: "u2" }, ttlMs: 0 }),
    );
    expect(other.thread).toMatchObject({ strategy: buffer, labels: { user: "u2" } });
    expect(other.thread.ttlMs).toBeUndefined();
    expect(other.thread.expireTime).toBeUndefined();
    expect(await store.listThreads("ns", "", 10, { user: "u1" })).toEqual(["f1", "t"]);
    expect(await store.listThreads("ns", "", 10, { user: "u2" })).toEqual(["f2"]);
    // The parent's state, update and expire times did not change.
    expect((await store.getThread("ns", "t"))?.updateTime).toBe(t0);
    expect((await store.getThread("ns", "t"))?.expireTime).toBe(t0 + ttlMs);
  });

  for (const { path, n } of PATHS) {
    it(`a smaller max_stored trims the fork only (${path} path)`, async () => {
      await parentOf(store, n);
      const small: Strategy = { ...window20, maxStored: 4 };
      const r = await store.fork(forkCmd("f", { strategy: small }));
      expect(r.sharedCount).toBe(n);
      expect(r.thread).toMatchObject({ lastSeq: n, strategy: small });
      expect(triples(await store.read("ns", "f"))).toEqual(expected(n - 3, n, n));
      expect(triples(await store.read("ns", "t"))).toEqual(expected(1, n, n));
      const next = await store.append(cmd({ threadId: "f", messages: [user("x")], now: 3000 }));
      expect(next.firstSeq).toBe(n + 1);
      expect(seqsOf(await store.read("ns", "f"))).toEqual([n - 2, n - 1, n, n + 1]);
    });
  }

  it("inherits a summary through at_seq or before, not one past it", async () => {
    await store.append(cmd({ strategy: summary, messages: numbered(6) }));
    const folded = await fold(store, "t", 3);
    for (const at of [3, 4, 6]) {
      const r = await store.fork(forkCmd(`f${at}`, { atSeq: at }));
      expect(r.summaryInherited).toBe(true);
      expect(r.thread).toMatchObject({
        summary: "through 3",
        summarizedThroughSeq: 3,
        summaryTime: folded.summaryTime,
      });
    }
    const past = await store.fork(forkCmd("f2", { atSeq: 2 }));
    expect(past.summaryInherited).toBe(false);
    expect(past.thread).toMatchObject({ summary: "", summarizedThroughSeq: 0, summaryTime: 0 });
    expect(seqsOf(await store.read("ns", "f2"))).toEqual([1, 2]);
    // Another strategy kind keeps no summary, as an Add changing it.
    const win = await store.fork(forkCmd("w", { strategy: window20 }));
    expect(win).toMatchObject({ summaryInherited: false, sharedCount: 6 });
    expect(win.thread.summary).toBe("");
  });

  it("refuses a fork before a summary that holds trimmed messages; forks at or after it", async () => {
    await store.append(cmd({ strategy: { ...summary, maxStored: 3 }, messages: numbered(6) }));
    await fold(store, "t", 5);
    expect(seqsOf(await store.read("ns", "t"))).toEqual([4, 5, 6]);
    await refused(store.fork(forkCmd("f", { atSeq: 4 })), "failed_precondition", "at_seq");
    await refused(store.fork(forkCmd("f", { atSeq: 3 })), "failed_precondition", "at_seq");
    await refused(store.fork(forkCmd("f", { atSeq: 2 })), "failed_precondition", "at_seq");
    const r = await store.fork(forkCmd("f", { atSeq: 5 }));
    expect(r).toMatchObject({ sharedCount: 2, summaryInherited: true });
    expect(r.thread).toMatchObject({ summary: "through 5", summarizedThroughSeq: 5, lastSeq: 5 });
    expect(seqsOf(await store.read("ns", "f"))).toEqual([4, 5]);
  });
}

/** Seqs from..to. */
const seqRange = (from: number, to: number) =>
  Array.from({ length: to - from + 1 }, (_, i) => from + i);

/**
 * Messages for seqs 1.. of a thread: users "1" and "2", at seq 3 one
 * assistant message calling `calls` tools, their results (seqs 4..calls+3,
 * the call ids in order), then `tail` users.
 */
function toolRun(calls: number, tail: number): ChatMessage[] {
  const ids = Array.from({ length: calls }, (_, i) => `c${i + 1}`);
  return [
    user("1"),
    user("2"),
    {
      role: "assistant",
      content: "",
      toolCalls: ids.map((id) => ({ id, name: "f", arguments: "{}" })),
    },
    ...ids.map((id): ChatMessage => ({ role: "tool", content: `r${id}`, toolCallId: id })),
    ...Array.from({ length: tail }, (_, i) => user(String(calls + 4 + i))),
  ];
}

/**
 * A Fork's own trim where its cut falls on tool results (core/fork.ts
 * forkTrimCount, which the memory store runs directly): the cut extends over
 * the whole run of results, however long, never past a summary strategy's
 * folded run.
 */
function forkToolRunTrimCases(store: Store): void {
  describe("its own trim at a run of tool results", () => {
    // Seqs 1..310: the call at 3, its 300 results at 4..303, users at 304..310.
    const messages = toolRun(300, 7);

    it("extends the cut over a run of 300 tool results: the fork starts after the run", async () => {
      await store.append(cmd({ messages }));
      const before = await store.read("ns", "t");
      // 310 - 300 = 10 dropped at first, the cut at seq 11 inside the run: it extends through 303.
      const small: Strategy = { ...window20, maxStored: 300 };
      const r = await store.fork(forkCmd("f", { strategy: small }));
      expect(r).toMatchObject({ sharedCount: 310, summaryInherited: false });
      expect(r.thread).toMatchObject({ lastSeq: 310, strategy: small });
      const snap = await store.read("ns", "f");
      expect(seqsOf(snap)).toEqual(seqRange(304, 310));
      expect(snap?.messages[0]).toMatchObject({ role: "user", content: "304" });
      expect(await store.read("ns", "t")).toEqual(before);
    });

    it("extends the cut over a run that spans the parent's frozen segment and its head", async () => {
      // "m" shares seqs 1..150 of "t" (its head frozen: more than FORK_COPY_MAX), then holds 151..310.
      await store.append(cmd({ messages: messages.slice(0, 150) }));
      await store.fork(forkCmd("m"));
      await store.append(cmd({ threadId: "m", messages: messages.slice(150), now: 1500 }));
      const small: Strategy = { ...window20, maxStored: 300 };
      const r = await store.fork(forkCmd("f", { threadId: "m", strategy: small, now: 2500 }));
      expect(r.sharedCount).toBe(310);
      expect(seqsOf(await store.read("ns", "f"))).toEqual(seqRange(304, 310));
      expect(seqsOf(await store.read("ns", "m"))).toEqual(seqRange(1, 310));
    });

    it("cuts a summary fork at most at its folded run, shorter than the excess, on a tool result", async () => {
      // Seqs 1..12: the call at 3, its results at 4..7; folded through 4.
      await store.append(cmd({ strategy: summary, messages: toolRun(4, 5) }));
      await fold(store, "t", 4);
      // 12 - 4 = 8 in excess, but only the folded run (seqs 1..4) may go: the fork
      // starts at seq 5, a tool result, as the core decides.
      const small: Strategy = { ...summary, maxStored: 4 };
      const r = await store.fork(forkCmd("f", { strategy: small }));
      expect(r).toMatchObject({ sharedCount: 12, summaryInherited: true });
      expect(r.thread).toMatchObject({ summarizedThroughSeq: 4, strategy: small });
      const snap = await store.read("ns", "f");
      expect(seqsOf(snap)).toEqual(seqRange(5, 12));
      expect(snap?.messages[0]).toMatchObject({ role: "tool", toolCallId: "c2" });
    });

    it("extends a summary fork's cut over a long run of tool results up to its folded run", async () => {
      await store.append(cmd({ strategy: summary, messages }));
      await fold(store, "t", 290);
      // 10 in excess: the cut at 11 extends over the results up to the folded run's end, 290.
      const small: Strategy = { ...summary, maxStored: 300 };
      const r = await store.fork(forkCmd("f", { strategy: small }));
      expect(r).toMatchObject({ sharedCount: 310, summaryInherited: true });
      const snap = await store.read("ns", "f");
      expect(seqsOf(snap)).toEqual(seqRange(291, 310));
      expect(snap?.messages[0]).toMatchObject({ role: "tool", toolCallId: "c288" });
    });
  });
}

function forkRefusalCases(store: Store, backend: ContractBackend): void {
  it("refuses every failed check with its code and field, writing nothing", async () => {
    const small: Strategy = { ...window20, maxStored: 3 };
    await store.append(cmd({ strategy: small, messages: numbered(5) }));
    await store.append(cmd({ threadId: "taken", messages: numbered(2) }));
    const t0 = Date.now();
    await store.append(
      cmd({ threadId: "old", messages: numbered(2), ttlMs: 1000, now: t0 - 5000 }),
    );
    const head = await store.headCursor("ns");
    const ids = await store.listThreads("ns", "", 100);
    const before = await Promise.all(ids.map((id) => store.read("ns", id)));
    const r = { requestId: "r", requestHash: "h" };
    const now = t0;
    await refused(
      store.fork(forkCmd("f", { ...r, now, threadId: "none" })),
      "not_found",
      "thread_id",
    );
    await refused(
      store.fork(forkCmd("f", { ...r, now, namespace: "x" })),
      "not_found",
      "thread_id",
    );
    await refused(
      store.fork(forkCmd("f", { ...r, now, threadId: "old" })),
      "not_found",
      "thread_id",
    );
    await refused(store.fork(forkCmd("taken", { ...r, now })), "already_exists", "new_thread_id");
    await refused(
      store.fork(forkCmd("f", { ...r, now, expectedLastSeq: 4 })),
      "aborted",
      "expected_last_seq",
    );
    await refused(store.fork(forkCmd("f", { ...r, now, atSeq: 6 })), "out_of_range", "at_seq");
    await refused(
      store.fork(forkCmd("f", { ...r, now, atSeq: 1 })),
      "failed_precondition",
      "at_seq",
    );
    expect(await store.readEvents("ns", head, 10)).toEqual([]);
    expect(await store.listThreads("ns", "", 100)).toEqual(ids);
    expect(await Promise.all(ids.map((id) => store.read("ns", id)))).toEqual(before);
    expect(await store.listThreads("ns", "", 10, undefined, "t")).toEqual([]);
    // A refused Fork recorded nothing: its id is free for one that passes.
    const ok = await store.fork(forkCmd("f", { ...r, now, atSeq: 2, requestHash: "other" }));
    expect(ok).toMatchObject({ replayed: false, sharedCount: 0 });
    expect(seqsOf(await store.read("ns", "f"))).toEqual([]);
  });

  quotaCase(backend)("leaves the namespace usage as it was after refused Forks", async () => {
    const q = await backend.open({ maxThreadsPerNamespace: 3, maxMessagesPerNamespace: 20 });
    try {
      await q.append(cmd({ messages: numbered(5) }));
      await q.append(cmd({ threadId: "taken", messages: numbered(2) }));
      await refused(q.fork(forkCmd("taken")), "already_exists", "new_thread_id");
      await refused(q.fork(forkCmd("f", { atSeq: 9 })), "out_of_range", "at_seq");
      await expectMessageRoom(q, 13);
    } finally {
      await q.close();
    }
  });

  it("removes an expired thread of the new id first, then forks", async () => {
    const t0 = Date.now();
    await store.append(cmd({ messages: numbered(3), now: t0 }));
    await store.append(cmd({ threadId: "f", messages: numbered(9), ttlMs: 1000, now: t0 - 5000 }));
    const head = await store.headCursor("ns");
    const r = await store.fork(forkCmd("f", { now: t0 }));
    expect(r.thread.lastSeq).toBe(3);
    expect(seqsOf(await store.read("ns", "f"))).toEqual([1, 2, 3]);
    const events = await store.readEvents("ns", head, 10);
    expect(events.map((e) => [e.type, e.threadId])).toEqual([
      ["thread_cleared", "f"],
      ["thread_forked", "f"],
    ]);
  });
}

function forkReplayCases(store: Store): void {
  it("replays a request id with the fork's current state, even after the parent changed", async () => {
    await parentOf(store, 10);
    const r = { requestId: "r", requestHash: "h" };
    const first = await store.fork(forkCmd("f", { ...r, atSeq: 8 }));
    await store.append(cmd({ messages: [user("p")], now: 2500 }));
    await store.append(cmd({ threadId: "f", messages: [user("q")], now: 2600 }));
    const again = await store.fork(forkCmd("f", { ...r, atSeq: 8, now: 3000 }));
    expect(again).toEqual({
      thread: await store.getThread("ns", "f"),
      sharedCount: first.sharedCount,
      summaryInherited: false,
      replayed: true,
    });
    expect(again.thread.lastSeq).toBe(9);
    await store.clear("ns", "t", 3100);
    expect((await store.fork(forkCmd("f", { ...r, atSeq: 8 }))).replayed).toBe(true);
    await refused(
      store.fork(forkCmd("f", { ...r, requestHash: "other" })),
      "invalid_argument",
      "request_id",
    );
    // A Rewind of the fork to 0 does not forget the Fork's record (its last seq is 0).
    await store.rewind(rewindCmd(0, { threadId: "f" }));
    expect((await store.fork(forkCmd("f", { ...r, atSeq: 8 }))).replayed).toBe(true);
  });

  it("forks again on a retry after the fork was cleared", async () => {
    await parentOf(store, 10);
    const r = { requestId: "r", requestHash: "h" };
    await store.fork(forkCmd("f", { ...r, atSeq: 4 }));
    await store.clear("ns", "f", 2500);
    await store.append(cmd({ messages: [user("p")], now: 2600 }));
    const retry = await store.fork(forkCmd("f", { ...r, now: 3000 }));
    expect(retry).toMatchObject({ replayed: false, sharedCount: 11 });
    expect(retry.thread).toMatchObject({ lastSeq: 11, createTime: 3000 });
    expect(seqsOf(await store.read("ns", "f"))).toHaveLength(11);
  });
}

function forkIndependenceCases(store: Store): void {
  for (const { path, n } of PATHS) {
    const at = n - 5;
    it(`Adds on both sides reuse seq at_seq+1 with their own messages (${path} path)`, async () => {
      await parentOf(store, n);
      await store.fork(forkCmd("f", { atSeq: at }));
      await store.append(cmd({ threadId: "f", messages: [user("fork")], now: 3000 }));
      await store.append(cmd({ messages: [user("parent")], now: 3100 }));
      expect(triples(await store.read("ns", "f"))).toEqual([
        ...expected(1, at, n),
        [at + 1, "fork", 3000],
      ]);
      expect(triples(await store.read("ns", "t"))).toEqual([
        ...expected(1, n, n),
        [n + 1, "parent", 3100],
      ]);
    });

    it(`a Rewind of the parent below at_seq and new Adds leave the fork whole (${path} path)`, async () => {
      await parentOf(store, n);
      await store.fork(forkCmd("f", { atSeq: at }));
      await store.rewind(rewindCmd(3));
      await store.append(cmd({ messages: [user("again"), user("more")], now: 3000 }));
      expect(triples(await store.read("ns", "t"))).toEqual([
        ...expected(1, 3, n),
        [4, "again", 3000],
        [5, "more", 3000],
      ]);
      expect(triples(await store.read("ns", "f"))).toEqual(expected(1, at, n));
      await store.rewind(rewindCmd(0));
      expect(triples(await store.read("ns", "f"))).toEqual(expected(1, at, n));
    });

    it(`a Rewind of the fork below at_seq leaves the parent whole (${path} path)`, async () => {
      await parentOf(store, n);
      await store.fork(forkCmd("f", { atSeq: at }));
      const r = await store.rewind(rewindCmd(2, { threadId: "f" }));
      expect(r.removedCount).toBe(at - 2);
      await store.append(cmd({ threadId: "f", messages: [user("x")], now: 3000 }));
      expect(triples(await store.read("ns", "f"))).toEqual([...expected(1, 2, n), [3, "x", 3000]]);
      expect(triples(await store.read("ns", "t"))).toEqual(expected(1, n, n));
    });

    it(`the parent's trims and folds past the fork's floor leave the fork whole (${path} path)`, async () => {
      await parentOf(store, n, { ...window20, maxStored: n });
      await store.fork(forkCmd("f"));
      await store.append(
        cmd({ messages: numbered(4).map((m) => user(`p${m.content}`)), now: 3000 }),
      );
      expect(seqsOf(await store.read("ns", "t"))?.[0]).toBe(5);
      expect(triples(await store.read("ns", "f"))).toEqual(expected(1, n, n));

      await store.append(
        cmd({ threadId: "s", strategy: { ...summary, maxStored: n - 5 }, messages: numbered(n) }),
      );
      await store.fork(forkCmd("g", { threadId: "s" }));
      await fold(store, "s", n - 2);
      expect(seqsOf(await store.read("ns", "s"))?.[0]).toBe(6);
      expect(seqsOf(await store.read("ns", "g"))).toEqual(expected(1, n, n).map((e) => e[0]));
    });
  }

  it("forks a fork of a fork, each holding its own view", async () => {
    await parentOf(store, 200);
    await store.fork(forkCmd("f1", { atSeq: 150 }));
    await store.append(
      cmd({ threadId: "f1", messages: numbered(10).map((m) => user(`a${m.content}`)), now: 3000 }),
    );
    await store.fork(forkCmd("f2", { threadId: "f1", atSeq: 155 }));
    await store.append(
      cmd({ threadId: "f2", messages: numbered(200).map((m) => user(`b${m.content}`)), now: 4000 }),
    );
    const f3 = await store.fork(forkCmd("f3", { threadId: "f2", atSeq: 300 }));
    expect(f3).toMatchObject({ sharedCount: 300 });
    expect(f3.thread.parent).toMatchObject({ threadId: "f2", atSeq: 300 });
    const a = (k: number) => [150 + k, `a${k}`, 3000];
    const b = (k: number) => [155 + k, `b${k}`, 4000];
    const f2Expected = [
      ...expected(1, 150, 200),
      ...[1, 2, 3, 4, 5].map(a),
      ...Array.from({ length: 200 }, (_, i) => b(i + 1)),
    ];
    expect(triples(await store.read("ns", "f2"))).toEqual(f2Expected);
    expect(triples(await store.read("ns", "f3"))).toEqual(f2Expected.slice(0, 300));
    expect(triples(await store.read("ns", "f1"))).toEqual([
      ...expected(1, 150, 200),
      ...Array.from({ length: 10 }, (_, i) => a(i + 1)),
    ]);
    expect(triples(await store.read("ns", "t"))).toEqual(expected(1, 200, 200));
    // Windowed reads of a shared thread return the newest messages as a full read does.
    const windowed = await store.read("ns", "f3", { limit: 5 });
    expect(triples(windowed)?.slice(-5)).toEqual(f2Expected.slice(295, 300));
  });
}

function forkClearCases(store: Store, backend: ContractBackend): void {
  it("a Clear or the expiry of the parent leaves its forks readable", async () => {
    const t0 = Date.now();
    await store.append(cmd({ messages: numbered(200), ttlMs: 60_000, now: t0 }));
    await store.fork(forkCmd("f1", { ttlMs: 0, now: t0 }));
    await store.fork(forkCmd("f2", { ttlMs: 0, atSeq: 100, now: t0 }));
    expect(await store.sweepExpired(t0 + 60_000, 10)).toBe(1);
    expect(await store.getThread("ns", "t")).toBeUndefined();
    expect(seqsOf(await store.read("ns", "f1"))).toHaveLength(200);
    expect((await store.read("ns", "f2"))?.messages.map((m) => m.content)).toEqual(
      numbered(100).map((m) => m.content),
    );
    expect((await store.getThread("ns", "f1"))?.parent?.threadId).toBe("t");
    await store.clear("ns", "f1", t0);
    expect(seqsOf(await store.read("ns", "f2"))).toHaveLength(100);
  });

  quotaCase(backend)(
    "gives the whole namespace usage back once the parent and every fork are cleared",
    async () => {
      const limits = {
        maxThreadsPerNamespace: 5,
        maxMessagesPerNamespace: 250,
        maxBytesPerNamespace: 5000,
      };
      const q = await backend.open(limits);
      try {
        await q.append(cmd({ messages: numbered(200) }));
        await q.fork(forkCmd("f1"));
        await q.fork(forkCmd("f2", { atSeq: 100 }));
        await q.append(cmd({ messages: numbered(10), now: 2500 }));
        await q.fork(forkCmd("f3", { atSeq: 205 }));
        await q.fork(
          forkCmd("f4", { threadId: "f2", atSeq: 50, strategy: { ...window20, maxStored: 10 } }),
        );
        await q.append(cmd({ threadId: "f4", messages: numbered(3), now: 2600 }));
        await q.rewind(rewindCmd(150, { threadId: "f1" }));
        for (const id of ["t", "f2", "f1", "f4", "f3"])
          expect(await q.clear("ns", id, 3000)).toBe(true);
        // Every message and byte is free again: exactly the quota fits.
        const fill = [...numbered(249).map(() => user("x")), user("y".repeat(5000 - 249))];
        await q.append(cmd({ threadId: "p", messages: fill }));
        await rejects(
          q.append(cmd({ threadId: "p", messages: [user("x")] })),
          "resource_exhausted",
        );
        for (const id of ["a", "b", "c", "d"]) await q.append(cmd({ threadId: id, messages: [] }));
        await rejects(q.append(cmd({ threadId: "e", messages: [] })), "resource_exhausted");
      } finally {
        await q.close();
      }
    },
  );

  it("clears all of a namespace with forks, leaving nothing", async () => {
    await parentOf(store, 200);
    await store.fork(forkCmd("f1"));
    await store.fork(forkCmd("f2", { atSeq: 20 }));
    expect(await store.clearAll("ns", 3000)).toBe(3);
    expect(await store.listThreads("ns", "", 10)).toEqual([]);
    expect(await store.listThreads("ns", "", 10, undefined, "t")).toEqual([]);
  });
}

function forkQuotaCases(backend: ContractBackend): void {
  quotaCase(backend)(
    "refuses a fork at the thread quota; charges copied messages, not shared ones",
    async () => {
      const q = await backend.open({ maxThreadsPerNamespace: 3, maxMessagesPerNamespace: 250 });
      try {
        await q.append(cmd({ messages: numbered(200) }));
        // 200 shared messages are not charged again.
        await q.fork(forkCmd("f1"));
        await q.append(cmd({ messages: numbered(40), now: 2500 }));
        // A fork at 240 would copy 40 messages of the parent's new head: 280.
        await rejects(q.fork(forkCmd("f2", { atSeq: 240 })), "resource_exhausted");
        expect(await q.getThread("ns", "f2")).toBeUndefined();
        await q.fork(forkCmd("f2", { atSeq: 210 }));
        const head = await q.headCursor("ns");
        await rejects(q.fork(forkCmd("f3", { atSeq: 10 })), "resource_exhausted");
        expect(await q.readEvents("ns", head, 10)).toEqual([]);
        expect(await q.listThreads("ns", "", 10)).toEqual(["f1", "f2", "t"]);
        await q.clear("ns", "f2", 3000);
        await expectMessageRoom(q, 10);
      } finally {
        await q.close();
      }
    },
  );
}

function forkEventAndListCases(store: Store): void {
  it("stores an imported thread's parent as given, and lists it among that parent's forks", async () => {
    const parent = { threadId: "gone", atSeq: 6, forkTime: 300, parentCreateTime: 50 };
    expect(await store.importThread(importCommand({ parent }))).toBe(true);
    expect((await store.getThread("ns", "imp"))?.parent).toEqual(parent);
    expect((await store.read("ns", "imp"))?.thread.parent).toEqual(parent);
    expect(await store.listThreads("ns", "", 10, undefined, "gone")).toEqual(["imp"]);
  });

  it("logs thread_forked on the fork only, before the fork's later messages_added", async () => {
    await store.append(cmd({ strategy: summary, messages: numbered(6) }));
    await fold(store, "t", 2);
    const head = await store.headCursor("ns");
    await store.fork(forkCmd("f", { atSeq: 4 }));
    await store.append(cmd({ threadId: "f", messages: [user("x")], now: 3000 }));
    const events = (await store.readEvents("ns", head, 10)).map(({ cursor: _, ...e }) => e);
    expect(events).toEqual([
      {
        type: "thread_forked",
        threadId: "f",
        time: 2000,
        parentThreadId: "t",
        atSeq: 4,
        sharedCount: 4,
        summaryInherited: true,
      },
      { type: "messages_added", threadId: "f", time: 3000, firstSeq: 5, lastSeq: 5 },
    ]);
  });

  it("lists a thread's direct forks, paged, with labels, across the parent's Clear", async () => {
    await store.append(cmd({ messages: numbered(3) }));
    await store.append(cmd({ threadId: "other", messages: numbered(1) }));
    for (const id of ["f5", "f1", "f3", "f2", "f4"]) {
      await store.fork(forkCmd(id, { labels: { k: id === "f2" || id === "f4" ? "a" : "b" } }));
    }
    await store.fork(forkCmd("g", { threadId: "f1" }));
    await store.fork(forkCmd("o", { threadId: "other" }));
    expect(await store.listThreads("ns", "", 2, undefined, "t")).toEqual(["f1", "f2"]);
    expect(await store.listThreads("ns", "f2", 2, undefined, "t")).toEqual(["f3", "f4"]);
    expect(await store.listThreads("ns", "f4", 2, undefined, "t")).toEqual(["f5"]);
    expect(await store.listThreads("ns", "", 10, { k: "a" }, "t")).toEqual(["f2", "f4"]);
    expect(await store.listThreads("ns", "", 10, undefined, "f1")).toEqual(["g"]);
    expect(await store.listThreads("ns", "", 10, undefined, "f2")).toEqual([]);
    expect(await store.listThreads("ns", "", 10, undefined, "none")).toEqual([]);
    await store.clear("ns", "t", 3000);
    expect(await store.listThreads("ns", "", 10, undefined, "t")).toEqual([
      "f1",
      "f2",
      "f3",
      "f4",
      "f5",
    ]);
    await store.append(cmd({ messages: numbered(2), now: 4000 }));
    await store.fork(forkCmd("f0", { now: 4000 }));
    await store.clear("ns", "f3", 4000);
    expect(await store.listThreads("ns", "", 10, undefined, "t")).toEqual([
      "f0",
      "f1",
      "f2",
      "f4",
      "f5",
    ]);
    expect((await store.getThread("ns", "f0"))?.parent?.parentCreateTime).toBe(4000);
    expect((await store.getThread("ns", "f1"))?.parent?.parentCreateTime).toBe(1000);
    expect(await store.listThreads("ns", "", 10, { k: "a" }, "t")).toEqual(["f2", "f4"]);
  });
}
