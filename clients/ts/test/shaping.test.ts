import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  assistant,
  type ChatMessage,
  createMemoryClient,
  MAX_KEEP_TOOL_TOKENS,
  MAX_KEEP_TOOL_TURNS,
  type MemoryClient,
  MemoryError,
  Profile,
  type ProfileName,
  Role,
  system,
  toolCall,
  toolResult,
  user,
  windowStrategy,
} from "../src/index.js";
import { type ServerProcess, startServer } from "./support/server.js";

let server: ServerProcess;
let memory: MemoryClient;
let n = 0;
const thread = (name: string): string => `shaping-${name}-${++n}`;

beforeAll(async () => {
  server = await startServer();
  memory = createMemoryClient({ baseUrl: server.url("grpc") });
});

afterAll(async () => {
  memory?.close();
  await server?.stop();
});

// Starts on an assistant turn, two user messages in a row, a system message last.
const OUT_OF_SHAPE = [
  assistant("Hello, how can I help?"),
  user("Hi."),
  user("What is the weather in Oslo?"),
  assistant("", { toolCalls: [toolCall("w1", "weather", { city: "Oslo" })] }),
  toolResult("w1", "rain, 8 C"),
  system("Answer in one line."),
];

const REPORT_2024 =
  "Revenue grew in every quarter of 2024, led by the northern region, while costs stayed flat and margins widened.";
const REPORT_2025 =
  "Revenue fell in the first half of 2025, as orders from the southern region slowed, and recovered in the second half, when costs fell.";
const TWO_TOOL_TURNS = [
  user("Compare the two reports."),
  assistant("", { toolCalls: [toolCall("r1", "read_report", { year: 2024 })] }),
  toolResult("r1", REPORT_2024),
  assistant("", { toolCalls: [toolCall("r2", "read_report", { year: 2025 })] }),
  toolResult("r2", REPORT_2025),
];

const shape = (messages: ChatMessage[]): [Role, string][] =>
  messages.map((m) => [m.role, m.content]);

describe("profile", () => {
  it("anthropic: system first, a user turn first, consecutive user messages merged", async () => {
    const id = thread("anthropic");
    await memory.add(id, OUT_OF_SHAPE);
    expect((await memory.get(id)).messages).toHaveLength(6);
    const { messages } = await memory.get(id, { profile: "anthropic" });
    expect(shape(messages)).toEqual([
      [Role.SYSTEM, "Answer in one line."],
      [Role.USER, "Hi.\n\nWhat is the weather in Oslo?"],
      [Role.ASSISTANT, ""],
      [Role.TOOL, "rain, 8 C"],
    ]);
    expect(messages[2]?.toolCalls[0]?.id).toBe("w1");
  });

  it("openai_chat keeps the stored order; the enum value works as the name does", async () => {
    const id = thread("openai");
    await memory.add(id, OUT_OF_SHAPE);
    const byName = await memory.get(id, { profile: "openai_chat" });
    expect(shape(byName.messages)).toEqual(shape(OUT_OF_SHAPE));
    const byEnum = await memory.get(id, { profile: Profile.BEDROCK_CONVERSE });
    expect(byEnum.messages[0]?.role).toBe(Role.SYSTEM);
    expect(byEnum.messages).toHaveLength(4);
  });
});

describe("clearToolResults", () => {
  it("returns placeholders and the counts", async () => {
    const id = thread("clear");
    await memory.add(id, TWO_TOOL_TURNS, { strategy: windowStrategy(20) });
    const whole = await memory.get(id);
    const cleared = await memory.get(id, { clearToolResults: { keepToolTurns: 1 } });
    expect([whole.clearedToolResults, whole.clearedToolTokens]).toEqual([0, 0]);
    expect(cleared.messages[2]?.content).toMatch(
      /^\[tool result cleared: read_report call r1, \d+ tokens\]$/,
    );
    expect(cleared.messages[2]?.toolCallId).toBe("r1");
    expect(cleared.messages[4]?.content).toBe(REPORT_2025);
    expect(cleared.clearedToolResults).toBe(1);
    expect(cleared.clearedToolTokens).toBeGreaterThan(0);
    expect(cleared.tokens).toBe(whole.tokens - cleared.clearedToolTokens);
  });

  it("in a strategy clears every get; a get's own replaces it; with a profile too", async () => {
    const id = thread("strategy");
    await memory.add(id, [assistant("Welcome back."), ...TWO_TOOL_TURNS], {
      strategy: windowStrategy(20, { clearToolResults: { keepToolTurns: 0 } }),
    });
    const every = await memory.get(id);
    expect(every.thread?.strategy?.clearToolResults?.keepToolTurns).toBe(0);
    expect(every.clearedToolResults).toBe(2);
    const kept = await memory.get(id, { clearToolResults: { keepToolTokens: 10_000 } });
    expect(kept.clearedToolResults).toBe(0);
    const shaped = await memory.get(id, { profile: "gemini" });
    expect(shaped.messages[0]?.content).toBe("Compare the two reports.");
    expect(shaped.clearedToolResults).toBe(2);
  });

  it("accepts the largest limits the server takes", async () => {
    const id = thread("most");
    await memory.add(id, TWO_TOOL_TURNS);
    const got = await memory.get(id, {
      clearToolResults: {
        keepToolTurns: MAX_KEEP_TOOL_TURNS,
        keepToolTokens: MAX_KEEP_TOOL_TOKENS,
      },
    });
    expect(got.clearedToolResults).toBe(0);
  });
});

describe("bad values are refused before any call", () => {
  // A client of a port nothing listens on: a call that were sent would fail
  // with MemoryError UNAVAILABLE, not with these errors.
  let unreachable: MemoryClient;
  beforeAll(() => {
    unreachable = createMemoryClient({ baseUrl: "http://127.0.0.1:9", timeoutMs: 2000 });
  });
  afterAll(() => unreachable.close());

  it.each([
    [{ profile: "antropic" as ProfileName }, RangeError, /^profile: unknown profile "antropic"/],
    [{ profile: 99 as Profile }, RangeError, /^profile: unknown Profile value 99/],
    [{ profile: Profile.UNSPECIFIED }, RangeError, /^profile: unknown Profile value 0/],
    [{ clearToolResults: {} }, TypeError, /^clearToolResults: set keepToolTurns/],
    [{ clearToolResults: { keepToolTurns: -1 } }, RangeError, /^clearToolResults\.keepToolTurns:/],
    [{ clearToolResults: { keepToolTurns: 1.5 } }, RangeError, /^clearToolResults\.keepToolTurns:/],
    [
      { clearToolResults: { keepToolTokens: MAX_KEEP_TOOL_TOKENS + 1 } },
      RangeError,
      /^clearToolResults\.keepToolTokens: expected an integer from 0 to 10000000/,
    ],
    [
      { clearToolResults: { keepToolTurns: MAX_KEEP_TOOL_TURNS + 1 } },
      RangeError,
      /^clearToolResults\.keepToolTurns: expected an integer from 0 to 100000/,
    ],
  ])("get(%j)", async (options, type, message) => {
    const refused = await unreachable.get("t", options).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(type);
    expect(refused).not.toBeInstanceOf(MemoryError);
    expect((refused as Error).message).toMatch(message);
  });

  it("a strategy with bad clearing throws where it is made", () => {
    expect(() => windowStrategy(5, { clearToolResults: { keepToolTokens: -3 } })).toThrow(
      /^clearToolResults\.keepToolTokens: expected an integer/,
    );
  });

  it("the unreachable client does fail when a call is sent", async () => {
    const sent = await unreachable.get("t").catch((e: unknown) => e);
    expect(sent).toBeInstanceOf(MemoryError);
  });
});
