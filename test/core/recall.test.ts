/**
 * Recall and fold planning by example: every example of the original Python
 * module's documentation, then the rules the README's Semantics section adds
 * (seqs, tool pairs, the summary's not-yet-folded messages, degraded).
 */
import { countTokens as o200k } from "gpt-tokenizer/encoding/o200k_base";
import { describe, expect, it } from "vitest";
import {
  type FoldPlan,
  planFold,
  type Recalled,
  readStrategy,
  recall,
  recallSize,
  SUMMARY_PREFIX,
  visibleMessages,
} from "../../src/core/recall.js";
import type { ChatMessage, StoredMessage, Strategy } from "../../src/core/types.js";

type SummaryStrategy = Extract<Strategy, { kind: "summary" }>;
type SummaryState = { summary: string; summarizedThroughSeq: number; summaryTime: number };

const NO_SUMMARY: SummaryState = { summary: "", summarizedThroughSeq: 0, summaryTime: 0 };

function buffer(maxMessages = 0, excludeSystem = false): Strategy {
  return { kind: "buffer", maxMessages, excludeSystem, maxStored: 1000 };
}
function windowOf(window: number, excludeSystem = false): Strategy {
  return { kind: "window", window, excludeSystem, maxStored: 1000 };
}
function summaryOf(window: number, summarizeEvery: number, excludeSystem = false): SummaryStrategy {
  return { kind: "summary", window, summarizeEvery, model: "fake", excludeSystem, maxStored: 1000 };
}

const user = (content: string): ChatMessage => ({ role: "user", content });
const system = (content: string): ChatMessage => ({ role: "system", content });
function assistant(content: string, ...callIds: string[]): ChatMessage {
  if (callIds.length === 0) return { role: "assistant", content };
  return {
    role: "assistant",
    content,
    toolCalls: callIds.map((id) => ({ id, name: "lookup", arguments: "{}" })),
  };
}
const tool = (callId: string): ChatMessage => ({
  role: "tool",
  content: `result ${callId}`,
  toolCallId: callId,
});

/** Stores `messages` with consecutive seqs from `firstSeq` (a higher one models trimmed ones). */
function stored(messages: ChatMessage[], firstSeq = 1): StoredMessage[] {
  return messages.map((m, i) => ({ ...m, seq: firstSeq + i, createTime: 1_000 + firstSeq + i }));
}

const contents = (r: Recalled): string[] => r.messages.map((m) => m.content);
const seqs = (ms: readonly StoredMessage[]): number[] => ms.map((m) => m.seq);

/**
 * The seed's SummaryMemory.aget: fold what is due (with a scripted model, the
 * seed's FakeLLM), then recall. The service does the same, only the fold runs
 * in the background and is committed by seq.
 */
function getLikeSeed(
  strategy: SummaryStrategy,
  state: SummaryState,
  messages: StoredMessage[],
  reply: string,
  limit?: number,
): { state: SummaryState; plan: FoldPlan | undefined; recalled: Recalled } {
  const plan = planFold(
    strategy,
    messages,
    state.summarizedThroughSeq,
    recallSize(strategy, limit),
  );
  const next =
    plan === undefined
      ? state
      : { summary: reply, summarizedThroughSeq: plan.throughSeq, summaryTime: 9_000 };
  return { state: next, plan, recalled: recall(strategy, next, messages, { limit }) };
}

describe("the seed's documented examples", () => {
  it("WindowMemory(window=2): one, two, three recalls two, three", () => {
    const msgs = stored([user("one"), user("two"), user("three")]);
    expect(contents(recall(windowOf(2), NO_SUMMARY, msgs, {}))).toEqual(["two", "three"]);
  });

  it("WindowMemory(window=1): a, b recalls b", () => {
    const msgs = stored([user("a"), user("b")]);
    expect(contents(recall(windowOf(1), NO_SUMMARY, msgs, {}))).toEqual(["b"]);
  });

  it("BufferMemory: thread a recalls hi, an unknown thread recalls nothing", () => {
    const a = recall(buffer(), NO_SUMMARY, stored([user("hi")]), {});
    expect(a.messages[0]?.content).toBe("hi");
    expect(a.messages).toHaveLength(1);
    expect(recall(buffer(), NO_SUMMARY, [], {})).toMatchObject({
      messages: [],
      summary: "",
      tokens: 0,
      overBudget: false,
    });
  });

  it("SummaryMemory(window=2, summarize_every=2): six messages recall a summary, msg 4, msg 5", () => {
    const strategy = summaryOf(2, 2);
    const msgs = stored([0, 1, 2, 3, 4, 5].map((i) => user(`msg ${i}`)));
    const { plan, state, recalled } = getLikeSeed(
      strategy,
      NO_SUMMARY,
      msgs,
      "User greeted twice.",
    );

    expect(plan).toBeDefined();
    expect(seqs(plan?.messages ?? [])).toEqual([1, 2, 3, 4]);
    expect(plan?.throughSeq).toBe(4);
    expect(state.summarizedThroughSeq).toBe(4);
    expect(recalled.messages[0]?.role).toBe("system");
    expect(recalled.messages.map((m) => [m.role, m.content])).toEqual([
      ["system", "Summary of the earlier conversation:\nUser greeted twice."],
      ["user", "msg 4"],
      ["user", "msg 5"],
    ]);
    expect(recalled.summary).toBe("User greeted twice.");
    // Nothing more is due: the next Get changes nothing.
    expect(planFold(strategy, msgs, state.summarizedThroughSeq, 2)).toBeUndefined();
  });
});

describe("recallSize and limit", () => {
  it("takes the strategy's size, or the limit when given (0 included)", () => {
    expect(recallSize(buffer(), undefined)).toBe(0);
    expect(recallSize(buffer(7), undefined)).toBe(7);
    expect(recallSize(windowOf(3), undefined)).toBe(3);
    expect(recallSize(summaryOf(10, 6), undefined)).toBe(10);
    expect(recallSize(windowOf(3), 5)).toBe(5);
    expect(recallSize(summaryOf(10, 6), 0)).toBe(0);
  });

  it("overrides the window for one call", () => {
    const msgs = stored(["a", "b", "c", "d"].map(user));
    expect(contents(recall(windowOf(2), NO_SUMMARY, msgs, { limit: 3 }))).toEqual(["b", "c", "d"]);
    expect(contents(recall(windowOf(2), NO_SUMMARY, msgs, { limit: 1 }))).toEqual(["d"]);
    expect(contents(recall(buffer(), NO_SUMMARY, msgs, { limit: 2 }))).toEqual(["c", "d"]);
    expect(contents(recall(buffer(3), NO_SUMMARY, msgs, { limit: 1 }))).toEqual(["d"]);
  });

  it("0 returns everything for buffer and window, as does an unset max_messages", () => {
    const msgs = stored(["a", "b", "c", "d"].map(user));
    const all = ["a", "b", "c", "d"];
    expect(contents(recall(buffer(2), NO_SUMMARY, msgs, { limit: 0 }))).toEqual(all);
    expect(contents(recall(windowOf(2), NO_SUMMARY, msgs, { limit: 0 }))).toEqual(all);
    expect(contents(recall(buffer(), NO_SUMMARY, msgs, {}))).toEqual(all);
    expect(contents(recall(buffer(4), NO_SUMMARY, msgs, {}))).toEqual(all);
  });

  it("overrides the summary's window, for the fold as in the seed", () => {
    const strategy = summaryOf(10, 2);
    const msgs = stored([0, 1, 2, 3, 4, 5].map((i) => user(`msg ${i}`)));
    const { plan, recalled } = getLikeSeed(strategy, NO_SUMMARY, msgs, "S", 2);
    expect(seqs(plan?.messages ?? [])).toEqual([1, 2, 3, 4]);
    expect(contents(recalled)).toEqual([`${SUMMARY_PREFIX}S`, "msg 4", "msg 5"]);
  });

  it("0 for summary returns the summary and only the messages it does not cover", () => {
    const strategy = summaryOf(2, 3);
    const msgs = stored([0, 1, 2, 3, 4, 5].map((i) => user(`msg ${i}`)));
    const state = { summary: "S", summarizedThroughSeq: 4, summaryTime: 5 };
    // Two unfolded messages are fewer than summarize_every: no fold, both returned.
    expect(planFold(strategy, msgs, 4, 0)).toBeUndefined();
    expect(contents(recall(strategy, state, msgs, { limit: 0 }))).toEqual([
      `${SUMMARY_PREFIX}S`,
      "msg 4",
      "msg 5",
    ]);
    // With enough of them, limit 0 folds them all (the seed's recent = []).
    const more = getLikeSeed(strategy, NO_SUMMARY, msgs, "all six", 0);
    expect(seqs(more.plan?.messages ?? [])).toEqual([1, 2, 3, 4, 5, 6]);
    expect(contents(more.recalled)).toEqual([`${SUMMARY_PREFIX}all six`]);
  });
});

describe("exclude_system", () => {
  const msgs = stored([system("be brief"), user("a"), system("mid"), user("b"), user("c")]);

  it("leaves system messages out and counts only the others", () => {
    expect(seqs(visibleMessages(windowOf(2, true), msgs))).toEqual([2, 4, 5]);
    expect(contents(recall(windowOf(2, true), NO_SUMMARY, msgs, {}))).toEqual(["b", "c"]);
    expect(contents(recall(windowOf(3, true), NO_SUMMARY, msgs, {}))).toEqual(["a", "b", "c"]);
    expect(contents(recall(buffer(0, true), NO_SUMMARY, msgs, {}))).toEqual(["a", "b", "c"]);
  });

  it("keeps them otherwise, counted like any message", () => {
    expect(contents(recall(windowOf(2), NO_SUMMARY, msgs, {}))).toEqual(["b", "c"]);
    expect(contents(recall(windowOf(3), NO_SUMMARY, msgs, {}))).toEqual(["mid", "b", "c"]);
  });

  it("summary: folds only visible messages, and still replays the summary", () => {
    const strategy = summaryOf(1, 2, true);
    const plan = planFold(strategy, msgs, 0, 1);
    expect(seqs(plan?.messages ?? [])).toEqual([2, 4]);
    const state = { summary: "S", summarizedThroughSeq: plan?.throughSeq ?? 0, summaryTime: 7 };
    const r = recall(strategy, state, msgs, {});
    expect(r.messages.map((m) => [m.role, m.content])).toEqual([
      ["system", `${SUMMARY_PREFIX}S`],
      ["user", "c"],
    ]);
  });
});

describe("tool calls stay with their results", () => {
  it("window widens back to the assistant that made the call", () => {
    const msgs = stored([user("q"), assistant("call", "x"), tool("x"), assistant("answer")]);
    const r = recall(windowOf(2), NO_SUMMARY, msgs, {});
    expect(contents(r)).toEqual(["call", "result x", "answer"]);
  });

  it("window widens over parallel results to the assistant", () => {
    const msgs = stored([
      user("q"),
      assistant("calls", "x", "y", "z"),
      tool("x"),
      tool("y"),
      tool("z"),
      assistant("answer"),
    ]);
    for (const window of [2, 3, 4, 5]) {
      const r = recall(windowOf(window), NO_SUMMARY, msgs, {});
      expect(seqs(r.messages)).toEqual([2, 3, 4, 5, 6]);
    }
    expect(seqs(recall(windowOf(6), NO_SUMMARY, msgs, {}).messages)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(seqs(recall(windowOf(1), NO_SUMMARY, msgs, {}).messages)).toEqual([6]);
  });

  it("window does not widen when the cut already starts on the assistant", () => {
    const msgs = stored([user("q"), assistant("call", "x"), tool("x")]);
    expect(contents(recall(windowOf(2), NO_SUMMARY, msgs, {}))).toEqual(["call", "result x"]);
  });

  it("window returns a thread that itself starts on orphaned results (call trimmed) as stored", () => {
    // max_stored dropped the assistant (seqs 1-2); the seed's loop stops at index 0.
    const msgs = stored([tool("x"), tool("y"), user("next")], 3);
    expect(seqs(recall(windowOf(2), NO_SUMMARY, msgs, {}).messages)).toEqual([3, 4, 5]);
    expect(seqs(recall(windowOf(1), NO_SUMMARY, msgs, {}).messages)).toEqual([5]);
  });

  it("buffer's ceiling drops a leading result whose call was cut off, never widens", () => {
    const msgs = stored([user("q"), assistant("call", "x"), tool("x"), assistant("answer")]);
    expect(contents(recall(buffer(2), NO_SUMMARY, msgs, {}))).toEqual(["answer"]);
    expect(contents(recall(buffer(3), NO_SUMMARY, msgs, {}))).toEqual([
      "call",
      "result x",
      "answer",
    ]);
    const parallel = stored([assistant("calls", "x", "y"), tool("x"), tool("y"), user("ok")]);
    expect(contents(recall(buffer(3), NO_SUMMARY, parallel, {}))).toEqual(["ok"]);
    expect(contents(recall(buffer(0), NO_SUMMARY, parallel, { limit: 2 }))).toEqual(["ok"]);
    // Only tool results in the cut: nothing rather than an orphan.
    expect(recall(buffer(1), NO_SUMMARY, parallel.slice(0, 3), {}).messages).toEqual([]);
  });
});

describe("summary folds", () => {
  it("is not due until summarize_every messages overflow the window", () => {
    const strategy = summaryOf(2, 3);
    const msgs = stored(["a", "b", "c", "d"].map(user));
    expect(planFold(strategy, msgs, 0, 2)).toBeUndefined();
    const five = stored(["a", "b", "c", "d", "e"].map(user));
    expect(seqs(planFold(strategy, five, 0, 2)?.messages ?? [])).toEqual([1, 2, 3]);
  });

  it("folds all the overflow in one call, from the seq after the last fold", () => {
    const strategy = summaryOf(2, 2);
    const msgs = stored(["a", "b", "c", "d", "e", "f", "g", "h", "i"].map(user));
    expect(planFold(strategy, msgs, 0, 2)).toEqual({ messages: msgs.slice(0, 7), throughSeq: 7 });
    expect(planFold(strategy, msgs, 3, 2)?.messages).toEqual(msgs.slice(3, 7));
    expect(planFold(strategy, msgs, 6, 2)).toBeUndefined();
  });

  it("counts by seq: trimmed messages neither shift nor repeat the fold", () => {
    const strategy = summaryOf(2, 2);
    // Seqs 1-4 were folded and then trimmed; 5-10 are stored.
    const msgs = stored(["e", "f", "g", "h", "i", "j"].map(user), 5);
    const plan = planFold(strategy, msgs, 4, 2);
    expect(seqs(plan?.messages ?? [])).toEqual([5, 6, 7, 8]);
    expect(plan?.throughSeq).toBe(8);
    const state = { summary: "S", summarizedThroughSeq: 8, summaryTime: 1 };
    expect(contents(recall(strategy, state, msgs, {}))).toEqual([`${SUMMARY_PREFIX}S`, "i", "j"]);
  });

  it("moves the boundary back so a call and its results stay verbatim together", () => {
    const strategy = summaryOf(2, 2);
    const msgs = stored([user("a"), user("b"), assistant("calls", "x", "y"), tool("x"), tool("y")]);
    // Overflow would be seqs 1-3, leaving result x first: the assistant stays too.
    const plan = planFold(strategy, msgs, 0, 2);
    expect(seqs(plan?.messages ?? [])).toEqual([1, 2]);
    expect(plan?.throughSeq).toBe(2);
    const state = { summary: "S", summarizedThroughSeq: 2, summaryTime: 1 };
    expect(seqs(recall(strategy, state, msgs, {}).messages)).toEqual([0, 3, 4, 5]);
  });

  it("still folds what is left once due, even below summarize_every", () => {
    const strategy = summaryOf(1, 3);
    const msgs = stored([user("a"), assistant("calls", "x", "y"), tool("x"), tool("y")]);
    expect(seqs(planFold(strategy, msgs, 0, 1)?.messages ?? [])).toEqual([1]);
  });

  it("does not fold when moving the boundary back leaves nothing", () => {
    const strategy = summaryOf(2, 2);
    const msgs = stored([assistant("calls", "x", "y", "z"), tool("x"), tool("y"), tool("z")]);
    expect(planFold(strategy, msgs, 0, 2)).toBeUndefined();
    // Once an answer follows, the whole exchange can go.
    const answered = stored([...msgs, user("thanks"), assistant("welcome"), user("bye")]);
    expect(seqs(planFold(strategy, answered, 0, 2)?.messages ?? [])).toEqual([1, 2, 3, 4, 5]);
  });

  it("folds everything unfolded with size 0: no message stays to be split from", () => {
    const strategy = summaryOf(0, 2);
    const msgs = stored([user("q"), assistant("calls", "x"), tool("x")]);
    expect(seqs(planFold(strategy, msgs, 0, 0)?.messages ?? [])).toEqual([1, 2, 3]);
  });
});

describe("summary recall", () => {
  const strategy = summaryOf(2, 3);
  const msgs = stored([0, 1, 2, 3, 4, 5, 6, 7].map((i) => user(`msg ${i}`)));

  it("without a summary is the unfolded messages alone", () => {
    const r = recall(strategy, NO_SUMMARY, msgs.slice(0, 4), {});
    expect(r).toMatchObject({
      messages: msgs.slice(0, 4),
      summary: "",
      maxTokens: 0,
      overBudget: false,
    });
  });

  it("replays the summary as a system message with seq 0 and the summary's time", () => {
    const r = recall(
      strategy,
      { summary: "S", summarizedThroughSeq: 4, summaryTime: 42 },
      msgs,
      {},
    );
    expect(r.messages[0]).toEqual({
      role: "system",
      content: "Summary of the earlier conversation:\nS",
      seq: 0,
      createTime: 42,
      // 3 per message + the text's o200k_base tokens.
      tokens: 3 + o200k("Summary of the earlier conversation:\nS"),
    });
    expect(r.summary).toBe("S");
  });

  it("returns the overflow not yet folded too: every message is in one part", () => {
    // Seqs 5-8 are unfolded; the window is 2 but 2 < summarize_every, so no fold yet.
    const state = { summary: "S", summarizedThroughSeq: 4, summaryTime: 1 };
    expect(planFold(strategy, msgs, 4, 2)).toBeUndefined();
    expect(seqs(recall(strategy, state, msgs, {}).messages)).toEqual([0, 5, 6, 7, 8]);
    expect(seqs(recall(strategy, state, msgs, { limit: 1 }).messages)).toEqual([0, 5, 6, 7, 8]);
  });

  it("degraded: the last good summary and a plain window of the unfolded messages", () => {
    const state = { summary: "S", summarizedThroughSeq: 4, summaryTime: 1 };
    const r = recall(strategy, state, msgs, { degraded: true });
    expect(seqs(r.messages)).toEqual([0, 7, 8]);
    expect(r.summary).toBe("S");
    expect(seqs(recall(strategy, state, msgs, { degraded: true, limit: 3 }).messages)).toEqual([
      0, 6, 7, 8,
    ]);
    expect(seqs(recall(strategy, state, msgs, { degraded: true, limit: 0 }).messages)).toEqual([
      0, 5, 6, 7, 8,
    ]);
    expect(seqs(recall(strategy, NO_SUMMARY, msgs, { degraded: true }).messages)).toEqual([7, 8]);
  });

  it("degraded: the window widens over tool results, within the unfolded messages", () => {
    const withTools = stored([
      user("a"),
      user("b"),
      assistant("calls", "x", "y"),
      tool("x"),
      tool("y"),
    ]);
    const state = { summary: "S", summarizedThroughSeq: 1, summaryTime: 1 };
    const r = recall(strategy, state, withTools, { degraded: true });
    expect(seqs(r.messages)).toEqual([0, 3, 4, 5]);
  });

  it("does not change the caller's arrays", () => {
    const frozen = Object.freeze(msgs.map((m) => Object.freeze({ ...m })));
    const state = { summary: "S", summarizedThroughSeq: 2, summaryTime: 1 };
    expect(() => recall(strategy, state, frozen, { degraded: true })).not.toThrow();
    expect(() => planFold(strategy, frozen, 0, 2)).not.toThrow();
    expect(recall(strategy, state, frozen, {}).messages).not.toBe(frozen);
    expect(frozen).toHaveLength(8);
  });
});

describe("readStrategy: a Get's recall over the thread's strategy", () => {
  const msgs = stored([system("be brief"), user("a"), user("b"), user("c")]);
  const summaryState: SummaryState = { summary: "s", summarizedThroughSeq: 2, summaryTime: 7 };

  it("is the thread's strategy without a recall", () => {
    const thread = windowOf(2);
    expect(readStrategy(thread, undefined)).toBe(thread);
  });

  it("reads a window or a buffer with the reader's sizes and exclude_system, keeping max_stored", () => {
    const thread: Strategy = { ...windowOf(2), maxStored: 7 };
    const view = readStrategy(thread, buffer(0, true));
    expect(view).toEqual({ kind: "buffer", maxMessages: 0, excludeSystem: true, maxStored: 7 });
    expect(contents(recall(view, NO_SUMMARY, msgs, {}))).toEqual(["a", "b", "c"]);
    expect(contents(recall(readStrategy(buffer(), windowOf(1)), NO_SUMMARY, msgs, {}))).toEqual([
      "c",
    ]);
  });

  it("reads a summary recall on a thread without a summary as a window of its size", () => {
    const view = readStrategy(windowOf(20), summaryOf(2, 2));
    expect(view).toEqual(windowOf(2));
    expect(contents(recall(view, NO_SUMMARY, msgs, {}))).toEqual(["b", "c"]);
    // Window 0 keeps nothing back from a fold: with no summary, that is every message.
    expect(contents(recall(readStrategy(buffer(), summaryOf(0, 2)), NO_SUMMARY, msgs, {}))).toEqual(
      ["be brief", "a", "b", "c"],
    );
  });

  it("keeps a summary thread's summariser and fold pace under a summary recall", () => {
    const thread = summaryOf(10, 6);
    const view = readStrategy(thread, { ...summaryOf(1, 99), model: "other" });
    expect(view).toMatchObject({ kind: "summary", window: 1, summarizeEvery: 6, model: "fake" });
    const r = recall(view, summaryState, msgs, {});
    expect(contents(r)).toEqual([`${SUMMARY_PREFIX}s`, "b", "c"]);
  });
});
