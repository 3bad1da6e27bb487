import { afterEach, describe, expect, it } from "vitest";
import type { Strategy } from "../../src/core/types.js";
import { silentLogger } from "../../src/logger.js";
import {
  FoldScheduler,
  type FoldSchedulerOptions,
  foldDeadlineMs,
  retryDelayMs,
} from "../../src/service/fold-scheduler.js";
import { DEFAULT_SERVICE_LIMITS } from "../../src/service/memory-service.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/store.js";
import { createExtractiveSummarizer } from "../../src/summarizer/extractive.js";
import { createOpenAiSummarizer } from "../../src/summarizer/openai.js";
import { createSummarizerRegistry } from "../../src/summarizer/registry.js";
import type { Summarizer } from "../../src/summarizer/summarizer.js";
import { type FakeLlm, startFakeLlm } from "../support/fake-llm.js";
import { watchTimersOf } from "../support/held-timers.js";
import { waitUntil, windowDefault } from "../support/service-harness.js";

/**
 * The fold scheduler on its own, over a real store and the fake model server:
 * its retry schedule read from the delays it computes (its retry timer is
 * injected, so minutes of backoff take milliseconds), and its fold deadline.
 */

const summary = (model: string): Strategy => ({
  kind: "summary",
  window: 2,
  summarizeEvery: 2,
  model,
  excludeSystem: false,
  maxStored: 1000,
});

/** Appends `n` user messages to the thread, creating it with a summary strategy. */
async function append(store: Store, threadId: string, model: string, n: number): Promise<void> {
  await store.append({
    namespace: "",
    threadId,
    messages: Array.from({ length: n }, (_, i) => ({ role: "user", content: `m${i}` })),
    strategy: summary(model),
    defaultStrategy: windowDefault,
    replaceStrategy: false,
    requestId: "",
    requestHash: "",
    expectedLastSeq: undefined,
    now: Date.now(),
  });
}

let llm: FakeLlm | undefined;
let store: Store | undefined;
let scheduler: FoldScheduler | undefined;
afterEach(async () => {
  await scheduler?.close();
  await store?.close();
  await llm?.close();
  scheduler = undefined;
  store = undefined;
  llm = undefined;
});

/** A scheduler whose retry timers record their delay and fire at once. */
async function start(
  over: Partial<Omit<FoldSchedulerOptions, "summarizers">> & { extra?: Summarizer[] } = {},
): Promise<{ llm: FakeLlm; store: Store; scheduler: FoldScheduler; delays: number[] }> {
  llm = await startFakeLlm({ fallback: { status: 500 } });
  store = createMemoryStore();
  const delays: number[] = [];
  const { extra = [], ...rest } = over;
  scheduler = new FoldScheduler({
    store,
    summarizers: createSummarizerRegistry(
      [
        createExtractiveSummarizer(),
        createOpenAiSummarizer({ baseUrl: llm.baseUrl, model: "fake", maxRetries: 0 }),
        ...extra,
      ],
      "extractive",
    ),
    logger: silentLogger,
    maxConcurrent: 8,
    maxPending: 100,
    leaseMs: DEFAULT_SERVICE_LIMITS.foldLeaseMs,
    retryInitialMs: DEFAULT_SERVICE_LIMITS.foldRetryInitialMs,
    retryMaxMs: DEFAULT_SERVICE_LIMITS.foldRetryMaxMs,
    now: Date.now,
    startRetryTimer: (retry, delayMs) => {
      delays.push(delayMs);
      return setTimeout(retry, 0);
    },
    ...rest,
  });
  return { llm, store, scheduler, delays };
}

describe("fold retries", () => {
  // The README's promise for the defaults: 1 s doubling to 60 s, each wait
  // cut by up to half at random.
  const bases = [1000, 2000, 4000, 8000, 16_000, 32_000, 60_000, 60_000, 60_000];

  it.each([0, 0.5, 0.999])(
    "waits 1 s doubling to 60 s between failed folds, less (1 - %s) / 2 of it",
    async (random) => {
      const s = await start({ random: () => random });
      await append(s.store, "t", "openai", 4);
      s.scheduler.kick("", "t");
      await waitUntil(() => s.delays.length >= bases.length, 10_000);
      expect(s.delays.slice(0, bases.length)).toEqual(
        bases.map((base) => base / 2 + random * (base / 2)),
      );
      const incarnation = (await s.store.getThread("", "t"))?.incarnation ?? "";
      expect(s.scheduler.failure("", "t", incarnation)?.attempt).toBeGreaterThanOrEqual(
        bases.length,
      );
    },
  );

  it("starts again from 1 s after a fold succeeds", async () => {
    const s = await start({ random: () => 1 });
    s.llm.push({ status: 500 }, { status: 503 }, { reply: "recovered" }, { status: 500 });
    await append(s.store, "t", "openai", 4);
    s.scheduler.kick("", "t");
    await waitUntil(async () => (await s.store?.getThread("", "t"))?.summary === "recovered");
    await append(s.store, "t", "openai", 2);
    s.scheduler.kick("", "t");
    await waitUntil(() => s.delays.length >= 3);
    expect(s.delays.slice(0, 3)).toEqual([1000, 2000, 1000]);
  });

  it("keeps the delay within [base / 2, base] for any draw", () => {
    for (let attempt = 1; attempt <= 12; attempt++) {
      const base = Math.min(60_000, 1000 * 2 ** (attempt - 1));
      expect(retryDelayMs(attempt, 1000, 60_000, 0)).toBe(base / 2);
      expect(retryDelayMs(attempt, 1000, 60_000, 0.9999)).toBeLessThan(base);
      expect(retryDelayMs(attempt, 1000, 60_000, 0.9999)).toBeGreaterThan(base * 0.99);
    }
  });
});

describe("fold deadline", () => {
  it("arms a held timer for each fold and clears it when the fold ends", async () => {
    // The fold's own timer is told from every other timer of the process by
    // its delay: the deadline under the default lease.
    const deadlineMs = foldDeadlineMs(DEFAULT_SERVICE_LIMITS.foldLeaseMs);
    const timers = watchTimersOf(deadlineMs);
    try {
      let armedDuringCall: unknown[] = [];
      let calledResolve: () => void = () => {};
      const called = new Promise<void>((resolve) => {
        calledResolve = resolve;
      });
      const watched: Summarizer = {
        name: "watched",
        summarize: async () => {
          armedDuringCall = [...timers.armed];
          calledResolve();
          return "done";
        },
      };
      const s = await start({ extra: [watched] });
      await append(s.store, "t", "watched", 4);
      s.scheduler.kick("", "t");
      await called;
      // Armed while the model call runs: a timer the code holds, so it fires.
      expect(armedDuringCall).toHaveLength(1);
      await waitUntil(() => !s.scheduler.isRunning("", "t"));
      expect((await s.store.getThread("", "t"))?.summary).toBe("done");
      // ...and cleared once the fold is over.
      expect(timers.armed).toHaveLength(1);
      expect(timers.cleared.has(timers.armed[0])).toBe(true);
    } finally {
      timers.restore();
    }
  });

  it("gives the slot back at the deadline even when a summariser ignores its signal", async () => {
    const calls: AbortSignal[] = [];
    const deaf: Summarizer = {
      name: "deaf",
      // Never settles and never looks at its signal: a broken implementation.
      summarize: (_input, signal) => {
        calls.push(signal);
        return new Promise<string>(() => {});
      },
    };
    const s = await start({
      extra: [deaf],
      maxConcurrent: 1,
      // The deadline is the lease less a second: 500 ms.
      leaseMs: 1500,
    });
    await append(s.store, "deaf", "deaf", 4);
    await append(s.store, "healthy", "extractive", 4);
    const started = Date.now();
    s.scheduler.kick("", "deaf");
    s.scheduler.kick("", "healthy");
    expect(s.scheduler.pending).toBe(1);
    await waitUntil(
      async () => (await s.store.getThread("", "healthy"))?.summarizedThroughSeq === 2,
      5000,
    );
    // The healthy thread got the only slot once the deaf fold's deadline passed.
    expect(Date.now() - started).toBeGreaterThanOrEqual(500);
    expect(calls[0]?.aborted).toBe(true);
    const incarnation = (await s.store.getThread("", "deaf"))?.incarnation ?? "";
    expect(s.scheduler.failure("", "deaf", incarnation)?.reason).toBe(
      "the summariser did not answer within 500 ms",
    );
  });
});

describe("fold state", () => {
  const incarnationOf = async (s: Store, threadId: string) =>
    (await s.getThread("", threadId))?.incarnation ?? "";

  // Each way the thread stops needing its failure, behind the scheduler's back
  // (never through forget()): its next retry must find out and drop it.
  it.each([
    {
      how: "cleared in the store",
      change: async (s: Store) => {
        await s.clear("", "t", Date.now());
      },
    },
    {
      how: "cleared and written again, with nothing due",
      change: async (s: Store) => {
        await s.clear("", "t", Date.now());
        await append(s, "t", "openai", 1);
      },
    },
    {
      how: "switched to a window strategy",
      change: async (s: Store) => {
        await s.append({
          namespace: "",
          threadId: "t",
          messages: [],
          strategy: windowDefault,
          defaultStrategy: windowDefault,
          replaceStrategy: true,
          requestId: "",
          requestHash: "",
          expectedLastSeq: undefined,
          now: Date.now(),
        });
      },
    },
  ])("forgets a failing thread $how", async ({ change }) => {
    const s = await start();
    await append(s.store, "t", "openai", 4);
    s.scheduler.kick("", "t");
    const first = await incarnationOf(s.store, "t");
    await waitUntil(() => s.scheduler.failure("", "t", first) !== undefined);
    expect(s.scheduler.size).toBe(1);
    await change(s.store);
    await waitUntil(() => s.scheduler.size === 0);
    expect(s.scheduler.failure("", "t", first)).toBeUndefined();
  });

  it("keeps retrying a failing thread while another holder has its lease, then forgets it", async () => {
    const s = await start();
    await append(s.store, "t", "openai", 4);
    s.scheduler.kick("", "t");
    const first = await incarnationOf(s.store, "t");
    await waitUntil(() => s.scheduler.failure("", "t", first) !== undefined);
    // Another replica, say, takes the lease between two of this one's retries …
    let token: number | undefined;
    await waitUntil(async () => {
      token = await s.store.acquireFoldLease("", "t", 60_000);
      return token !== undefined;
    });
    // … and clears the thread while it holds it.
    await s.store.clear("", "t", Date.now());
    // Retries find the lease taken, and come back all the same.
    const armed = s.delays.length;
    await waitUntil(() => s.delays.length >= armed + 3);
    expect(s.scheduler.size).toBe(1);
    await s.store.releaseFoldLease("", "t", token ?? 0);
    await waitUntil(() => s.scheduler.size === 0);
  });

  it("retries a failing thread whose retry found the queue full, then forgets it", async () => {
    // Retry timers fire at once, but their retries wait while the gate is shut.
    let gateOpen = false;
    const shut: (() => void)[] = [];
    let releaseHold: () => void = () => {};
    const holding = new Promise<void>((resolve) => {
      releaseHold = resolve;
    });
    let holdCalled = false;
    const hold: Summarizer = {
      name: "hold",
      summarize: async () => {
        holdCalled = true;
        await holding;
        return "held summary";
      },
    };
    const s = await start({
      extra: [hold],
      maxConcurrent: 1,
      maxPending: 1,
      startRetryTimer: (retry) =>
        setTimeout(() => {
          if (gateOpen) retry();
          else shut.push(retry);
        }, 0),
    });
    await append(s.store, "t", "openai", 4);
    s.scheduler.kick("", "t");
    await waitUntil(() => shut.length === 1);
    // The only slot held, the only queue place taken, the thread cleared.
    await append(s.store, "busy", "hold", 4);
    s.scheduler.kick("", "busy");
    await waitUntil(() => holdCalled);
    await append(s.store, "queued", "extractive", 4);
    s.scheduler.kick("", "queued");
    expect(s.scheduler.pending).toBe(1);
    await s.store.clear("", "t", Date.now());
    // The retry meets the full queue: dropped, it would leave the thread for good.
    gateOpen = true;
    for (const retry of shut.splice(0)) retry();
    expect(s.scheduler.size).toBe(3);
    releaseHold();
    await waitUntil(() => s.scheduler.size === 0);
    expect((await s.store.getThread("", "queued"))?.summarizedThroughSeq).toBe(2);
  });

  it("keeps at most maxFailing failing threads, forgetting the oldest failure", async () => {
    const held: NodeJS.Timeout[] = [];
    const s = await start({
      maxConcurrent: 1,
      maxFailing: 3,
      // Retries wait (close() clears them): the failures stay for the count.
      startRetryTimer: (retry) => {
        const timer = setTimeout(retry, 3_600_000).unref();
        held.push(timer);
        return timer;
      },
    });
    const threads = Array.from({ length: 10 }, (_, i) => `t${i}`);
    for (const t of threads) await append(s.store, t, "openai", 4);
    for (const t of threads) s.scheduler.kick("", t);
    expect(s.scheduler.size).toBe(10);
    // Each fold failed and armed its retry, and the last one has ended.
    await waitUntil(
      () => held.length === 10 && s.scheduler.pending === 0 && !s.scheduler.isRunning("", "t9"),
    );
    expect(s.scheduler.size).toBe(3);
    for (const [i, t] of threads.entries()) {
      const failure = s.scheduler.failure("", t, await incarnationOf(s.store, t));
      expect(failure !== undefined, t).toBe(i >= 7);
    }
  });
});
