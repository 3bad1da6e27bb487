import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import {
  EventType,
  ListThreadsRequestSchema,
  Role,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/store.js";
import { type AppHarness, DRIVERS, startAppHarness } from "../integration/app-harness.js";
import { CallFailed, type Driver } from "../integration/drivers.js";
import { addReq, startHarness } from "../support/service-harness.js";

type ForkInit = Parameters<Driver["fork"]>[0];

const users = (...c: string[]) => c.map((content) => ({ role: Role.USER, content }));
const texts = (r: { messages: { content: string }[] }) => r.messages.map((m) => m.content);
const SUMMARY = (window: number, every: number) => ({
  kind: { case: "summary" as const, value: { window, summarizeEvery: every, model: "openai" } },
});
let counter = 0;
/** A fresh thread id per case: the cases share one server per transport. */
const fresh = (label: string) => `${label}-${++counter}`;

async function failure(p: Promise<unknown>): Promise<CallFailed> {
  try {
    await p;
  } catch (err) {
    if (err instanceof CallFailed) return err;
    throw err;
  }
  throw new Error("expected the call to fail");
}

// The memory store runs behind the app by default; gRPC (grpc-js) and the
// Connect port's JSON protocol cover both transports' handlers.
const TRANSPORTS = DRIVERS.filter(([name]) => name === "grpc" || name === "connect-json-http1");

describe.each(TRANSPORTS)("Fork over %s", (_name, makeDriver) => {
  let h: AppHarness;
  let c: Driver;
  beforeAll(async () => {
    h = await startAppHarness(["--progress-interval-ms", "200"]);
    c = makeDriver(h.app);
  });
  afterAll(async () => {
    c.close();
    await h.close();
  });

  /** Expects INVALID_ARGUMENT on `field` and that no thread was created. */
  async function refused(req: ForkInit, field: string, code = "INVALID_ARGUMENT") {
    const before = (await c.listThreads({ pageSize: 1000 })).threadIds;
    const e = await failure(c.fork(req));
    expect(e.code).toBe(code);
    expect(e.message.startsWith(`${code}: ${field}:`), e.message).toBe(true);
    expect((await c.listThreads({ pageSize: 1000 })).threadIds).toEqual(before);
    return e;
  }

  it("refuses each malformed field, in the documented order, creating nothing", async () => {
    const p = fresh("p");
    await c.add({ threadId: p, messages: users("one", "two") });
    // Every field bad at once; each fix reveals the next check (docs/forks.md 1.3).
    const req: ForkInit = {
      threadId: "x".repeat(257),
      newThreadId: "bad\u0001id",
      requestId: "r".repeat(129),
      atSeq: 2n ** 60n,
      expectedLastSeq: 2n ** 60n,
      strategy: { kind: { case: "summary", value: { model: "nope" } } },
      labels: { "a=b": "v" },
      ttl: { seconds: 1n, nanos: 5 },
    };
    const steps: [string, () => void][] = [
      ["thread_id", () => Object.assign(req, { threadId: p })],
      ["new_thread_id", () => Object.assign(req, { newThreadId: "" })],
      ["new_thread_id", () => Object.assign(req, { newThreadId: p })],
      ["new_thread_id", () => Object.assign(req, { newThreadId: fresh("f") })],
      ["request_id", () => Object.assign(req, { requestId: "" })],
      ["at_seq", () => Object.assign(req, { atSeq: 1n })],
      ["expected_last_seq", () => Object.assign(req, { expectedLastSeq: undefined })],
      ["strategy.summary.model", () => Object.assign(req, { strategy: undefined })],
      ['labels["a=b"]', () => Object.assign(req, { labels: {} })],
      ["ttl", () => Object.assign(req, { ttl: undefined })],
    ];
    const messages: string[] = [];
    for (const [field, fix] of steps) {
      messages.push((await refused(req, field)).message);
      fix();
    }
    expect(messages.slice(1, 4)).toEqual([
      "INVALID_ARGUMENT: new_thread_id: must not contain control characters",
      "INVALID_ARGUMENT: new_thread_id: is required",
      "INVALID_ARGUMENT: new_thread_id: must differ from thread_id",
    ]);
    expect((await c.fork(req)).thread?.lastSeq).toBe(1n);
  });

  it('treats an empty thread_id as "default", so forking it to "default" is refused', async () => {
    await c.add({ threadId: "", messages: users("d") });
    await refused({ threadId: "", newThreadId: "default" }, "new_thread_id");
  });

  it("answers the store's refusals with their codes: NOT_FOUND, ALREADY_EXISTS, ABORTED, OUT_OF_RANGE", async () => {
    const p = fresh("p");
    const taken = fresh("taken");
    await c.add({ threadId: p, messages: users("one", "two") });
    await c.add({ threadId: taken, messages: users("mine") });
    await refused({ threadId: fresh("none"), newThreadId: fresh("f") }, "thread_id", "NOT_FOUND");
    await refused({ threadId: p, newThreadId: taken }, "new_thread_id", "ALREADY_EXISTS");
    await refused(
      { threadId: p, newThreadId: fresh("f"), expectedLastSeq: 1n },
      "expected_last_seq",
      "ABORTED",
    );
    await refused({ threadId: p, newThreadId: fresh("f"), atSeq: 3n }, "at_seq", "OUT_OF_RANGE");
  });

  it("creates the fork with its origin, shares the messages, and leaves the parent alone", async () => {
    const p = fresh("p");
    const f = fresh("f");
    const added = await c.add({
      threadId: p,
      messages: users("one", "two", "three"),
      labels: { team: "a" },
    });
    const parentCreate = added.thread?.createTime;
    const r = await c.fork({ threadId: p, newThreadId: f, atSeq: 2n, labels: { team: "b" } });
    expect(r.sharedCount).toBe(2);
    expect(r.summaryInherited).toBe(false);
    expect(r.thread).toMatchObject({ threadId: f, lastSeq: 2n, labels: { team: "b" } });
    expect(r.thread?.parent).toMatchObject({ threadId: p, atSeq: 2n });
    expect(r.thread?.parent?.parentCreateTime).toEqual(parentCreate);
    expect(r.thread?.parent?.forkTime).toEqual(r.thread?.createTime);
    // Get and Add answer with the origin too (their responses are hand-encoded).
    const got = await c.get({ threadId: f });
    expect(texts(got)).toEqual(["one", "two"]);
    expect(got.thread?.parent?.threadId).toBe(p);
    const more = await c.add({ threadId: f, messages: users("fork's own") });
    expect(more.thread?.parent?.atSeq).toBe(2n);
    expect(texts(await c.get({ threadId: f }))).toEqual(["one", "two", "fork's own"]);
    const parent = await c.get({ threadId: p });
    expect(texts(parent)).toEqual(["one", "two", "three"]);
    expect(parent.thread?.parent).toBeUndefined();
    expect(parent.thread?.updateTime).toEqual(added.thread?.updateTime);
  });

  it("replays a retried request_id and refuses the id for another payload", async () => {
    const p = fresh("p");
    const f = fresh("f");
    await c.add({ threadId: p, messages: users("one", "two") });
    const first = await c.fork({ threadId: p, newThreadId: f, requestId: "r1" });
    await c.add({ threadId: p, messages: users("three") });
    const again = await c.fork({ threadId: p, newThreadId: f, requestId: "r1" });
    expect(again.thread?.lastSeq).toBe(2n);
    expect(again.sharedCount).toBe(first.sharedCount);
    const other = await failure(
      c.fork({ threadId: p, newThreadId: f, requestId: "r1", atSeq: 1n }),
    );
    expect(other.code).toBe("INVALID_ARGUMENT");
    expect(other.message.startsWith("INVALID_ARGUMENT: request_id:")).toBe(true);
  });

  it("delivers thread_forked to a Watch filtered on EVENT_TYPE_THREAD_FORKED", async () => {
    const p = fresh("p");
    const f = fresh("f");
    await c.add({ threadId: p, messages: users("one", "two", "three") });
    const w = c.watch({ threadIds: [f, p], eventTypes: [EventType.THREAD_FORKED] });
    expect((await w.next()).event.case).toBe("progress");
    await c.fork({ threadId: p, newThreadId: f, atSeq: 2n });
    let e = await w.next();
    while (e.event.case === "progress") e = await w.next();
    expect(e.threadId).toBe(f);
    expect(e.event).toEqual({
      case: "threadForked",
      value: expect.objectContaining({
        parentThreadId: p,
        atSeq: 2n,
        sharedCount: 2,
        summaryInherited: false,
      }),
    });
    w.cancel();
  });

  it("lists the direct forks of a thread (forks_of), with labels and include_threads", async () => {
    const p = fresh("p");
    const [f1, f2, g] = [`${p}-f1`, `${p}-f2`, `${p}-g`];
    await c.add({ threadId: p, messages: users("one", "two") });
    await c.fork({ threadId: p, newThreadId: f1, labels: { kind: "x" } });
    await c.fork({ threadId: p, newThreadId: f2, atSeq: 1n });
    await c.fork({ threadId: f1, newThreadId: g });
    expect((await c.listThreads({ forksOf: p })).threadIds).toEqual([f1, f2]);
    expect((await c.listThreads({ forksOf: f1 })).threadIds).toEqual([g]);
    expect((await c.listThreads({ forksOf: p, labels: { kind: "x" } })).threadIds).toEqual([f1]);
    const page = await c.listThreads({ forksOf: p, pageSize: 1, includeThreads: true });
    expect(page.threadIds).toEqual([f1]);
    expect(page.threads.map((t) => [t.threadId, t.parent?.threadId, t.lastSeq])).toEqual([
      [f1, p, 2n],
    ]);
    const next = await c.listThreads({
      forksOf: p,
      pageToken: page.nextPageToken,
      includeThreads: true,
    });
    expect(next.threads.map((t) => [t.threadId, t.parent?.atSeq])).toEqual([[f2, 1n]]);
    expect((await c.listThreads({ forksOf: p })).threads).toEqual([]);
    const bad = await failure(c.listThreads({ forksOf: "a\u0000b" }));
    expect(bad.code).toBe("INVALID_ARGUMENT");
    expect(bad.message.startsWith("INVALID_ARGUMENT: forks_of:")).toBe(true);
  });

  it("folds a summary fork anew when the parent's summary covers seqs past at_seq, inherits it otherwise", async () => {
    const p = fresh("sp");
    h.llm.push({ reply: "parent summary" });
    await c.add({
      threadId: p,
      strategy: SUMMARY(1, 1),
      messages: users("alpha", "bravo", "charlie", "delta"),
    });
    await vi.waitFor(
      async () => expect((await c.get({ threadId: p })).summary).toBe("parent summary"),
      { timeout: 10_000, interval: 50 },
    );
    const through = (await c.get({ threadId: p })).thread?.summarizedThroughSeq ?? 0n;
    expect(through).toBeGreaterThan(2n);
    const inherited = await c.fork({ threadId: p, newThreadId: fresh("keep"), atSeq: through });
    expect(inherited.summaryInherited).toBe(true);
    expect((await c.get({ threadId: inherited.thread?.threadId ?? "" })).summary).toBe(
      "parent summary",
    );
    const asked = h.llm.requests.length;
    h.llm.push({ reply: "fork summary" });
    const f = fresh("anew");
    const anew = await c.fork({ threadId: p, newThreadId: f, atSeq: 2n });
    expect(anew.summaryInherited).toBe(false);
    expect(anew.thread?.summarizedThroughSeq).toBe(0n);
    await vi.waitFor(
      async () => expect((await c.get({ threadId: f })).summary).toBe("fork summary"),
      { timeout: 10_000, interval: 50 },
    );
    // The fork's fold read the fork's own message (seq 1), not the parent's later ones.
    const folded = JSON.stringify(h.llm.requests[asked]?.body?.messages ?? []);
    expect(folded).toContain("user: alpha");
    expect(folded).not.toContain("charlie");
    expect((await c.get({ threadId: p })).summary).toBe("parent summary");
  });
});

describe("ListThreads include_threads", () => {
  it("leaves out a listed thread cleared before its read", async () => {
    const inner = createMemoryStore();
    // The listing names a thread that is gone by the time it is read.
    const store: Store = Object.assign(Object.create(inner) as Store, {
      listThreads: async () => ["gone", "kept"],
    });
    const h = await startHarness({ store });
    try {
      await h.service.add(addReq({ threadId: "kept", messages: users("x") }), h.ctx());
      const r = await h.service.listThreads(
        create(ListThreadsRequestSchema, { includeThreads: true }),
        h.ctx(),
      );
      expect(r.threadIds).toEqual(["gone", "kept"]);
      expect(r.threads.map((t) => t.threadId)).toEqual(["kept"]);
    } finally {
      await h.close();
    }
  });
});
