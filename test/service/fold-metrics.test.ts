import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ClearRequestSchema } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { silentLogger } from "../../src/logger.js";
import { ServerMetrics } from "../../src/metrics.js";
import type { CallContext } from "../../src/service/context.js";
import { createMemoryService, type MemoryService } from "../../src/service/memory-service.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/store.js";
import { createOpenAiSummarizer } from "../../src/summarizer/openai.js";
import { createSummarizerRegistry } from "../../src/summarizer/registry.js";
import { type FakeLlm, startFakeLlm } from "../support/fake-llm.js";
import { metricSeries as series } from "../support/metric-series.js";
import {
  addReq,
  getReq,
  summaryStrategy,
  users,
  waitUntil,
  windowDefault,
} from "../support/service-harness.js";

/**
 * The fold metrics the README lists move when their event happens: failed
 * and discarded folds, degraded Gets, the fold queue's depth. Read from the
 * rendered exposition, as a scraper would.
 */

const FAILED = 'windlass_folds_total{result="failed"}';
const DISCARDED = 'windlass_folds_total{result="discarded"}';
const COMMITTED = 'windlass_folds_total{result="committed"}';
const DEGRADED = "windlass_get_degraded_total";
const QUEUE = "windlass_fold_queue_depth";

let llm: FakeLlm;
let store: Store;
let metrics: ServerMetrics;
let service: MemoryService;
const ctx: CallContext = {
  namespace: "",
  signal: new AbortController().signal,
  deadline: undefined,
};

function startService(maxConcurrentFolds = 8): void {
  metrics = new ServerMetrics();
  store = createMemoryStore();
  service = createMemoryService({
    store,
    // "stalling" and "openai" reach the same fake; routes tell them apart by model.
    summarizers: createSummarizerRegistry(
      ["openai", "stalling"].map((name) =>
        createOpenAiSummarizer({
          name,
          baseUrl: llm.baseUrl,
          model: `${name}-model`,
          // Only the stalling model is meant to time out: a healthy reply
          // may be slow on a loaded machine.
          timeoutMs: name === "stalling" ? 300 : 30_000,
          maxRetries: 0,
        }),
      ),
      "openai",
    ),
    defaultStrategy: windowDefault,
    logger: silentLogger,
    metrics,
    limits: {
      maxConcurrentFolds,
      foldRetryInitialMs: 50,
      foldRetryMaxMs: 200,
      getFoldWaitMs: 3000,
    },
  });
}

const addDue = (threadId: string, model = "openai") =>
  service.add(
    addReq({
      threadId,
      strategy: summaryStrategy(2, 2, model),
      messages: users("a", "b", "c", "d"),
    }),
    ctx,
  );

beforeEach(async () => {
  llm = await startFakeLlm();
});
afterEach(async () => {
  await service?.close();
  await store?.close();
  await llm.close();
});

describe("fold metrics", () => {
  it("counts a failed fold and the degraded Get that reports it", async () => {
    startService();
    llm.setFallback({ status: 500 });
    expect(await series(metrics, FAILED)).toBe(0);
    await addDue("t");
    await waitUntil(async () => (await series(metrics, FAILED)) >= 1);
    expect(await series(metrics, DEGRADED)).toBe(0);
    const got = await service.get(getReq({ threadId: "t" }), ctx);
    expect(got.degraded).toBe(true);
    expect(await series(metrics, DEGRADED)).toBe(1);
    expect(await series(metrics, COMMITTED)).toBe(0);
    // A Get that is not degraded leaves the counter alone.
    llm.setFallback({ reply: "fine" });
    await waitUntil(async () => (await store.getThread("", "t"))?.summary === "fine");
    expect((await service.get(getReq({ threadId: "t" }), ctx)).degraded).toBe(false);
    expect(await series(metrics, DEGRADED)).toBe(1);
    expect(await series(metrics, COMMITTED)).toBe(1);
  });

  it("counts a fold discarded because the thread was cleared while it ran", async () => {
    startService();
    // The reply is held until the Clear is done: the fold is surely running.
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    llm.setFallback({ reply: "old incarnation", until: held });
    await addDue("t");
    await waitUntil(() => llm.requests.length === 1);
    await service.clear(create(ClearRequestSchema, { threadId: "t" }), ctx);
    expect(await series(metrics, DISCARDED)).toBe(0);
    release();
    await waitUntil(async () => (await series(metrics, DISCARDED)) === 1, 10_000);
    expect(await series(metrics, COMMITTED)).toBe(0);
    expect(await store.getThread("", "t")).toBeUndefined();
  });

  it("shows the threads waiting for a fold slot, and the queue draining", async () => {
    llm.setFallback({
      route: (r) => (r.body?.model === "stalling-model" ? { hang: true } : { reply: "s" }),
    });
    startService(1);
    await addDue("stalled", "stalling");
    await waitUntil(() => llm.requests.length === 1);
    expect(await series(metrics, QUEUE)).toBe(0);
    for (const t of ["q1", "q2", "q3"]) await addDue(t);
    expect(await series(metrics, QUEUE)).toBe(3);
    // The stalled call times out (300 ms), and the queued threads fold in turn.
    await waitUntil(async () => (await series(metrics, COMMITTED)) === 3, 10_000);
    await waitUntil(async () => (await series(metrics, QUEUE)) === 0);
  });
});
