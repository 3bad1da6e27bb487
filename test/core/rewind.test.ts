import { describe, expect, it } from "vitest";
import { MemoryError } from "../../src/core/errors.js";
import { decideRewind, forgetRequest } from "../../src/core/rewind.js";
import type { ThreadState } from "../../src/core/types.js";

function thread(over: Partial<ThreadState> = {}): ThreadState {
  return {
    threadId: "t",
    incarnation: "i",
    strategy: { kind: "buffer", excludeSystem: false, maxStored: 1000 },
    lastSeq: 10,
    summarizedThroughSeq: 0,
    summary: "",
    summaryTime: 0,
    createTime: 1,
    updateTime: 1,
    ...over,
  } as ThreadState;
}

function codeOf(fn: () => unknown): { code: string; field: string | undefined } {
  try {
    fn();
  } catch (err) {
    if (err instanceof MemoryError) return { code: err.code, field: err.field };
    throw err;
  }
  throw new Error("did not throw");
}

describe("decideRewind", () => {
  const ask = { toSeq: 9, expectedLastSeq: undefined, now: 50 };

  it("drops the messages after toSeq and keeps a summary that covers none of them", () => {
    const plan = decideRewind(
      thread({ summarizedThroughSeq: 5, summary: "s", summaryTime: 3 }),
      1,
      ask,
    );
    expect(plan).toEqual({
      thread: expect.objectContaining({
        lastSeq: 9,
        summarizedThroughSeq: 5,
        summary: "s",
        updateTime: 50,
      }),
      dropAfterSeq: 9,
      summaryDropped: false,
    });
  });

  it("drops a summary that covers a dropped message when every message is still stored", () => {
    const plan = decideRewind(
      thread({ summarizedThroughSeq: 10, summary: "s", summaryTime: 3 }),
      1,
      ask,
    );
    expect(plan).not.toBe("unchanged");
    if (plan === "unchanged") return;
    expect(plan.summaryDropped).toBe(true);
    expect(plan.thread).toMatchObject({
      summary: "",
      summarizedThroughSeq: 0,
      summaryTime: 0,
      lastSeq: 9,
    });
  });

  it("changes nothing when toSeq is the last seq", () => {
    expect(decideRewind(thread(), 1, { ...ask, toSeq: 10 })).toBe("unchanged");
  });

  it("lets a thread go back to empty", () => {
    const plan = decideRewind(thread(), 1, { ...ask, toSeq: 0 });
    expect(plan !== "unchanged" && plan.thread.lastSeq).toBe(0);
  });

  it.each([
    ["no thread", undefined, 1, ask, "not_found", "thread_id"],
    [
      "expected_last_seq differs",
      thread(),
      1,
      { ...ask, expectedLastSeq: 8 },
      "aborted",
      "expected_last_seq",
    ],
    ["to_seq past last_seq", thread(), 1, { ...ask, toSeq: 11 }, "out_of_range", "to_seq"],
    [
      "messages already trimmed",
      thread(),
      6,
      { ...ask, toSeq: 4 },
      "failed_precondition",
      "to_seq",
    ],
    [
      "a summary holding messages no longer stored",
      thread({ summarizedThroughSeq: 9, summary: "s" }),
      4,
      { ...ask, toSeq: 7 },
      "failed_precondition",
      "to_seq",
    ],
  ] as const)("refuses: %s", (_name, t, oldest, a, code, field) => {
    expect(codeOf(() => decideRewind(t, oldest, a))).toEqual({ code, field });
  });

  it("allows going back to just before the oldest stored message", () => {
    const plan = decideRewind(thread(), 6, { ...ask, toSeq: 5 });
    expect(plan !== "unchanged" && plan.dropAfterSeq).toBe(5);
  });
});

describe("forgetRequest", () => {
  it("forgets exactly the Adds that stored a dropped message", () => {
    expect(forgetRequest(10, 9)).toBe(true);
    expect(forgetRequest(9, 9)).toBe(false);
    expect(forgetRequest(3, 9)).toBe(false);
  });
});
