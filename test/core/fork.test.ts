import { describe, expect, it } from "vitest";
import { MemoryError } from "../../src/core/errors.js";
import {
  decideFork,
  type ForkAsk,
  forkTargetExistsError,
  forkTrimCount,
} from "../../src/core/fork.js";
import type { Role, Strategy, ThreadState } from "../../src/core/types.js";

const buffer: Strategy = { kind: "buffer", maxMessages: 0, excludeSystem: false, maxStored: 1000 };
const summary: Strategy = {
  kind: "summary",
  window: 2,
  summarizeEvery: 2,
  model: "extractive",
  excludeSystem: false,
  maxStored: 1000,
};

function parent(over: Partial<ThreadState> = {}): ThreadState {
  return {
    threadId: "p",
    incarnation: "i",
    strategy: buffer,
    lastSeq: 10,
    summarizedThroughSeq: 0,
    summary: "",
    summaryTime: 0,
    createTime: 5,
    updateTime: 6,
    ...over,
  };
}

const ask = (over: Partial<ForkAsk> = {}): ForkAsk => ({
  newThreadId: "f",
  atSeq: undefined,
  expectedLastSeq: undefined,
  strategy: undefined,
  labels: undefined,
  ttlMs: undefined,
  now: 100,
  ...over,
});

function refusal(fn: () => unknown): { code: string; field: string | undefined } {
  try {
    fn();
  } catch (err) {
    if (err instanceof MemoryError) return { code: err.code, field: err.field };
    throw err;
  }
  throw new Error("did not throw");
}

describe("decideFork", () => {
  it("forks at last_seq by default, inheriting strategy, labels and ttl", () => {
    const p = parent({ labels: { u: "1" }, ttlMs: 50, expireTime: 56 });
    const plan = decideFork(p, 1, ask());
    expect(plan).toEqual({
      atSeq: 10,
      summaryInherited: false,
      thread: {
        threadId: "f",
        strategy: buffer,
        lastSeq: 10,
        summarizedThroughSeq: 0,
        summary: "",
        summaryTime: 0,
        createTime: 100,
        updateTime: 100,
        labels: { u: "1" },
        ttlMs: 50,
        expireTime: 150,
        parent: { threadId: "p", atSeq: 10, forkTime: 100, parentCreateTime: 5 },
      },
    });
  });

  it("takes the strategy, labels and ttl given; ttl 0 is none", () => {
    const p = parent({ labels: { u: "1" }, ttlMs: 50, expireTime: 56 });
    const plan = decideFork(
      p,
      1,
      ask({ atSeq: 4, strategy: summary, labels: { u: "2" }, ttlMs: 0 }),
    );
    expect(plan.thread).toMatchObject({ strategy: summary, labels: { u: "2" }, lastSeq: 4 });
    expect(plan.thread.ttlMs).toBeUndefined();
    expect(plan.thread.expireTime).toBeUndefined();
  });

  it.each([
    ["no parent", undefined, 1, ask(), "not_found", "thread_id"],
    [
      "stale expected_last_seq",
      parent(),
      1,
      ask({ expectedLastSeq: 9 }),
      "aborted",
      "expected_last_seq",
    ],
    ["at_seq past last_seq", parent(), 1, ask({ atSeq: 11 }), "out_of_range", "at_seq"],
    [
      "at_seq before the trimmed front",
      parent(),
      5,
      ask({ atSeq: 3 }),
      "failed_precondition",
      "at_seq",
    ],
    [
      "a summary past at_seq holding trimmed messages",
      parent({ strategy: summary, summarizedThroughSeq: 7, summary: "s", summaryTime: 3 }),
      5,
      ask({ atSeq: 6 }),
      "failed_precondition",
      "at_seq",
    ],
  ] as const)("refuses %s", (_name, p, oldest, a, code, field) => {
    expect(refusal(() => decideFork(p, oldest, a))).toEqual({ code, field });
  });

  it("forks at the earliest points: oldest stored minus one, and an empty parent at 0", () => {
    expect(decideFork(parent(), 5, ask({ atSeq: 4 })).atSeq).toBe(4);
    expect(decideFork(parent({ lastSeq: 0 }), undefined, ask()).atSeq).toBe(0);
    // Nothing stored (all trimmed): only last_seq remains a fork point.
    expect(decideFork(parent(), undefined, ask()).atSeq).toBe(10);
    expect(refusal(() => decideFork(parent(), undefined, ask({ atSeq: 9 }))).code).toBe(
      "failed_precondition",
    );
  });

  it("inherits a summary through at_seq or before, under a strategy keeping it", () => {
    const p = parent({ strategy: summary, summarizedThroughSeq: 4, summary: "s", summaryTime: 3 });
    for (const atSeq of [4, 7]) {
      const plan = decideFork(p, 1, ask({ atSeq }));
      expect(plan.summaryInherited).toBe(true);
      expect(plan.thread).toMatchObject({ summary: "s", summarizedThroughSeq: 4, summaryTime: 3 });
    }
    const past = decideFork(p, 1, ask({ atSeq: 3 }));
    expect(past.summaryInherited).toBe(false);
    expect(past.thread).toMatchObject({ summary: "", summarizedThroughSeq: 0, summaryTime: 0 });
    expect(decideFork(p, 1, ask({ strategy: buffer })).summaryInherited).toBe(false);
    // Past at_seq but seq 1 still stored: the fork folds anew.
    expect(decideFork(p, 1, ask({ atSeq: 2 })).thread.summarizedThroughSeq).toBe(0);
  });

  it("names new_thread_id when it is taken", () => {
    expect(forkTargetExistsError()).toMatchObject({
      code: "already_exists",
      field: "new_thread_id",
    });
  });
});

describe("forkTrimCount", () => {
  const roles = (list: Record<number, Role>) => (seq: number) => list[seq] ?? "user";
  const window = (maxStored: number): Strategy => ({
    kind: "window",
    window: 20,
    excludeSystem: false,
    maxStored,
  });

  it.each([
    ["nothing when the fork fits", window(10), 1, 10, 0, {}, 0],
    ["the excess", window(4), 1, 10, 0, {}, 6],
    ["from a floor above 1", window(4), 101, 110, 0, {}, 6],
    ["tool results left at the cut too", window(4), 1, 10, 0, { 7: "tool", 8: "tool" }, 8],
    ["at most the whole fork", window(1), 1, 3, 0, { 3: "tool" }, 3],
    ["only folded messages under summary", { ...summary, maxStored: 2 }, 1, 10, 5, {}, 5],
    ["nothing unfolded under summary", { ...summary, maxStored: 2 }, 1, 10, 0, {}, 0],
    [
      "the excess when it is less than the folded run",
      { ...summary, maxStored: 8 },
      1,
      10,
      5,
      {},
      2,
    ],
  ] as const)("drops %s", (_name, strategy, floor, atSeq, through, list, want) => {
    expect(forkTrimCount(strategy, floor, atSeq, through, roles(list))).toBe(want);
  });

  it("asks only for the roles at the cut", () => {
    const asked: number[] = [];
    forkTrimCount(window(4), 1, 1_000_000, 0, (seq) => {
      asked.push(seq);
      return "user";
    });
    expect(asked).toEqual([999_997]);
  });
});
