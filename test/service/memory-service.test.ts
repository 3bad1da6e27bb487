import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  ClearRequestSchema,
  ListThreadsRequestSchema,
  Role,
  ThreadSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { MemoryError } from "../../src/core/errors.js";
import { silentLogger } from "../../src/logger.js";
import { ServerMetrics } from "../../src/metrics.js";
import { createMemoryService } from "../../src/service/memory-service.js";
import { createOpenAiSummarizer } from "../../src/summarizer/openai.js";
import { createSummarizerRegistry } from "../../src/summarizer/registry.js";
import { metricSeries } from "../support/metric-series.js";
import {
  addReq,
  bufferStrategy,
  contents,
  getReq,
  type Harness,
  msg,
  startHarness,
  summaryStrategy,
  users,
  waitUntil,
  windowDefault,
  windowStrategy,
} from "../support/service-harness.js";

async function expectCode(p: Promise<unknown>, code: string, field?: string): Promise<MemoryError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(MemoryError);
    const e = err as MemoryError;
    expect(e.code).toBe(code);
    if (field !== undefined) {
      expect(e.field).toBe(field);
      expect(e.message.startsWith(`${field}:`)).toBe(true);
    }
    return e;
  }
  throw new Error(`expected ${code}`);
}

describe("MemoryService: the original module's documented examples", () => {
  let h: Harness;
  beforeEach(async () => {
    h = await startHarness();
  });
  afterEach(async () => h.close());

  it("WindowMemory(window=2): one, two, three -> two, three", async () => {
    await h.service.add(
      addReq({ strategy: windowStrategy(2), messages: users("one", "two", "three") }),
      h.ctx(),
    );
    expect(contents(await h.service.get(getReq(), h.ctx()))).toEqual(["two", "three"]);
  });

  it("WindowMemory(window=1): a, b -> b", async () => {
    await h.service.add(
      addReq({ strategy: windowStrategy(1), messages: users("a", "b") }),
      h.ctx(),
    );
    expect(contents(await h.service.get(getReq(), h.ctx()))).toEqual(["b"]);
  });

  it("BufferMemory: hi on thread a; thread b is empty, not an error", async () => {
    await h.service.add(
      addReq({ threadId: "a", strategy: bufferStrategy(), messages: users("hi") }),
      h.ctx(),
    );
    expect(contents(await h.service.get(getReq({ threadId: "a" }), h.ctx()))).toEqual(["hi"]);
    const b = await h.service.get(getReq({ threadId: "b" }), h.ctx());
    expect(b.messages).toEqual([]);
    expect(b.thread).toBeUndefined();
  });

  it("SummaryMemory(window=2, summarize_every=2): six messages -> summary, msg 4, msg 5", async () => {
    h.llm.push({ reply: "User greeted twice." });
    await h.service.add(
      addReq({
        strategy: summaryStrategy(2, 2),
        messages: users(...[0, 1, 2, 3, 4, 5].map((i) => `msg ${i}`)),
      }),
      h.ctx(),
    );
    const r = await h.service.get(getReq(), h.ctx());
    expect(r.messages[0]?.role).toBe(Role.SYSTEM);
    expect(r.messages[0]?.content).toBe(
      "Summary of the earlier conversation:\nUser greeted twice.",
    );
    expect(contents(r).slice(1)).toEqual(["msg 4", "msg 5"]);
    expect(r.summary).toBe("User greeted twice.");
    expect(r.thread?.summarizedThroughSeq).toBe(4n);
    expect(r.degraded).toBe(false);
    // One model call for the whole overflow, with the four folded messages in it.
    expect(h.llm.requests).toHaveLength(1);
    const prompt = JSON.stringify(h.llm.requests[0]?.body?.messages);
    for (const i of [0, 1, 2, 3]) expect(prompt).toContain(`msg ${i}`);
    expect(prompt).not.toContain("msg 4");
  });
});

describe("MemoryService: Add, Clear, ListThreads", () => {
  let h: Harness;
  beforeEach(async () => {
    h = await startHarness();
  });
  afterEach(async () => h.close());

  it("uses the default thread for an empty id and numbers messages from 1", async () => {
    const r = await h.service.add(addReq({ messages: users("a", "b") }), h.ctx());
    expect([r.firstSeq, r.lastSeq]).toEqual([1n, 2n]);
    expect(r.thread?.threadId).toBe("default");
    expect(r.thread?.strategy?.kind.case).toBe("window");
    const g = await h.service.get(getReq({ threadId: "default" }), h.ctx());
    expect(g.messages.map((m) => m.seq)).toEqual([1n, 2n]);
    expect(g.messages[0]?.createTime).toBeDefined();
  });

  it("keeps tool calls, names and metadata", async () => {
    await h.service.add(
      addReq({
        messages: [
          msg("assistant", "", {
            name: "bot",
            toolCalls: [{ id: "c1", name: "weather", arguments: '{"city":"Oslo"}' }],
            metadata: { k: "v" },
          }),
          msg("tool", "sunny", { toolCallId: "c1" }),
        ],
      }),
      h.ctx(),
    );
    const g = await h.service.get(getReq(), h.ctx());
    expect(g.messages[0]?.toolCalls[0]).toMatchObject({ id: "c1", name: "weather" });
    expect(g.messages[0]?.metadata).toEqual({ k: "v" });
    expect(g.messages[0]?.name).toBe("bot");
    expect(g.messages[1]?.toolCallId).toBe("c1");
  });

  it("refuses a different strategy unless replace_strategy, and keeps the messages", async () => {
    await h.service.add(addReq({ strategy: windowStrategy(5), messages: users("a") }), h.ctx());
    // Omitting the strategy on later Adds is fine.
    await h.service.add(addReq({ messages: users("b") }), h.ctx());
    const e = await expectCode(
      h.service.add(addReq({ strategy: windowStrategy(3), messages: users("c") }), h.ctx()),
      "failed_precondition",
    );
    expect(e.message).toContain("window=5");
    expect(e.message).toContain("window=3");
    const r = await h.service.add(
      addReq({ strategy: windowStrategy(1), replaceStrategy: true }),
      h.ctx(),
    );
    expect(r.thread?.strategy?.kind).toMatchObject({ case: "window", value: { window: 1 } });
    expect(contents(await h.service.get(getReq(), h.ctx()))).toEqual(["b"]);
    expect(contents(await h.service.get(getReq({ limit: 0 }), h.ctx()))).toEqual(["a", "b"]);
  });

  it("fails with ABORTED when expected_last_seq differs", async () => {
    await h.service.add(addReq({ messages: users("a"), expectedLastSeq: 0n }), h.ctx());
    await expectCode(
      h.service.add(addReq({ messages: users("b"), expectedLastSeq: 0n }), h.ctx()),
      "aborted",
    );
    const r = await h.service.add(addReq({ messages: users("b"), expectedLastSeq: 1n }), h.ctx());
    expect(r.lastSeq).toBe(2n);
  });

  it("stores nothing and creates no thread for an Add with no messages and no strategy", async () => {
    const none = await h.service.add(addReq({ threadId: "empty" }), h.ctx());
    expect(none.thread).toBeUndefined();
    expect([none.firstSeq, none.lastSeq]).toEqual([0n, 0n]);
    const list = await h.service.listThreads(create(ListThreadsRequestSchema), h.ctx());
    expect(list.threadIds).toEqual([]);
    expect((await h.service.get(getReq({ threadId: "empty" }), h.ctx())).thread).toBeUndefined();
    await expectCode(
      h.service.add(addReq({ threadId: "empty", expectedLastSeq: 1n }), h.ctx()),
      "aborted",
    );
    // An existing thread comes back unchanged; a strategy still creates a thread.
    await h.service.add(addReq({ threadId: "one", messages: users("a") }), h.ctx());
    const same = await h.service.add(addReq({ threadId: "one" }), h.ctx());
    expect([same.thread?.threadId, same.thread?.lastSeq, same.lastSeq]).toEqual(["one", 1n, 0n]);
    const withStrategy = await h.service.add(
      addReq({
        threadId: "set",
        strategy: { kind: { case: "buffer", value: { maxMessages: 0 } } },
      }),
      h.ctx(),
    );
    expect(withStrategy.thread?.threadId).toBe("set");
    const after = await h.service.listThreads(create(ListThreadsRequestSchema), h.ctx());
    expect(after.threadIds).toEqual(["one", "set"]);
  });

  it("answers a retried request_id with the first response and appends nothing", async () => {
    const req = addReq({ requestId: "turn-1", messages: users("a", "b") });
    const first = await h.service.add(req, h.ctx());
    await h.service.add(addReq({ messages: users("c") }), h.ctx());
    const again = await h.service.add(req, h.ctx());
    expect([again.firstSeq, again.lastSeq]).toEqual([first.firstSeq, first.lastSeq]);
    expect(contents(await h.service.get(getReq(), h.ctx()))).toEqual(["a", "b", "c"]);
    await expectCode(
      h.service.add(addReq({ requestId: "turn-1", messages: users("x") }), h.ctx()),
      "invalid_argument",
      "request_id",
    );
  });

  it.each([
    [
      "an unset role",
      addReq({ messages: [msg("user", "ok"), create_unset()] }),
      "messages[1].role",
    ],
    ["a thread id over 256 bytes", addReq({ threadId: "é".repeat(129) }), "thread_id"],
    ["a thread id with control characters", addReq({ threadId: "a\nb" }), "thread_id"],
    [
      "a tool message without tool_call_id",
      addReq({ messages: [msg("tool", "r")] }),
      "messages[0].tool_call_id",
    ],
    [
      "a tool call without id",
      addReq({
        messages: [msg("assistant", "", { toolCalls: [{ id: "", name: "f", arguments: "{}" }] })],
      }),
      "messages[0].tool_calls[0].id",
    ],
    ["window 0", addReq({ strategy: windowStrategy(0) }), "strategy.window.window"],
    [
      "an unknown summariser",
      addReq({ strategy: summaryStrategy(2, 2, "gpt-9") }),
      "strategy.summary.model",
    ],
    ["too many messages", addReq({ messages: users(...Array(1001).fill("x")) }), "messages"],
    ["a request id over 128 bytes", addReq({ requestId: "r".repeat(129) }), "request_id"],
  ])(
    "refuses %s with INVALID_ARGUMENT naming the field, storing nothing",
    async (_what, req, field) => {
      await expectCode(h.service.add(req, h.ctx()), "invalid_argument", field);
      const list = await h.service.listThreads(create(ListThreadsRequestSchema), h.ctx());
      expect(list.threadIds).toEqual([]);
    },
  );

  it("clears one thread, or all, and a cleared thread starts again from seq 1", async () => {
    for (const id of ["a", "b", "c"]) {
      await h.service.add(addReq({ threadId: id, messages: users("x") }), h.ctx());
    }
    const one = await h.service.clear(create(ClearRequestSchema, { threadId: "a" }), h.ctx());
    expect(one.clearedThreads).toBe(1);
    const none = await h.service.clear(create(ClearRequestSchema, { threadId: "a" }), h.ctx());
    expect(none.clearedThreads).toBe(0);
    const again = await h.service.add(addReq({ threadId: "a", messages: users("y") }), h.ctx());
    expect(again.firstSeq).toBe(1n);
    await expectCode(
      h.service.clear(create(ClearRequestSchema, { threadId: "a", all: true }), h.ctx()),
      "invalid_argument",
      "thread_id",
    );
    const all = await h.service.clear(create(ClearRequestSchema, { all: true }), h.ctx());
    expect(all.clearedThreads).toBe(3);
    const list = await h.service.listThreads(create(ListThreadsRequestSchema), h.ctx());
    expect(list.threadIds).toEqual([]);
  });

  it("lists threads sorted, in pages, per namespace", async () => {
    for (const id of ["b", "a", "d", "c", "e"]) {
      await h.service.add(addReq({ threadId: id, messages: users("m") }), h.ctx());
    }
    await h.service.add(
      addReq({ threadId: "zz", messages: users("m") }),
      h.ctx({ namespace: "other" }),
    );
    const seen: string[] = [];
    let token = "";
    do {
      const page = await h.service.listThreads(
        create(ListThreadsRequestSchema, { pageSize: 2, pageToken: token }),
        h.ctx(),
      );
      expect(page.threadIds.length).toBeLessThanOrEqual(2);
      seen.push(...page.threadIds);
      token = page.nextPageToken;
    } while (token !== "");
    expect(seen).toEqual(["a", "b", "c", "d", "e"]);
    await expectCode(
      h.service.listThreads(create(ListThreadsRequestSchema, { pageToken: "nope" }), h.ctx()),
      "invalid_argument",
      "page_token",
    );
  });

  it("trims to max_stored without shifting seqs", async () => {
    const strategy = windowStrategy(10);
    strategy.maxStored = 3;
    await h.service.add(addReq({ strategy, messages: users("1", "2", "3", "4", "5") }), h.ctx());
    const g = await h.service.get(getReq(), h.ctx());
    expect(g.messages.map((m) => m.seq)).toEqual([3n, 4n, 5n]);
    expect(g.thread?.lastSeq).toBe(5n);
  });
});

function create_unset() {
  const m = msg("user", "x");
  m.role = Role.UNSPECIFIED;
  return m;
}

describe("MemoryService: background summaries", () => {
  let h: Harness;
  beforeEach(async () => {
    h = await startHarness({ limits: { getFoldWaitMs: 400 } });
  });
  afterEach(async () => h.close());

  const summaryThread = async (n: number, window = 2, every = 2) =>
    h.service.add(
      addReq({
        strategy: summaryStrategy(window, every),
        messages: users(...Array.from({ length: n }, (_, i) => `m${i + 1}`)),
      }),
      h.ctx(),
    );

  it("folds right after the Add that makes a fold due, without any Get", async () => {
    await summaryThread(6);
    await waitUntil(
      async () => (await h.store.getThread("", "default"))?.summarizedThroughSeq === 4,
    );
    expect(h.llm.requests).toHaveLength(1);
  });

  it("folds each overflow once however many Gets race for it", async () => {
    h.llm.setFallback({ reply: (r) => `summary ${r.index}`, delayMs: 50 });
    await summaryThread(6);
    const results = await Promise.all(
      Array.from({ length: 10 }, () => h.service.get(getReq(), h.ctx())),
    );
    expect(h.llm.requests).toHaveLength(1);
    for (const r of results) {
      expect(r.degraded).toBe(false);
      expect(contents(r).slice(1)).toEqual(["m5", "m6"]);
    }
  });

  it("returns every message in the summary or the list while a fold is pending (allow_stale)", async () => {
    h.llm.setFallback({ reply: "s", delayMs: 300 });
    await summaryThread(6);
    const r = await h.service.get(getReq({ allowStale: true }), h.ctx());
    expect(contents(r)).toEqual(["m1", "m2", "m3", "m4", "m5", "m6"]);
    expect(r.degraded).toBe(false);
  });

  /**
   * Starts over with the server's Get wait at `getFoldWaitMs` and a model
   * that holds its reply until `release()`: while held, the fold is running
   * for certain, and only a wait's end or a deadline can end a Get.
   */
  async function heldModel(getFoldWaitMs: number): Promise<{ release: () => void }> {
    await h.close();
    h = await startHarness({ limits: { getFoldWaitMs } });
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    h.llm.setFallback({ reply: "late", until: held });
    await summaryThread(6);
    await waitUntil(() => h.llm.requests.length === 1);
    return { release };
  }

  it("waits for a running fold, bounded, and a slow model does not stall later reads", async () => {
    // Held below the summariser's 2 s timeout (service-harness.ts), so the fold is still running.
    const waitMs = 400;
    const model = await heldModel(waitMs);
    const t0 = Date.now();
    const first = await h.service.get(getReq(), h.ctx());
    expect(Date.now() - t0).toBeGreaterThanOrEqual(waitMs - 50);
    expect(first.degraded).toBe(true);
    expect(first.degradedReason).toBe("summary fold still running when the wait ended");
    expect(contents(first)).toEqual(["m5", "m6"]);
    const t1 = Date.now();
    const second = await h.service.get(getReq(), h.ctx());
    // A Get that waited would take the whole wait, no less.
    expect(Date.now() - t1).toBeLessThan(waitMs);
    expect(second.degraded).toBe(true);
    // Said without waiting: the first Get already found the model slow.
    expect(second.degradedReason).toBe("summary fold still running: the summariser is slow");
    expect(h.llm.answered()).toBe(0);
    model.release();
    await waitUntil(async () => (await h.store.getThread("", "default"))?.summary === "late");
    const third = await h.service.get(getReq(), h.ctx());
    expect(third.degraded).toBe(false);
    expect(third.summary).toBe("late");
  });

  it("honours the call's deadline while waiting", async () => {
    // Only the deadline can end this Get early and say the fold is still
    // running: the server would wait 60 s, and the held fold only ends at the
    // summariser's 2 s timeout, as a failure. 1.5 s is 5x the 300 ms deadline.
    const model = await heldModel(60_000);
    const t0 = Date.now();
    const r = await h.service.get(getReq(), h.ctx({ deadline: t0 + 300 }));
    const elapsed = Date.now() - t0;
    expect(r.degraded).toBe(true);
    expect(r.degradedReason).toBe("summary fold still running when the wait ended");
    expect(h.llm.answered()).toBe(0);
    // It waited until close to the deadline (less the reserve to answer in, 60 ms here).
    expect(elapsed).toBeGreaterThanOrEqual(200);
    expect(elapsed).toBeLessThan(1500);
    model.release();
  });

  it("degrades to the last good summary and a window when the model fails, retries, loses nothing", async () => {
    h.llm.push({ reply: "first summary" });
    await summaryThread(4);
    await waitUntil(
      async () => (await h.store.getThread("", "default"))?.summary === "first summary",
    );
    h.llm.push({ status: 500 }, { status: 500 });
    await h.service.add(addReq({ messages: users("m5", "m6", "m7") }), h.ctx());
    await waitUntil(() => h.llm.requests.length >= 2);
    const r = await h.service.get(getReq(), h.ctx());
    expect(r.degraded).toBe(true);
    expect(r.degradedReason).toMatch(/fail/);
    expect(r.summary).toBe("first summary");
    expect(contents(r)).toEqual([
      "Summary of the earlier conversation:\nfirst summary",
      "m6",
      "m7",
    ]);
    // The retry with backoff succeeds once the model recovers.
    await waitUntil(
      async () => (await h.store.getThread("", "default"))?.summarizedThroughSeq === 5,
    );
    const ok = await h.service.get(getReq(), h.ctx());
    expect(ok.degraded).toBe(false);
    expect(contents(ok).slice(1)).toEqual(["m6", "m7"]);
    const all = await h.store.read("", "default");
    expect(all?.messages.map((m) => m.content)).toEqual(["m1", "m2", "m3", "m4", "m5", "m6", "m7"]);
  });

  it("never writes a fold that was running during Clear into the new thread", async () => {
    // A service of its own over the harness's store and model, with metrics:
    // the old fold's outcome ("discarded") is what the case waits for.
    const metrics = new ServerMetrics();
    const service = createMemoryService({
      store: h.store,
      summarizers: createSummarizerRegistry(
        [createOpenAiSummarizer({ baseUrl: h.llm.baseUrl, model: "fake", maxRetries: 0 })],
        "openai",
      ),
      defaultStrategy: windowDefault,
      logger: silentLogger,
      metrics,
    });
    const folds = (result: string) =>
      metricSeries(metrics, `windlass_folds_total{result="${result}"}`);
    try {
      h.llm.setFallback({ reply: "old incarnation", delayMs: 300 });
      await service.add(
        addReq({ strategy: summaryStrategy(2, 2), messages: users("m1", "m2", "m3", "m4") }),
        h.ctx(),
      );
      await waitUntil(() => h.llm.requests.length === 1);
      await service.clear(create(ClearRequestSchema, {}), h.ctx());
      h.llm.setFallback({ reply: "new incarnation" });
      await service.add(
        addReq({ strategy: summaryStrategy(2, 2), messages: users("n1", "n2", "n3") }),
        h.ctx(),
      );
      // The old fold has ended, its commit refused.
      await waitUntil(async () => (await folds("discarded")) === 1);
      expect(await folds("committed")).toBe(0);
      const t = await h.store.getThread("", "default");
      expect(t?.summary).toBe("");
      expect(t?.summarizedThroughSeq).toBe(0);
      const r = await service.get(getReq(), h.ctx());
      expect(contents(r)).toEqual(["n1", "n2", "n3"]);
    } finally {
      await service.close();
    }
  });

  it("folds with a Get's smaller limit as the original did", async () => {
    h.llm.setFallback({ reply: "s" });
    await summaryThread(3, 10, 2);
    expect((await h.store.getThread("", "default"))?.summarizedThroughSeq).toBe(0);
    const r = await h.service.get(getReq({ limit: 1 }), h.ctx());
    expect(r.thread?.summarizedThroughSeq).toBe(2n);
    expect(contents(r).slice(1)).toEqual(["m3"]);
  });

  it("reports the thread with its resolved strategy", async () => {
    const r = await summaryThread(1, 2, 0);
    const t = create(ThreadSchema, r.thread);
    expect(t.strategy?.kind).toMatchObject({
      case: "summary",
      value: { window: 2, summarizeEvery: 1, model: "openai" },
    });
    expect(t.strategy?.maxStored).toBe(1000);
  });
});
