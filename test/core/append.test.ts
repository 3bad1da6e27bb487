/** The rules of an Add (README, Semantics: Strategy; Errors) and trimming to max_stored. */
import { describe, expect, it } from "vitest";
import { decideAppend, keepsSummary, trimCount } from "../../src/core/append.js";
import { isMemoryError, type MemoryError } from "../../src/core/errors.js";
import type { Strategy, ThreadState } from "../../src/core/types.js";

const WINDOW: Strategy = { kind: "window", window: 20, excludeSystem: false, maxStored: 1000 };
const BUFFER: Strategy = { kind: "buffer", maxMessages: 0, excludeSystem: false, maxStored: 1000 };
const SUMMARY: Strategy = {
  kind: "summary",
  window: 10,
  summarizeEvery: 6,
  model: "extractive",
  excludeSystem: false,
  maxStored: 1000,
};

function thread(strategy: Strategy, lastSeq: number): ThreadState {
  return {
    threadId: "t",
    incarnation: "i1",
    strategy,
    lastSeq,
    summarizedThroughSeq: 0,
    summary: "",
    summaryTime: 0,
    createTime: 1,
    updateTime: 2,
  };
}

const cmd = (init: Partial<Parameters<typeof decideAppend>[1]> = {}) => ({
  strategy: undefined,
  defaultStrategy: WINDOW,
  replaceStrategy: false,
  expectedLastSeq: undefined,
  ...init,
});

function thrown(fn: () => unknown): MemoryError {
  try {
    fn();
  } catch (err) {
    if (isMemoryError(err)) return err;
    throw err;
  }
  throw new Error("expected a MemoryError");
}

describe("decideAppend", () => {
  it("creates a thread with the request's strategy, else the default", () => {
    expect(decideAppend(undefined, cmd({ strategy: SUMMARY }))).toBe(SUMMARY);
    expect(decideAppend(undefined, cmd())).toBe(WINDOW);
  });

  it("keeps the thread's strategy when the request omits it or repeats it", () => {
    expect(decideAppend(thread(BUFFER, 3), cmd())).toBe(BUFFER);
    expect(decideAppend(thread(BUFFER, 3), cmd({ strategy: { ...BUFFER } }))).toBe(BUFFER);
  });

  it("is failed_precondition for another strategy, naming both", () => {
    const err = thrown(() => decideAppend(thread(BUFFER, 3), cmd({ strategy: SUMMARY })));
    expect(err.code).toBe("failed_precondition");
    expect(err.field).toBe("strategy");
    expect(err.message).toContain("buffer(max_messages=0");
    expect(err.message).toContain("summary(window=10,summarize_every=6,model=extractive");
    expect(err.message).toContain("replace_strategy");
  });

  it("changes the strategy with replace_strategy", () => {
    expect(decideAppend(thread(BUFFER, 3), cmd({ strategy: SUMMARY, replaceStrategy: true }))).toBe(
      SUMMARY,
    );
  });

  it("is aborted when expected_last_seq differs from the thread's last_seq", () => {
    const err = thrown(() => decideAppend(thread(WINDOW, 4), cmd({ expectedLastSeq: 3 })));
    expect(err.code).toBe("aborted");
    expect(err.field).toBe("expected_last_seq");
    expect(err.message).toContain("4");
    expect(decideAppend(thread(WINDOW, 4), cmd({ expectedLastSeq: 4 }))).toBe(WINDOW);
  });

  it("takes a missing thread's last_seq as 0", () => {
    expect(decideAppend(undefined, cmd({ expectedLastSeq: 0 }))).toBe(WINDOW);
    expect(thrown(() => decideAppend(undefined, cmd({ expectedLastSeq: 1 }))).code).toBe("aborted");
  });

  it("checks expected_last_seq before the strategy", () => {
    const err = thrown(() =>
      decideAppend(thread(BUFFER, 2), cmd({ strategy: SUMMARY, expectedLastSeq: 1 })),
    );
    expect(err.code).toBe("aborted");
  });
});

describe("trimCount", () => {
  const seqs = [3, 4, 5, 6, 7].map((seq) => ({ seq, role: "user" as const }));

  it("is 0 within max_stored", () => {
    expect(trimCount({ ...WINDOW, maxStored: 5 }, seqs, 0)).toBe(0);
    expect(trimCount({ ...SUMMARY, maxStored: 9 }, seqs, 0)).toBe(0);
  });

  it("drops the excess oldest for buffer and window", () => {
    expect(trimCount({ ...WINDOW, maxStored: 2 }, seqs, 0)).toBe(3);
    expect(trimCount({ ...BUFFER, maxStored: 4 }, seqs, 0)).toBe(1);
  });

  it("summary: drops only messages already folded into the summary", () => {
    const s = { ...SUMMARY, maxStored: 2 };
    expect(trimCount(s, seqs, 0)).toBe(0);
    expect(trimCount(s, seqs, 2)).toBe(0);
    expect(trimCount(s, seqs, 4)).toBe(2);
    expect(trimCount(s, seqs, 6)).toBe(3);
    expect(trimCount(s, seqs, 100)).toBe(3);
  });

  it("drops tool results left at the front without their call", () => {
    const msgs = [
      { seq: 1, role: "user" as const },
      { seq: 2, role: "assistant" as const },
      { seq: 3, role: "tool" as const },
      { seq: 4, role: "tool" as const },
      { seq: 5, role: "user" as const },
    ];
    expect(trimCount({ ...WINDOW, maxStored: 3 }, msgs, 0)).toBe(4);
    expect(trimCount({ ...WINDOW, maxStored: 4 }, msgs, 0)).toBe(1);
    expect(trimCount({ ...SUMMARY, maxStored: 3 }, msgs, 2)).toBe(2);
    expect(trimCount({ ...SUMMARY, maxStored: 3 }, msgs, 4)).toBe(4);
    expect(trimCount({ ...SUMMARY, maxStored: 3 }, msgs, 0)).toBe(0);
  });
});

describe("keepsSummary", () => {
  it("keeps the summary only between summary strategies seeing the same messages", () => {
    expect(keepsSummary(SUMMARY, { ...SUMMARY, window: 3 })).toBe(true);
    expect(keepsSummary(SUMMARY, { ...SUMMARY, excludeSystem: true })).toBe(false);
    expect(keepsSummary(SUMMARY, WINDOW)).toBe(false);
    expect(keepsSummary(WINDOW, SUMMARY)).toBe(false);
  });
});
