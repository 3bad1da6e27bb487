import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Profile, Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { CHECKERS } from "../core/profiles/checkers.js";
import { type AppHarness, DRIVERS, startAppHarness } from "./app-harness.js";
import { CallFailed, type Driver } from "./drivers.js";

/**
 * GetRequest.profile and tool-output clearing through the whole server, over
 * gRPC and each Connect protocol (README, Provider profiles; Clearing old
 * tool output), and in Connect JSON as curl sends it.
 */
let h: AppHarness;
beforeAll(async () => {
  h = await startAppHarness(["--summarizer", "openai"]);
});
afterAll(async () => {
  await h.close();
});

const BIG = "row ".repeat(300);
const call = (id: string, name: string) => ({ id, name, arguments: "{}" });

/** A thread with parallel calls, a system message mid-conversation, and a call still pending at the end. */
const trimmed = [
  { role: Role.USER, content: "compare the two files" },
  { role: Role.ASSISTANT, toolCalls: [call("c1", "read"), call("c2", "read")] },
  { role: Role.TOOL, toolCallId: "c1", content: BIG },
  { role: Role.TOOL, toolCallId: "c2", content: BIG },
  { role: Role.ASSISTANT, content: "They differ in one row." },
  { role: Role.SYSTEM, content: "Answer in one line." },
  { role: Role.USER, content: "which row?" },
  { role: Role.ASSISTANT, toolCalls: [call("c3", "diff")] },
];

/** Expects `p` to fail with INVALID_ARGUMENT naming `field`. */
async function expectInvalid(p: Promise<unknown>, field: string): Promise<void> {
  await expect(p).rejects.toBeInstanceOf(CallFailed);
  await expect(p).rejects.toMatchObject({
    code: "INVALID_ARGUMENT",
    message: expect.stringContaining(field),
  });
}

describe.each(DRIVERS)("profiles and clearing over %s", (name, connect) => {
  let d: Driver;
  beforeAll(() => {
    d = connect(h.app);
  });
  afterAll(() => d.close());

  it("shapes one stored thread for each provider", async () => {
    const threadId = `trimmed-${name}`;
    // Stored from the middle of an exchange: the first result's call is not in the thread.
    const orphan = { role: Role.TOOL, toolCallId: "c0", content: "a late result" };
    await d.add({ threadId, messages: [orphan, ...trimmed.slice(4)] });
    const plain = await d.get({ threadId });
    expect(plain.messages.map((m) => m.role)).toEqual([
      Role.TOOL,
      Role.ASSISTANT,
      Role.SYSTEM,
      Role.USER,
      Role.ASSISTANT,
    ]);
    const chat = await d.get({ threadId, profile: Profile.OPENAI_CHAT });
    expect(chat.messages.map((m) => m.content)).toEqual([
      "They differ in one row.",
      "Answer in one line.",
      "which row?",
      "",
    ]);
    const claude = await d.get({ threadId, profile: Profile.ANTHROPIC });
    expect(claude.messages.map((m) => m.content)).toEqual([
      "Answer in one line.",
      "which row?",
      "",
    ]);
    expect(claude.messages.at(-1)?.toolCalls.map((c) => c.id)).toEqual(["c3"]);
    expect(claude.tokens).toBe(claude.messages.reduce((n, m) => n + m.tokens, 0));
    for (const [p, check] of [
      [Profile.GEMINI, CHECKERS.gemini],
      [Profile.BEDROCK_CONVERSE, CHECKERS.bedrock_converse],
      [Profile.OPENAI_RESPONSES, CHECKERS.openai_responses],
    ] as const) {
      const got = await d.get({ threadId, profile: p });
      expect(check(got.messages.map((m) => ({ ...m, role: roleName(m.role) })))).toEqual([]);
    }
  });

  it("clears old tool results in the view only, and says what that saved", async () => {
    const threadId = `clear-${name}`;
    await d.add({ threadId, messages: trimmed.slice(0, 5) });
    const full = await d.get({ threadId });
    const cleared = await d.get({ threadId, clearToolResults: { keepToolTurns: 0 } });
    expect(cleared.clearedToolResults).toBe(2);
    expect(cleared.messages[2]?.content).toBe(
      `[tool result cleared: read call c1, ${full.messages[2]?.tokens} tokens]`,
    );
    expect(cleared.clearedToolTokens).toBe(full.tokens - cleared.tokens);
    expect(cleared.clearedToolTokens).toBeGreaterThan(500);
    // The stored thread is untouched.
    expect((await d.get({ threadId })).messages[2]?.content).toBe(BIG);
    const kept = await d.get({ threadId, clearToolResults: { keepToolTurns: 1 } });
    expect(kept.clearedToolResults).toBe(0);
  });

  it("keeps a strategy's clearing with the thread, and a Get's replaces it", async () => {
    const threadId = `strategy-clear-${name}`;
    const strategy = {
      kind: { case: "buffer" as const, value: {} },
      clearToolResults: { keepToolTokens: 10 },
    };
    const added = await d.add({ threadId, strategy, messages: trimmed.slice(0, 5) });
    expect(added.thread?.strategy?.clearToolResults?.keepToolTokens).toBe(10);
    expect((await d.get({ threadId })).clearedToolResults).toBe(2);
    const own = await d.get({ threadId, clearToolResults: { keepToolTokens: 10_000 } });
    expect(own.clearedToolResults).toBe(0);
    // A recall view carries its own clearing, in place of the thread's.
    const view = await d.get({
      threadId,
      recall: {
        kind: { case: "window", value: { window: 3 } },
        clearToolResults: { keepToolTurns: 0 },
      },
    });
    expect(view.messages.map((m) => m.seq)).toEqual([2n, 3n, 4n, 5n]);
    expect(view.clearedToolResults).toBe(2);
    const plainView = await d.get({
      threadId,
      recall: { kind: { case: "window", value: { window: 3 } } },
    });
    expect(plainView.clearedToolResults).toBe(0);
  });

  it("refuses bad values naming the field, with INVALID_ARGUMENT", async () => {
    const threadId = `bad-${name}`;
    await d.add({ threadId, messages: trimmed.slice(0, 3) });
    await expectInvalid(d.get({ threadId, clearToolResults: {} }), "clear_tool_results:");
    await expectInvalid(
      d.get({ threadId, clearToolResults: { keepToolTurns: 100_001 } }),
      "clear_tool_results.keep_tool_turns:",
    );
    await expectInvalid(
      d.add({
        threadId: `bad-strategy-${name}`,
        strategy: {
          kind: { case: "window", value: {} },
          clearToolResults: { keepToolTokens: 10_000_001 },
        },
      }),
      "strategy.clear_tool_results.keep_tool_tokens:",
    );
    await expectInvalid(d.get({ threadId, profile: 99 as Profile }), "profile");
  });
});

function roleName(r: Role): "system" | "user" | "assistant" | "tool" {
  const names = {
    [Role.SYSTEM]: "system",
    [Role.USER]: "user",
    [Role.ASSISTANT]: "assistant",
  } as const;
  return r === Role.TOOL ? "tool" : (names[r as keyof typeof names] ?? "user");
}

async function json(
  method: string,
  body: unknown,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(
    `http://127.0.0.1:${h.app.httpPort}/windlass.memory.v1.MemoryService/${method}`,
    {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    },
  );
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe("profiles and clearing in Connect JSON", () => {
  it("takes the enum by name and answers with camelCase counts", async () => {
    await json("Add", {
      threadId: "json",
      messages: [
        { role: "ROLE_USER", content: "weather?" },
        { role: "ROLE_ASSISTANT", toolCalls: [{ id: "w1", name: "weather", arguments: "{}" }] },
        { role: "ROLE_TOOL", toolCallId: "w1", content: BIG },
        { role: "ROLE_ASSISTANT", content: "Rain." },
      ],
    });
    const got = await json("Get", {
      threadId: "json",
      profile: "PROFILE_BEDROCK_CONVERSE",
      clearToolResults: { keepToolTurns: 0 },
    });
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ clearedToolResults: 1 });
    expect(got.body.clearedToolTokens).toBeGreaterThan(0);
    const bad = await json("Get", { threadId: "json", profile: "PROFILE_NOPE" });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({
      code: "invalid_argument",
      message: expect.stringMatching(/^profile: /),
    });
  });
});

describe("the summariser and clearing", () => {
  it("reads the full tool results of a thread whose Gets clear them", async () => {
    const d = DRIVERS[0]?.[1](h.app) as Driver;
    try {
      const threadId = "summary-clear";
      const strategy = {
        kind: {
          case: "summary" as const,
          value: { window: 2, summarizeEvery: 1, model: "openai" },
        },
        clearToolResults: { keepToolTurns: 0 },
      };
      await d.add({
        threadId,
        strategy,
        messages: [...trimmed.slice(0, 5), { role: Role.USER, content: "ok" }],
      });
      const got = await d.get({ threadId });
      expect(got.summary).not.toBe("");
      const prompt = JSON.stringify(h.llm.requests.map((r) => r.body?.messages));
      expect(prompt).toContain(BIG.trim());
      expect(prompt).not.toContain("tool result cleared");
    } finally {
      d.close();
    }
  });
});
