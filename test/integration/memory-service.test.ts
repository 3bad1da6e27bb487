import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { EventType, Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { type AppHarness, DRIVERS, startAppHarness } from "./app-harness.js";
import { CallFailed, type Driver } from "./drivers.js";

const user = (content: string) => ({ role: Role.USER, content });
const users = (...c: string[]) => c.map(user);
const texts = (r: { messages: { content: string }[] }) => r.messages.map((m) => m.content);
let threadCounter = 0;
/** A fresh thread id per case: the cases share one server per transport. */
const fresh = (label: string) => `${label}-${++threadCounter}`;

async function failure(p: Promise<unknown>): Promise<CallFailed> {
  try {
    await p;
  } catch (err) {
    if (err instanceof CallFailed) return err;
    throw err;
  }
  throw new Error("expected the call to fail");
}

describe.each(DRIVERS)("MemoryService end to end over %s", (_name, makeDriver) => {
  let h: AppHarness;
  let c: Driver;
  beforeAll(async () => {
    h = await startAppHarness(["--event-retention", "50", "--progress-interval-ms", "200"]);
    c = makeDriver(h.app);
  });
  afterAll(async () => {
    c.close();
    await h.close();
  });
  afterEach(() => {
    h.llm.requests.length = 0;
  });

  it("reproduces the original's window and buffer examples", async () => {
    const w = fresh("w");
    await c.add({
      threadId: w,
      strategy: { kind: { case: "window", value: { window: 2 } } },
      messages: users("one", "two", "three"),
    });
    expect(texts(await c.get({ threadId: w }))).toEqual(["two", "three"]);
    const a = fresh("a");
    await c.add({
      threadId: a,
      strategy: { kind: { case: "buffer", value: {} } },
      messages: users("hi"),
    });
    expect(texts(await c.get({ threadId: a }))).toEqual(["hi"]);
    const none = await c.get({ threadId: fresh("b") });
    expect(none.messages).toEqual([]);
    expect(none.thread).toBeUndefined();
  });

  it("reproduces the original's summary example with a model over HTTP", async () => {
    const t = fresh("s");
    h.llm.push({ reply: "User greeted twice." });
    await c.add({
      threadId: t,
      strategy: {
        kind: { case: "summary", value: { window: 2, summarizeEvery: 2, model: "openai" } },
      },
      messages: users(...[0, 1, 2, 3, 4, 5].map((i) => `msg ${i}`)),
    });
    const r = await c.get({ threadId: t });
    expect(r.messages[0]?.role).toBe(Role.SYSTEM);
    expect(texts(r)).toEqual([
      "Summary of the earlier conversation:\nUser greeted twice.",
      "msg 4",
      "msg 5",
    ]);
    expect(r.summary).toBe("User greeted twice.");
    expect(h.llm.requests).toHaveLength(1);
  });

  it("uses the default thread and keeps tool-call pairs together in a window", async () => {
    await c.clear({ threadId: "" });
    await c.add({
      strategy: { kind: { case: "window", value: { window: 2 } } },
      messages: [
        user("weather in Oslo and Rome?"),
        {
          role: Role.ASSISTANT,
          toolCalls: [
            { id: "c1", name: "weather", arguments: '{"city":"Oslo"}' },
            { id: "c2", name: "weather", arguments: '{"city":"Rome"}' },
          ],
        },
        { role: Role.TOOL, toolCallId: "c1", content: "rain" },
        { role: Role.TOOL, toolCallId: "c2", content: "sun" },
      ],
    });
    const r = await c.get({ threadId: "default" });
    expect(r.thread?.threadId).toBe("default");
    expect(r.messages.map((m) => m.role)).toEqual([Role.ASSISTANT, Role.TOOL, Role.TOOL]);
    expect(r.messages.map((m) => m.seq)).toEqual([2n, 3n, 4n]);
    expect(r.messages[0]?.toolCalls.map((t) => t.id)).toEqual(["c1", "c2"]);
  });

  it("answers bad input with INVALID_ARGUMENT naming the field, and stores nothing", async () => {
    const t = fresh("bad");
    const e = await failure(c.add({ threadId: t, messages: [user("ok"), { content: "no role" }] }));
    expect(e.code).toBe("INVALID_ARGUMENT");
    expect(e.message).toContain("messages[1].role");
    expect((await c.get({ threadId: t })).thread).toBeUndefined();
    const w0 = await failure(
      c.add({ threadId: t, strategy: { kind: { case: "window", value: { window: 0 } } } }),
    );
    expect(w0.message).toContain("strategy.window.window");
    const model = await failure(
      c.add({ threadId: t, strategy: { kind: { case: "summary", value: { model: "nope" } } } }),
    );
    expect(model.code).toBe("INVALID_ARGUMENT");
    expect(model.message).toContain("strategy.summary.model");
    const long = await failure(c.get({ threadId: "x".repeat(300) }));
    expect(long.message).toContain("thread_id");
    const all = await failure(c.clear({ threadId: t, all: true }));
    expect(all.code).toBe("INVALID_ARGUMENT");
  });

  it("maps strategy mismatch, expected_last_seq and retries to their codes", async () => {
    const t = fresh("cc");
    await c.add({
      threadId: t,
      strategy: { kind: { case: "window", value: { window: 3 } } },
      messages: users("a"),
      requestId: "r1",
    });
    const retry = await c.add({
      threadId: t,
      strategy: { kind: { case: "window", value: { window: 3 } } },
      messages: users("a"),
      requestId: "r1",
    });
    expect(retry.lastSeq).toBe(1n);
    expect(
      (await failure(c.add({ threadId: t, messages: users("other"), requestId: "r1" }))).code,
    ).toBe("INVALID_ARGUMENT");
    expect(
      (
        await failure(
          c.add({ threadId: t, strategy: { kind: { case: "window", value: { window: 4 } } } }),
        )
      ).code,
    ).toBe("FAILED_PRECONDITION");
    expect(
      (await failure(c.add({ threadId: t, messages: users("b"), expectedLastSeq: 7n }))).code,
    ).toBe("ABORTED");
    const ok = await c.add({ threadId: t, messages: users("b"), expectedLastSeq: 1n });
    expect(ok.lastSeq).toBe(2n);
  });

  it("lists threads sorted and paginated", async () => {
    const prefix = fresh("list");
    for (const s of ["c", "a", "b"])
      await c.add({ threadId: `${prefix}-${s}`, messages: users("m") });
    const all: string[] = [];
    let token = "";
    do {
      const page = await c.listThreads({ pageSize: 2, pageToken: token });
      all.push(...page.threadIds);
      token = page.nextPageToken;
    } while (token !== "");
    expect(all).toEqual([...all].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y))));
    expect(all.filter((id) => id.startsWith(prefix))).toEqual([
      `${prefix}-a`,
      `${prefix}-b`,
      `${prefix}-c`,
    ]);
  });

  it("streams Watch events and resumes exactly after a cancelled stream", async () => {
    const t = fresh("watch");
    const w = c.watch({ threadIds: [t] });
    // Progress arrives once the stream is up, so Adds after it cannot be missed.
    expect((await w.next()).event.case).toBe("progress");
    for (const m of ["1", "2", "3"]) await c.add({ threadId: t, messages: users(m) });
    const first = await w.next();
    const second = await w.next();
    expect(first.event).toMatchObject({ case: "messagesAdded", value: { firstSeq: 1n } });
    expect(second.event).toMatchObject({ case: "messagesAdded", value: { firstSeq: 2n } });
    w.cancel();
    await c.clear({ threadId: t });
    const resumed = c.watch({ threadIds: [t], resumeToken: second.resumeToken });
    const third = await resumed.next();
    expect(third.event).toMatchObject({ case: "messagesAdded", value: { firstSeq: 3n } });
    expect((await resumed.next()).event.case).toBe("threadCleared");
    resumed.cancel();
  });

  it("filters Watch by event type and sends summary updates", async () => {
    const t = fresh("sw");
    const w = c.watch({ threadIds: [t], eventTypes: [EventType.SUMMARY_UPDATED] });
    expect((await w.next()).event.case).toBe("progress");
    h.llm.push({ reply: "folded" });
    await c.add({
      threadId: t,
      strategy: {
        kind: { case: "summary", value: { window: 1, summarizeEvery: 1, model: "openai" } },
      },
      messages: users("a", "b"),
    });
    let e = await w.next();
    while (e.event.case === "progress") e = await w.next();
    expect(e.event).toMatchObject({
      case: "summaryUpdated",
      value: { summary: "folded", summarizedThroughSeq: 1n, foldedCount: 1 },
    });
    w.cancel();
  });

  it("refuses a malformed resume token and one older than the retained history", async () => {
    const bad = c.watch({ resumeToken: "not-a-token" });
    expect((await failure(bad.next())).code).toBe("INVALID_ARGUMENT");
    const t = fresh("old");
    const w = c.watch({ threadIds: [t] });
    expect((await w.next()).event.case).toBe("progress");
    await c.add({ threadId: t, messages: users("x") });
    const token = (await w.next()).resumeToken;
    w.cancel();
    // The store trims its log in chunks: it keeps at least --event-retention events.
    for (let i = 0; i < 150; i++) await c.add({ threadId: t, messages: users(`${i}`) });
    const stale = c.watch({ resumeToken: token });
    expect((await failure(stale.next())).code).toBe("OUT_OF_RANGE");
  });

  it("answers a Get whose fold is slow before the deadline, degraded, and honours short deadlines", async () => {
    const t = fresh("slow");
    // The model holds its reply until the Get is answered: the fold is
    // running throughout, however slow the machine.
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    h.llm.push({ reply: "late", until: held });
    await c.add({
      threadId: t,
      strategy: {
        kind: { case: "summary", value: { window: 1, summarizeEvery: 1, model: "openai" } },
      },
      messages: users("a", "b", "c"),
    });
    // An answer at all is the proof: past the deadline the call would fail.
    const r = await c.get({ threadId: t }, { timeoutMs: 1000 }).finally(release);
    expect(r.degraded).toBe(true);
    expect(texts(r)).toEqual(["c"]);
    await vi.waitFor(async () => expect((await c.get({ threadId: t })).summary).toBe("late"), {
      timeout: 10_000,
      interval: 50,
    });
  });
});

describe("shutdown", () => {
  it.each(DRIVERS)(
    "ends open Watch streams with UNAVAILABLE over %s",
    async (_name, makeDriver) => {
      const h = await startAppHarness(["--progress-interval-ms", "100"]);
      const c = makeDriver(h.app);
      try {
        const w = c.watch({});
        // Over HTTP/2 a later Add can overtake the Watch: wait until the stream is up.
        expect((await w.next()).event.case).toBe("progress");
        await c.add({ messages: users("x") });
        expect((await w.next()).event.case).toBe("messagesAdded");
        const stopping = h.close();
        expect((await failure(w.next())).code).toBe("UNAVAILABLE");
        await stopping;
      } finally {
        c.close();
      }
    },
  );
});
