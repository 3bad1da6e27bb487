import { create } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import { createClient } from "redis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ClearRequestSchema } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { silentLogger } from "../../src/logger.js";
import { ServerMetrics } from "../../src/metrics.js";
import { createMemoryService, type MemoryService } from "../../src/service/memory-service.js";
import { createRedisStore } from "../../src/store/redis/index.js";
import type { Store } from "../../src/store/store.js";
import { createOpenAiSummarizer } from "../../src/summarizer/openai.js";
import { createSummarizerRegistry } from "../../src/summarizer/registry.js";
import { type FakeLlm, startFakeLlm } from "../support/fake-llm.js";
import { metricSeries } from "../support/metric-series.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";
import {
  addReq,
  getReq,
  summaryStrategy,
  users,
  waitUntil,
  windowDefault,
} from "../support/service-harness.js";

/**
 * Fold state of threads whose folds fail (the model answers 500) and which
 * then vanish without this replica's Clear: expired by their TTL, cleared
 * through another replica, or lost by the store. Two services, each with its
 * own Redis store, share one real redis-server. The scheduler must forget
 * each such thread: its state gauge (windlass_fold_threads) returns to 0.
 */

const THREADS = "windlass_fold_threads";

let redis: RedisServer;
let llm: FakeLlm;
beforeAll(async () => {
  [redis, llm] = await Promise.all([
    startRedisServer(),
    startFakeLlm({ fallback: { status: 500 } }),
  ]);
});
afterAll(async () => {
  await Promise.all([llm?.close(), redis?.stop()]);
});

interface Replica {
  service: MemoryService;
  store: Store;
  metrics: ServerMetrics;
}
const replicas: Replica[] = [];
afterEach(async () => {
  for (const r of replicas.splice(0)) {
    await r.service.close();
    await r.store.close();
  }
});

async function replica(): Promise<Replica> {
  const store = await createRedisStore(redis.url);
  const metrics = new ServerMetrics({ processMetrics: false });
  const service = createMemoryService({
    store,
    summarizers: createSummarizerRegistry(
      [createOpenAiSummarizer({ baseUrl: llm.baseUrl, model: "fake", maxRetries: 0 })],
      "openai",
    ),
    defaultStrategy: windowDefault,
    logger: silentLogger,
    metrics,
    // Retries come back within 100 ms, so a vanished thread is noticed soon.
    limits: { foldRetryInitialMs: 20, foldRetryMaxMs: 100, ttlSweepIntervalMs: 20 },
  });
  const r = { service, store, metrics };
  replicas.push(r);
  return r;
}

const ctx = () => ({ namespace: "", signal: new AbortController().signal, deadline: undefined });
const ms = (n: number) => create(DurationSchema, { seconds: 0n, nanos: n * 1e6 });

/** Adds enough messages for a fold to `threads` threads through `r`, and waits for each fold to fail. */
async function failingThreads(r: Replica, prefix: string, threads: number): Promise<string[]> {
  const ids = Array.from({ length: threads }, (_, i) => `${prefix}-${i}`);
  for (const threadId of ids) {
    await r.service.add(
      addReq({ threadId, strategy: summaryStrategy(2, 2), messages: users("a", "b", "c", "d") }),
      ctx(),
    );
  }
  // A Get reports a thread's failure, waiting for its fold if it has not failed yet.
  for (const threadId of ids) {
    const got = await r.service.get(getReq({ threadId }), ctx());
    expect(got.degradedReason).toContain("summary fold failed");
  }
  // Failing and due a retry: the scheduler holds each thread.
  expect(await metricSeries(r.metrics, THREADS)).toBe(threads);
  return ids;
}

describe("fold state of threads that vanish after failed folds", () => {
  it("is dropped when the threads expire (TTL)", async () => {
    const a = await replica();
    const ids = await failingThreads(a, "expiring", 3);
    // An Add with only a ttl moves the expire time: 1 ms from now.
    for (const threadId of ids) await a.service.add(addReq({ threadId, ttl: ms(1) }), ctx());
    await waitUntil(async () => (await metricSeries(a.metrics, THREADS)) === 0);
    for (const threadId of ids) expect(await a.store.getThread("", threadId)).toBeUndefined();
  });

  it("is dropped when another replica clears the threads", async () => {
    const [a, b] = [await replica(), await replica()];
    const ids = await failingThreads(a, "cleared", 3);
    await b.service.clear(create(ClearRequestSchema, { threadId: ids[0] ?? "" }), ctx());
    await b.service.clear(create(ClearRequestSchema, { threadId: ids[1] ?? "" }), ctx());
    // The third thread still exists and still fails: only the cleared two go.
    await waitUntil(async () => (await metricSeries(a.metrics, THREADS)) === 1);
    await b.service.clear(create(ClearRequestSchema, { all: true }), ctx());
    await waitUntil(async () => (await metricSeries(a.metrics, THREADS)) === 0);
    expect(await metricSeries(b.metrics, THREADS)).toBe(0);
  });

  it("is dropped when the store loses the threads", async () => {
    const a = await replica();
    await failingThreads(a, "lost", 3);
    const c = createClient({ url: redis.url, RESP: 2 });
    c.on("error", () => {});
    await c.connect();
    try {
      await c.sendCommand(["FLUSHDB"]);
    } finally {
      c.destroy();
    }
    await waitUntil(async () => (await metricSeries(a.metrics, THREADS)) === 0);
  });
});
