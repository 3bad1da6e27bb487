import { describe, expect, it } from "vitest";
import { shapeRecalled } from "../../../src/core/get-shaping.js";
import { PROFILES } from "../../../src/core/profiles/index.js";
import { applyProfile } from "../../../src/core/profiles/shape.js";
import { recall } from "../../../src/core/recall.js";
import { countMessageTokens } from "../../../src/core/tokens.js";
import { clearToolResults } from "../../../src/core/tool-clearing.js";
import type { ChatMessage, Profile, StoredMessage, Strategy } from "../../../src/core/types.js";
import { CHECKERS, PROFILE_NAMES } from "./checkers.js";

function thread(...msgs: ChatMessage[]): StoredMessage[] {
  return msgs.map((m, i) => Object.freeze({ ...m, seq: i + 1, createTime: i + 1 }));
}
const user = (content: string): ChatMessage => ({ role: "user", content });
const assistant = (content: string): ChatMessage => ({ role: "assistant", content });
const system = (content: string): ChatMessage => ({ role: "system", content });
const calls = (content: string, ...ids: string[]): ChatMessage => ({
  role: "assistant",
  content,
  toolCalls: ids.map((id) => ({ id, name: `fn_${id}`, arguments: "{}" })),
});
const result = (id: string, content = `result of ${id}`): ChatMessage => ({
  role: "tool",
  content,
  toolCallId: id,
});

const shape = (msgs: readonly StoredMessage[], profile: Profile, budget?: number) =>
  applyProfile(msgs, PROFILES[profile], "o200k_base", budget).messages;
const contents = (msgs: readonly ChatMessage[]) => msgs.map((m) => `${m.role}:${m.content}`);

describe("the checkers reject what their provider rejects", () => {
  const orphanFirst = thread(result("a"), user("hi"));
  const unanswered = thread(user("q"), calls("", "a"), user("again"));
  const lateSystem = thread(user("q"), assistant("a"), system("be brief"), user("q2"));
  const twoUsers = thread(user("q"), user("q2"));
  const assistantFirst = thread(assistant("hello"), user("q"));

  it.each(PROFILE_NAMES)("%s: a result without its call, a call without its result", (p) => {
    expect(CHECKERS[p](orphanFirst)).not.toEqual([]);
    expect(CHECKERS[p](unanswered)).not.toEqual([]);
    // A call pending at the end is the caller's to answer.
    expect(CHECKERS[p](thread(user("q"), calls("", "a", "b"), result("a")))).toEqual([]);
  });

  it("OpenAI accepts system messages anywhere, same-role runs and an assistant first", () => {
    for (const p of ["openai_chat", "openai_responses"] as const) {
      expect(CHECKERS[p](lateSystem)).toEqual([]);
      expect(CHECKERS[p](twoUsers)).toEqual([]);
      expect(CHECKERS[p](assistantFirst)).toEqual([]);
    }
  });

  it.each(["anthropic", "gemini", "bedrock_converse"] as const)(
    "%s: system only at the head, a user turn first, roles alternating",
    (p) => {
      expect(CHECKERS[p](lateSystem)).not.toEqual([]);
      expect(CHECKERS[p](twoUsers)).not.toEqual([]);
      expect(CHECKERS[p](assistantFirst)).not.toEqual([]);
      expect(
        CHECKERS[p](thread(system("s"), user("q"), calls("", "a"), result("a"), user("ok"))),
      ).toEqual([]);
    },
  );
});

describe("profiles repair what the cut left", () => {
  it.each(PROFILE_NAMES)("%s drops a tool result whose call was cut off", (p) => {
    const out = shape(thread(result("a"), result("b"), user("next"), assistant("done")), p);
    expect(contents(out)).toEqual(["user:next", "assistant:done"]);
  });

  it.each(PROFILE_NAMES)("%s keeps parallel calls and all their results as one group", (p) => {
    const msgs = thread(
      user("q"),
      calls("", "a", "b"),
      result("b"),
      result("a"),
      assistant("both"),
    );
    expect(shape(msgs, p).map((m) => m.seq)).toEqual([1, 2, 3, 4, 5]);
  });

  it.each(PROFILE_NAMES)("%s keeps a pending call whole at the end", (p) => {
    const msgs = thread(user("q"), calls("", "a", "b"), result("a"));
    const out = shape(msgs, p);
    expect(out.map((m) => m.seq)).toEqual([1, 2, 3]);
    expect(out[1]?.toolCalls?.map((c) => c.id)).toEqual(["a", "b"]);
  });

  it.each(PROFILE_NAMES)("%s drops a call never answered before the next turn", (p) => {
    const out = shape(thread(user("q"), calls("let me look", "a", "b"), result("b"), user("?")), p);
    expect(out[1]?.toolCalls?.map((c) => c.id)).toEqual(["b"]);
    expect(out[1]?.tokens).toBe(countMessageTokens(out[1] as ChatMessage, "o200k_base"));
    const silent = shape(thread(user("q"), calls("", "a"), user("?")), p);
    expect(silent.some((m) => m.role === "assistant")).toBe(false);
  });

  it("OpenAI profiles leave system messages where they are and an assistant first", () => {
    const msgs = thread(assistant("hello"), user("q"), system("be brief"), user("q2"));
    expect(shape(msgs, "openai_chat")).toEqual(msgs);
    expect(shape(msgs, "openai_responses")).toEqual(msgs);
  });

  it.each(["anthropic", "gemini", "bedrock_converse"] as const)(
    "%s moves system messages to the head and starts on a user turn",
    (p) => {
      const msgs = thread(
        assistant("hello"),
        calls("", "a"),
        result("a"),
        user("q"),
        system("be brief"),
        assistant("ok"),
      );
      expect(contents(shape(msgs, p))).toEqual(["system:be brief", "user:q", "assistant:ok"]);
    },
  );

  it.each(["anthropic", "gemini", "bedrock_converse"] as const)(
    "%s merges consecutive user and assistant messages",
    (p) => {
      const msgs = thread(
        user("a"),
        user("b"),
        assistant("c"),
        calls("d", "x"),
        result("x"),
        user("e"),
      );
      const out = shape(msgs, p);
      expect(contents(out)).toEqual([
        "user:a\n\nb",
        "assistant:c\n\nd",
        "tool:result of x",
        "user:e",
      ]);
      expect(out[1]?.toolCalls?.map((c) => c.id)).toEqual(["x"]);
      expect(out[0]?.seq).toBe(2);
      // The parts' counts less 3 per message merged away, plus 1 per joining blank line.
      const count = (i: number) => countMessageTokens(msgs[i] as ChatMessage, "o200k_base");
      expect(out[0]?.tokens).toBe(count(0) + count(1) - 3 + 1);
      expect(out[1]?.tokens).toBe(count(2) + count(3) - 3 + 1);
      expect(CHECKERS[p](out)).toEqual([]);
    },
  );
});

describe("the summary where the provider accepts it", () => {
  const summaryThread: Strategy = {
    kind: "summary",
    window: 2,
    summarizeEvery: 2,
    model: "fake",
    excludeSystem: false,
    maxStored: 1000,
  };
  const state = { summary: "they met", summarizedThroughSeq: 2, summaryTime: 5 };
  const msgs = thread(user("q1"), assistant("a1"), assistant("more"), user("q2"));

  it("stays a system message at the head when a user turn follows", () => {
    const r = recall(summaryThread, { ...state, summarizedThroughSeq: 3 }, msgs, {});
    const out = shapeRecalled(r, { profile: "anthropic", encoding: "o200k_base" }).messages;
    expect(out.map((m) => m.role)).toEqual(["system", "user"]);
  });

  it.each(["anthropic", "gemini", "bedrock_converse"] as const)(
    "%s: becomes the first user turn when the kept messages start on an assistant turn",
    (p) => {
      const r = recall(summaryThread, state, msgs, {});
      const out = shapeRecalled(r, { profile: p, encoding: "o200k_base" }).messages;
      expect(out.map((m) => [m.role, m.seq])).toEqual([
        ["user", 0],
        ["assistant", 3],
        ["user", 4],
      ]);
      expect(out[0]?.content).toContain("they met");
    },
  );
});

describe("token budgets after shaping", () => {
  it("drops the oldest turns when repair would top a budget the cut kept", () => {
    // A stored count from an older rule, smaller than a recount: stripping the
    // unanswered call counts the assistant message again.
    const msgs = thread(
      { ...user("first question"), tokens: 1 },
      { ...calls("Let me look that up in the archive.", "a", "b"), tokens: 1 },
      { ...result("a", "found"), tokens: 1 },
      { ...user("last question"), tokens: 1 },
    );
    const out = shape(msgs, "openai_chat", 10);
    let tokens = 0;
    for (const m of out) tokens += m.tokens ?? 0;
    expect(tokens).toBeLessThanOrEqual(10);
    expect(contents(out)).toEqual(["user:last question"]);
    // Without a budget the repair stands.
    const unbounded = shape(msgs, "openai_chat");
    expect(unbounded.map((m) => m.seq)).toEqual([1, 2, 3, 4]);
    expect(unbounded[1]?.toolCalls?.map((c) => c.id)).toEqual(["a"]);
    expect(unbounded[1]?.tokens).toBeGreaterThan(10);
  });

  it("counts a merged message as its parts less the overhead they no longer pay", () => {
    const msgs = thread(
      { ...user("hello"), name: "ann" },
      { ...user("again"), name: "bob" },
      assistant("hi"),
    );
    const out = shape(msgs, "gemini");
    const count = (i: number) => countMessageTokens(msgs[i] as ChatMessage, "o200k_base");
    const names = countMessageTokens({ role: "user", content: "", name: "ann" }, "o200k_base") - 3;
    const names2 = countMessageTokens({ role: "user", content: "", name: "bob" }, "o200k_base") - 3;
    expect(out[0]?.name).toBeUndefined();
    expect(out[0]?.tokens).toBe(count(0) + count(1) - 3 + 1 - names - names2);
    expect(out[0]?.tokens).toBeLessThan(count(0) + count(1));
  });

  it("counts what the placeholders saved and keeps the stored messages as they were", () => {
    const big = "x ".repeat(400);
    const msgs = thread(
      user("q"),
      calls("", "a"),
      result("a", big),
      calls("", "b"),
      result("b", big),
      assistant("ok"),
    );
    const window: Strategy = {
      kind: "window",
      window: 20,
      excludeSystem: false,
      maxStored: 1000,
      maxTokens: 100_000,
    };
    const r = recall(window, { summary: "", summarizedThroughSeq: 0, summaryTime: 0 }, msgs, {});
    const shaped = shapeRecalled(r, { clearing: { keepToolTurns: 1 }, encoding: "o200k_base" });
    expect(shaped.clearedToolResults).toBe(1);
    expect(shaped.messages[2]?.content).toBe(
      `[tool result cleared: fn_a call a, ${r.messages[2]?.tokens} tokens]`,
    );
    expect(shaped.messages[4]?.content).toBe(big);
    expect(shaped.tokens).toBe(r.tokens - shaped.clearedToolTokens);
    expect(shaped.clearedToolTokens).toBe(
      (r.messages[2]?.tokens ?? 0) - (shaped.messages[2]?.tokens ?? 0),
    );
    expect(msgs[2]?.content).toBe(big);
  });

  it("clears by tokens from the newest result back", () => {
    const msgs = thread(
      calls("", "a"),
      result("a", "alpha ".repeat(50)),
      calls("", "b"),
      result("b", "beta ".repeat(50)),
    );
    const newest = msgs[3]?.tokens ?? countMessageTokens(msgs[3] as ChatMessage, "o200k_base");
    const kept = clearToolResults(msgs, { keepToolTokens: newest }, "o200k_base");
    expect(kept.count).toBe(1);
    expect(kept.messages[3]).toBe(msgs[3]);
    expect(clearToolResults(msgs, { keepToolTokens: newest - 1 }, "o200k_base").count).toBe(2);
    expect(clearToolResults(msgs, { keepToolTurns: 2 }, "o200k_base").count).toBe(0);
  });
});

describe("the tool a placeholder names", () => {
  const named = (id: string, name: string, content = ""): ChatMessage => ({
    role: "assistant",
    content,
    toolCalls: [{ id, name, arguments: "{}" }],
  });
  const placeholderTool = (m: ChatMessage | undefined) =>
    /^\[tool result cleared: (.*) call /.exec(m?.content ?? "")?.[1];

  it("is the call right before the result, when an id repeats", () => {
    const msgs = thread(
      named("c1", "search"),
      result("c1", "x ".repeat(200)),
      named("c1", "fetch"),
      result("c1", "y ".repeat(200)),
      assistant("done"),
    );
    const out = clearToolResults(msgs, { keepToolTurns: 0 }, "o200k_base").messages;
    expect([placeholderTool(out[1]), placeholderTool(out[3])]).toEqual(["search", "fetch"]);
  });

  it("for a stray result, the newest call of its id in the list, else its own name", () => {
    const msgs = thread(
      named("c1", "search"),
      user("between"),
      result("c1", "x ".repeat(200)),
      { ...result("c9", "z ".repeat(200)), name: "lookup" },
      result("c8", "w ".repeat(200)),
      named("c1", "fetch"),
    );
    const out = clearToolResults(msgs, { keepToolTurns: 0 }, "o200k_base").messages;
    expect([out[2], out[3], out[4]].map(placeholderTool)).toEqual([
      "fetch",
      "lookup",
      "unknown tool",
    ]);
  });
});

describe("work linear in the list", () => {
  // Quadratic merging or scanning would take minutes here, past the test's timeout.
  it("merges 20,000 consecutive user messages in one step", () => {
    const msgs = thread(...Array.from({ length: 20_000 }, (_, i) => user(`line ${i}`)));
    const out = shape(msgs, "bedrock_converse");
    expect(out).toHaveLength(1);
    expect(out[0]?.seq).toBe(20_000);
    let parts = 0;
    for (const m of msgs) parts += countMessageTokens(m, "o200k_base");
    expect(out[0]?.tokens).toBe(parts - 19_999 * 3 + 19_999);
  });

  it("clears 20,000 results of one parallel call, and 150,000 with no call before them", () => {
    const ids = Array.from({ length: 20_000 }, (_, i) => `c${i}`);
    const wide = thread(
      user("q"),
      calls("", ...ids),
      ...ids.map((id) => result(id, "r ".repeat(40))),
    );
    const cleared = clearToolResults(wide, { keepToolTurns: 0 }, "o200k_base");
    expect(cleared.count).toBe(20_000);
    expect(cleared.messages[20_001]?.content).toContain("fn_c19999 call c19999");
    // Each result's call is looked for once per run, not once per result.
    const headless = Array.from({ length: 150_000 }, (_, i) =>
      Object.freeze({ ...result(`h${i}`, "r ".repeat(40)), seq: i + 1, createTime: i + 1 }),
    );
    expect(clearToolResults(headless, { keepToolTurns: 0 }, "o200k_base").count).toBe(150_000);
    // Linear: about 3 s here; scanning back from every result: about 25 s.
  }, 12_000);

  it("takes a call followed by 20,000 stray results", () => {
    const strays = Array.from({ length: 20_000 }, (_, i) => result(`x${i}`));
    const msgs = thread(user("q"), calls("", "a"), result("a"), ...strays, user("next"));
    for (const p of PROFILE_NAMES) {
      expect(shape(msgs, p).map((m) => m.seq)).toEqual([1, 2, 3, 20_004]);
    }
  });
});
