import { create } from "@bufbuild/protobuf";
import { afterEach, describe, expect, it } from "vitest";
import {
  ClearRequestSchema,
  EventType,
  WatchRequestSchema,
  type WatchResponse,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { MemoryError } from "../../src/core/errors.js";
import { ServerMetrics } from "../../src/metrics.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/store.js";
import { metricSeries } from "../support/metric-series.js";
import {
  addReq,
  type Harness,
  startHarness,
  summaryStrategy,
  users,
} from "../support/service-harness.js";

type Init = Parameters<typeof create<typeof WatchRequestSchema>>[1];

/** A Watch stream read one event at a time. */
function open(h: Harness, init: Init = {}, ctx = h.ctx()) {
  const it = h.service.watch(create(WatchRequestSchema, init), ctx)[Symbol.asyncIterator]();
  return {
    async next(ms = 10_000): Promise<WatchResponse> {
      const r = await Promise.race([
        it.next(),
        new Promise<never>((_, rej) => setTimeout(() => rej(new Error("no event in time")), ms)),
      ]);
      if (r.done) throw new Error("stream ended");
      return r.value;
    },
    /** The next event that is not a Progress. */
    async nextEvent(ms = 10_000): Promise<WatchResponse> {
      for (;;) {
        const e = await this.next(ms);
        if (e.event.case !== "progress") return e;
      }
    },
    async take(n: number): Promise<WatchResponse[]> {
      const out: WatchResponse[] = [];
      for (let i = 0; i < n; i++) out.push(await this.next());
      return out;
    },
    close: () => it.return?.(),
  };
}

async function expectCode(p: Promise<unknown>, code: string): Promise<void> {
  await expect(p).rejects.toSatisfy((e: unknown) => e instanceof MemoryError && e.code === code);
}

describe("MemoryService.Watch", () => {
  let h: Harness;
  afterEach(async () => h.close());

  it("caps open streams per namespace, gives the room back as they end, and leaves other namespaces alone", async () => {
    h = await startHarness({ limits: { progressIntervalMs: 20, maxWatchersPerNamespace: 2 } });
    const a1 = open(h, {}, h.ctx({ namespace: "a" }));
    const a2 = open(h, {}, h.ctx({ namespace: "a" }));
    // Each is counted once it has started: its first Progress says so.
    await a1.next();
    await a2.next();
    const a3 = open(h, {}, h.ctx({ namespace: "a" }));
    await expect(a3.next()).rejects.toSatisfy(
      (e: unknown) =>
        e instanceof MemoryError &&
        e.code === "resource_exhausted" &&
        e.message.includes("max_watchers_per_namespace (2)"),
    );
    const b = open(h, {}, h.ctx({ namespace: "b" }));
    expect((await b.next()).event.case).toBe("progress");
    await a1.close();
    const a4 = open(h, {}, h.ctx({ namespace: "a" }));
    expect((await a4.next()).event.case).toBe("progress");
    await Promise.all([a2.close(), a4.close(), b.close()]);
  });

  it("delivers events no wake-up announced at its next Progress, and counts them", async () => {
    // A store whose subscription stays silent, as one that lost its
    // connection to the log does: the stream must not stay open and quiet.
    const inner = createMemoryStore();
    const deaf: Store = Object.assign(Object.create(inner) as Store, {
      subscribe: () => () => {},
    });
    const metrics = new ServerMetrics();
    h = await startHarness({ store: deaf, metrics, limits: { progressIntervalMs: 100 } });
    const w = open(h);
    expect((await w.next()).event.case).toBe("progress");
    await h.service.add(addReq({ threadId: "t", messages: users("a", "b") }), h.ctx());
    const e = await w.nextEvent(5000);
    expect(e.event).toMatchObject({ case: "messagesAdded", value: { firstSeq: 1n, lastSeq: 2n } });
    expect(await metricSeries(metrics, "windlass_watch_wakeups_missed_total")).toBe(1);
    // Idle again: Progress, and nothing more counted.
    expect((await w.next()).event.case).toBe("progress");
    expect(await metricSeries(metrics, "windlass_watch_wakeups_missed_total")).toBe(1);
    await w.close();
  });

  it("streams events of the namespace in order, from now on", async () => {
    h = await startHarness({ limits: { progressIntervalMs: 50 } });
    await h.service.add(addReq({ threadId: "before", messages: users("x") }), h.ctx());
    const w = open(h);
    // The stream is up once it sends its first Progress.
    expect((await w.next()).event.case).toBe("progress");
    await h.service.add(addReq({ threadId: "a", messages: users("1", "2") }), h.ctx());
    await h.service.add(addReq({ threadId: "a", messages: users("3") }), h.ctx({ namespace: "x" }));
    await h.service.clear(create(ClearRequestSchema, { threadId: "a" }), h.ctx());
    const events = [await w.nextEvent(), await w.nextEvent()];
    expect(events[0]?.threadId).toBe("a");
    expect(events[0]?.event).toMatchObject({
      case: "messagesAdded",
      value: { firstSeq: 1n, lastSeq: 2n },
    });
    expect(events[1]?.event.case).toBe("threadCleared");
    expect(events[0]?.resumeToken).not.toBe(events[1]?.resumeToken);
    await w.close();
  });

  it("resumes exactly after a token, across a cancelled stream", async () => {
    h = await startHarness();
    const w = open(h);
    const p = w.take(2);
    for (const c of ["1", "2", "3", "4"]) {
      await h.service.add(addReq({ messages: users(c) }), h.ctx());
    }
    const got = await p;
    await w.close();
    const resumed = open(h, { resumeToken: got[1]?.resumeToken ?? "" });
    const rest = await resumed.take(2);
    expect(rest.map((e) => e.event.case === "messagesAdded" && e.event.value.firstSeq)).toEqual([
      3n,
      4n,
    ]);
    await resumed.close();
  });

  it("filters by thread and event type; progress tokens still move on", async () => {
    h = await startHarness({ limits: { progressIntervalMs: 100 } });
    const w = open(h, { threadIds: ["b"], eventTypes: [EventType.THREAD_CLEARED] });
    const p = w.take(2);
    await h.service.add(addReq({ threadId: "a", messages: users("x") }), h.ctx());
    await h.service.add(addReq({ threadId: "b", messages: users("x") }), h.ctx());
    await h.service.clear(create(ClearRequestSchema, { threadId: "a" }), h.ctx());
    await h.service.clear(create(ClearRequestSchema, { threadId: "b" }), h.ctx());
    const [cleared, progress] = await p;
    expect(cleared?.threadId).toBe("b");
    expect(cleared?.event.case).toBe("threadCleared");
    expect(progress?.event.case).toBe("progress");
    // Resuming from the progress token delivers nothing old.
    const resumed = open(h, { resumeToken: progress?.resumeToken ?? "" });
    await h.service.add(addReq({ threadId: "c", messages: users("x") }), h.ctx());
    expect((await resumed.next()).threadId).toBe("c");
    await w.close();
    await resumed.close();
  });

  it("sends Progress on idle streams", async () => {
    h = await startHarness({ limits: { progressIntervalMs: 50 } });
    const w = open(h);
    const e = await w.next(1000);
    expect(e.event.case).toBe("progress");
    expect(e.resumeToken).not.toBe("");
    await w.close();
  });

  it("sends the initial state, then summary updates", async () => {
    h = await startHarness({ limits: { progressIntervalMs: 50 } });
    h.llm.setFallback({ reply: "sum" });
    const w0 = open(h, { eventTypes: [EventType.SUMMARY_UPDATED] });
    expect((await w0.next()).event.case).toBe("progress");
    await h.service.add(
      addReq({ threadId: "s", strategy: summaryStrategy(1, 1), messages: users("a", "b") }),
      h.ctx(),
    );
    const first = await w0.nextEvent();
    await w0.close();
    expect(first.event).toMatchObject({ case: "summaryUpdated", value: { summary: "sum" } });
    const w = open(h, { sendInitialState: true, threadIds: ["s", "missing"] });
    const init = await w.nextEvent();
    expect(init.threadId).toBe("s");
    expect(init.event).toMatchObject({
      case: "summaryUpdated",
      value: { summary: "sum", summarizedThroughSeq: 1n },
    });
    await w.close();
  });

  it("refuses a malformed token and one whose history is gone", async () => {
    h = await startHarness({ store: createMemoryStore({ eventRetention: 10 }) });
    await expectCode(open(h, { resumeToken: "garbage" }).next(), "invalid_argument");
    await expectCode(open(h, { eventTypes: [EventType.UNSPECIFIED] }).next(), "invalid_argument");
    const w = open(h);
    const p = w.next();
    await h.service.add(addReq({ messages: users("0") }), h.ctx());
    const token = (await p).resumeToken;
    await w.close();
    for (let i = 0; i < 200; i++) await h.service.add(addReq({ messages: users(`${i}`) }), h.ctx());
    await expectCode(open(h, { resumeToken: token }).next(), "out_of_range");
  });

  it("ends a watcher that falls too far behind with RESOURCE_EXHAUSTED, others unaffected", async () => {
    h = await startHarness({ limits: { watchBuffer: 5 } });
    const slow = open(h);
    const fast = open(h);
    const slowFirst = slow.next();
    const got: WatchResponse[] = [];
    const reading = (async () => {
      for (let i = 0; i < 20; i++) got.push(await fast.next());
    })();
    for (let i = 0; i < 20; i++) {
      await h.service.add(addReq({ messages: users(`${i}`) }), h.ctx());
      await new Promise((r) => setImmediate(r));
    }
    await reading;
    expect(got).toHaveLength(20);
    await slowFirst;
    await expectCode(slow.next(), "resource_exhausted");
    await fast.close();
  });

  it("ends streams with UNAVAILABLE on shutdown and with the caller's reason on cancel", async () => {
    h = await startHarness();
    const ac = new AbortController();
    const cancelled = open(h, {}, { namespace: "", signal: ac.signal, deadline: undefined });
    const pending = cancelled.next();
    const reason = new MemoryError("cancelled", "client cancelled");
    ac.abort(reason);
    await expect(pending).rejects.toBe(reason);
    const w = open(h);
    const p = w.next();
    await h.service.close();
    await expectCode(p, "unavailable");
  });
});
