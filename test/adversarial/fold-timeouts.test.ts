import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { silentLogger } from "../../src/logger.js";
import { ServerMetrics } from "../../src/metrics.js";
import { createMemoryService, type MemoryService } from "../../src/service/memory-service.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/store.js";
import { createOpenAiSummarizer, SummarizerError } from "../../src/summarizer/openai.js";
import { createSummarizerRegistry } from "../../src/summarizer/registry.js";
import { type FakeLlm, type RecordedRequest, startFakeLlm } from "../support/fake-llm.js";
import { metricSeries as series } from "../support/metric-series.js";
import {
  addReq,
  getReq,
  summaryStrategy,
  users,
  windowDefault,
} from "../support/service-harness.js";

/**
 * Timeouts against a model endpoint that accepts the connection and never
 * answers, when an AbortSignal.timeout never fires. That is what garbage
 * collection did to one inside AbortSignal.any on Node releases without the
 * fix for nodejs/node#57736 (a composite held its sources weakly): a stalled
 * call then held its fold slot for good and, once every slot was taken, no
 * thread got a summary again. Node 24 no longer loses them, so collecting
 * garbage here would prove nothing; instead every AbortSignal.timeout of the
 * process returns a signal that never aborts, the collected timeout made
 * certain. Code whose timeouts are timers it holds ends the calls on time;
 * code that leans on AbortSignal.timeout hangs, and these cases fail.
 */

/** Waits for the condition, checking every few milliseconds; the bound only fails a stuck run. */
async function waitFor(
  what: string,
  condition: () => boolean | Promise<boolean>,
  ms = 15_000,
): Promise<void> {
  const until = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > until) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

beforeEach(() => {
  vi.spyOn(AbortSignal, "timeout").mockImplementation(() => new AbortController().signal);
});

/** How long the fake kept each ended request open. */
const heldFor = (requests: RecordedRequest[]) =>
  requests.flatMap((r) => (r.endedAt === undefined ? [] : [r.endedAt - r.receivedAt]));

// The bound is the behaviour under test: an attempt ends at its timeout, not
// much later (>= 5x headroom on a loaded machine). No lower bound from the
// fake's side: it sees a request some time after the client started its
// timer; the reasons say the timeouts ended them.
const SLACK_AFTER_MS = 2000;

let llm: FakeLlm | undefined;
let service: MemoryService | undefined;
let store: Store | undefined;
afterEach(async () => {
  vi.restoreAllMocks();
  await service?.close();
  await store?.close();
  await llm?.close();
  service = undefined;
  store = undefined;
  llm = undefined;
});

describe("timeouts fire even when no AbortSignal.timeout would", () => {
  it("ends every attempt of the openai summariser at timeoutMs", async () => {
    llm = await startFakeLlm({ fallback: { hang: true } });
    // Long enough for the fake to read a request body on a loaded machine.
    const timeoutMs = 1_000;
    const summarizer = createOpenAiSummarizer({
      baseUrl: llm.baseUrl,
      model: "stall",
      timeoutMs,
      maxRetries: 1,
      initialBackoffMs: 1,
      maxBackoffMs: 2,
    });
    // A caller that never gives up: only the summariser's own timeout ends the calls.
    const caller = new AbortController();
    const started = Date.now();
    const calls = Array.from({ length: 8 }, () =>
      summarizer
        .summarize(
          { previousSummary: "", messages: [{ role: "user", content: "hi" }] },
          caller.signal,
        )
        .then(
          () => new Error("a hung endpoint produced a summary"),
          (err: unknown) => ({ err, elapsed: Date.now() - started }),
        ),
    );
    const outcomes: unknown[] = [];
    void Promise.all(calls).then((o) => outcomes.push(...o));
    await waitFor("8 summarise calls timing out", () => outcomes.length === 8);
    for (const outcome of outcomes) {
      const { err, elapsed } = outcome as { err: unknown; elapsed: number };
      expect(err).toBeInstanceOf(SummarizerError);
      expect(err).toMatchObject({ kind: "timeout", attempts: 2 });
      // Two attempts, each ended by its own timer.
      expect(elapsed).toBeGreaterThanOrEqual(2 * timeoutMs);
      expect(elapsed).toBeLessThan(2 * timeoutMs + SLACK_AFTER_MS);
    }
    // (An attempt whose body the fake had not read in full when it timed out is not recorded.)
    expect(llm.requests.length).toBeGreaterThan(0);
    expect(llm.requests.length).toBeLessThanOrEqual(16);
    // The client closed every hung request (the fake sees the close a moment later).
    await waitFor("the fake seeing every request closed", () =>
      (llm?.requests ?? []).every((r) => r.endedAt !== undefined),
    );
    for (const ms of heldFor(llm.requests)) expect(ms).toBeLessThan(timeoutMs + SLACK_AFTER_MS);
  });

  // Two ways a fold attempt ends on a stalled endpoint: the summariser's own
  // per-attempt timeout, or the fold's deadline (the lease less a second) when
  // that comes first.
  it.each([
    { bound: "the summariser's timeout", openaiTimeoutMs: 300, foldLeaseMs: 60_000, endsAt: 300 },
    { bound: "the fold's deadline", openaiTimeoutMs: 60_000, foldLeaseMs: 1500, endsAt: 500 },
  ])(
    "frees the fold slots at $bound, so a healthy thread folds while two threads' model calls hang",
    async ({ openaiTimeoutMs, foldLeaseMs, endsAt }) => {
      const served = await startFakeLlm({
        fallback: {
          route: (r) =>
            r.body?.model === "stall-model" ? { hang: true } : { reply: "healthy summary" },
        },
      });
      llm = served;
      const metrics = new ServerMetrics();
      store = createMemoryStore();
      const summarizers = createSummarizerRegistry(
        ["stalling", "healthy"].map((name) =>
          createOpenAiSummarizer({
            name,
            baseUrl: served.baseUrl,
            model: name === "stalling" ? "stall-model" : "ok-model",
            timeoutMs: openaiTimeoutMs,
            maxRetries: 0,
          }),
        ),
        "healthy",
      );
      const maxConcurrentFolds = 2;
      service = createMemoryService({
        store,
        summarizers,
        defaultStrategy: windowDefault,
        logger: silentLogger,
        metrics,
        limits: {
          maxConcurrentFolds,
          foldLeaseMs,
          foldRetryInitialMs: 50,
          foldRetryMaxMs: 200,
          getFoldWaitMs: 0,
        },
      });
      const svc = service;
      const ctx = { namespace: "", signal: new AbortController().signal, deadline: undefined };
      const fold = (threadId: string, model: string) =>
        svc.add(
          addReq({
            threadId,
            strategy: summaryStrategy(2, 2, model),
            messages: users("a", "b", "c", "d"),
          }),
          ctx,
        );
      const stalled = () => served.requests.filter((r) => r.body?.model === "stall-model");

      // The two stalled threads take both slots; the healthy one queues behind them.
      await fold("stalled-1", "stalling");
      await fold("stalled-2", "stalling");
      await fold("healthy", "healthy");
      expect(await series(metrics, "windlass_fold_queue_depth")).toBe(1);

      await waitFor(
        "the healthy thread's summary",
        async () => (await store?.getThread("", "healthy"))?.summary === "healthy summary",
      );
      // The stalled threads keep retrying, and every attempt ends at its bound
      // while their next ones hang again.
      await waitFor("three ended attempts per stalled thread", () => {
        const ended = stalled().filter((r) => r.endedAt !== undefined);
        return ended.length >= 6;
      });
      const held = heldFor(stalled());
      expect(held.length).toBeGreaterThanOrEqual(6);
      for (const ms of held) {
        expect(ms).toBeLessThan(endsAt + SLACK_AFTER_MS);
      }
      // Never more hung calls open than slots.
      const open = stalled().filter((r) => r.endedAt === undefined).length;
      expect(open).toBeLessThanOrEqual(maxConcurrentFolds);
      expect(await series(metrics, 'windlass_folds_total{result="failed"}')).toBeGreaterThanOrEqual(
        6,
      );
      expect(await series(metrics, 'windlass_folds_total{result="committed"}')).toBe(1);

      // A Get on a stalled thread says why its summary is behind.
      const got = await svc.get(getReq({ threadId: "stalled-1" }), ctx);
      expect(got.degraded).toBe(true);
      expect(got.degradedReason).toContain(
        endsAt === 300 ? "timed out after 300 ms" : "did not answer within 500 ms",
      );
    },
  );
});
