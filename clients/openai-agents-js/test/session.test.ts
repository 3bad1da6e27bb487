import {
  Agent,
  type AgentInputItem,
  type Model,
  type ModelRequest,
  type ModelResponse,
  run,
  setTracingDisabled,
  tool,
  Usage,
} from "@openai/agents";
import { Code, MemoryError, Role, summaryStrategy } from "@windlass-memory/client";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ITEM_KEY, WindlassSession } from "../src/index.js";
import { liveClient } from "./support/server.js";

setTracingDisabled(true);
const live = liveClient();
let counter = 0;
const newSession = (options: { strategy?: ReturnType<typeof summaryStrategy> } = {}) =>
  new WindlassSession(`js-agents-${process.pid}-${++counter}`, { client: live.client, ...options });

type Output = ModelResponse["output"];

/** Answers each call with the next scripted output; keeps the input it was given. */
class ScriptedModel implements Model {
  readonly inputs: AgentInputItem[][] = [];
  constructor(private readonly steps: Output[]) {}

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const input = typeof request.input === "string" ? [] : request.input;
    this.inputs.push(JSON.parse(JSON.stringify(input)));
    const output = this.steps.shift();
    if (output === undefined) throw new Error("the model was called more often than scripted");
    return { output, usage: new Usage() };
  }

  // biome-ignore lint/correctness/useYield: never streamed in these tests; fails loudly if it is.
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("these tests run the agent without streaming");
  }
}

const weatherCalls: string[] = [];
const weather = tool({
  name: "weather",
  description: "The weather in a city.",
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    weatherCalls.push(city);
    return `3 degrees in ${city}`;
  },
});

const answer = (id: string, text: string): Output[number] => ({
  type: "message",
  id,
  role: "assistant",
  status: "completed",
  content: [{ type: "output_text", text }],
});

const toolTurn = (): Output[] => [
  [
    {
      type: "reasoning",
      id: "rs_1",
      content: [{ type: "input_text", text: "The user wants the weather." }],
      providerData: { encryptedContent: "opaque-reasoning-state" },
    },
    {
      type: "function_call",
      id: "fc_1",
      callId: "call_1",
      name: "weather",
      arguments: '{"city":"Oslo"}',
      status: "completed",
    },
  ],
  [answer("msg_1", "3 degrees in Oslo: bring a coat.")],
];

const kinds = (items: AgentInputItem[]) => items.map((i) => ("type" in i && i.type) || "message");

describe("WindlassSession", () => {
  it("gives a second run the first run's items, tool call and reasoning included", async () => {
    const model = new ScriptedModel([...toolTurn(), [answer("msg_2", "Milder tomorrow.")]]);
    const agent = new Agent({
      name: "forecaster",
      instructions: "Be brief.",
      model,
      tools: [weather],
    });
    const session = newSession();
    weatherCalls.length = 0;
    const first = await run(agent, "Weather in Oslo?", { session });
    expect(first.finalOutput).toBe("3 degrees in Oslo: bring a coat.");
    const second = await run(agent, "And tomorrow?", { session });
    expect(second.finalOutput).toBe("Milder tomorrow.");
    expect(weatherCalls).toEqual(["Oslo"]);

    const input = model.inputs[2] ?? [];
    expect(kinds(input)).toEqual([
      "message",
      "reasoning",
      "function_call",
      "function_call_result",
      "message",
      "message",
    ]);
    expect(input[1]).toMatchObject({
      type: "reasoning",
      content: [{ type: "input_text", text: "The user wants the weather." }],
    });
    expect(input[2]).toMatchObject({ callId: "call_1", name: "weather" });
    expect(input[3]).toMatchObject({ type: "function_call_result", callId: "call_1" });
    expect(input.at(-1)).toMatchObject({ role: "user", content: "And tomorrow?" });

    // The server's readers see a chat transcript, the tool call paired with its result.
    const stored = (await live.client.get(await session.getSessionId())).messages;
    expect(stored.map((m) => [m.role, m.content]).slice(0, 2)).toEqual([
      [Role.USER, "Weather in Oslo?"],
      [Role.ASSISTANT, "[reasoning] The user wants the weather."],
    ]);
    expect(stored[2]?.toolCalls[0]).toMatchObject({ id: "call_1", name: "weather" });
    expect(stored[3]).toMatchObject({ role: Role.TOOL, toolCallId: "call_1" });
    expect(stored.every((m) => ITEM_KEY in m.metadata)).toBe(true);
  });

  it("round-trips items of every type unchanged, and limits to the newest", async () => {
    const items = [
      { role: "system", content: "Be terse." },
      {
        role: "user",
        content: [
          { type: "input_text", text: "Look at this" },
          { type: "input_image", image: "https://example.invalid/x.png", detail: "low" },
        ],
      },
      {
        type: "reasoning",
        id: "rs_9",
        content: [],
        providerData: { encryptedContent: "e".repeat(100) },
      },
      { type: "function_call", id: "fc_9", callId: "c9", name: "f", arguments: '{"a":[1,2]}' },
      {
        type: "function_call_result",
        callId: "c9",
        name: "f",
        status: "completed",
        output: { type: "text", text: "done" },
      },
      { type: "hosted_tool_call", id: "ws_1", name: "web_search_call", status: "completed" },
      answer("msg_9", "ok"),
    ] as AgentInputItem[];
    const session = newSession();
    await session.addItems(items);
    expect(await session.getItems()).toEqual(items);
    expect(await session.getItems(2)).toEqual(items.slice(-2));
    expect(await session.getItems(0)).toEqual([]);
    expect(await session.popItem()).toEqual(items.at(-1));
    expect(await session.getItems(1)).toEqual([items.at(-2)]);
    const stored = (await live.client.get(await session.getSessionId())).messages;
    expect(stored.map((m) => m.content)).toEqual([
      "Be terse.",
      "Look at this\n[input_image]",
      "[reasoning]",
      "",
      "done",
      "[hosted_tool_call]",
    ]);
  });

  it("pops until empty and clears", async () => {
    const session = newSession();
    expect(await session.popItem()).toBeUndefined();
    await session.addItems(
      [0, 1, 2].map((i) => ({ role: "user", content: String(i) }) as AgentInputItem),
    );
    expect(await session.popItem()).toEqual({ role: "user", content: "2" });
    expect(await session.getItems()).toHaveLength(2);
    await session.clearSession();
    expect(await session.getItems()).toEqual([]);
    expect(await session.popItem()).toBeUndefined();
  });

  it("refuses bad items before anything is stored", async () => {
    const session = newSession();
    await expect(
      session.addItems([
        { role: "user", content: "a" },
        { type: "function_call_result", name: "f", status: "completed", output: "x" },
      ] as AgentInputItem[]),
    ).rejects.toThrow(/^items\[1\]\.callId/);
    await expect(session.addItems(["text"] as unknown as AgentInputItem[])).rejects.toThrow(
      /^items\[0\]/,
    );
    await expect(
      session.addItems([
        {
          type: "function_call_result",
          callId: "c",
          name: "f",
          status: "completed",
          output: { type: "image", image: { data: new Uint8Array([1]), mediaType: "image/png" } },
        },
      ] as AgentInputItem[]),
    ).rejects.toThrow(/binary data/);
    expect(await session.getItems()).toEqual([]);
    expect(() => new WindlassSession("", { client: live.client })).toThrow(/sessionId/);
  });

  it("never pops an item another run added between its read and its rewind", async () => {
    const session = newSession();
    const id = await session.getSessionId();
    await session.addItems([{ role: "user", content: "mine" }]);
    const get = live.client.get.bind(live.client);
    let raced = false;
    const racing = {
      ...live.client,
      get: async (...args: Parameters<typeof get>) => {
        const got = await get(...args);
        if (!raced) {
          raced = true;
          await new WindlassSession(id, { client: live.client }).addItems([
            { role: "user", content: "theirs" },
          ]);
        }
        return got;
      },
    };
    const popped = await new WindlassSession(id, { client: racing }).popItem();
    expect(popped).toEqual({ role: "user", content: "theirs" });
    expect(await session.getItems()).toEqual([{ role: "user", content: "mine" }]);
  });

  it("runs on a summary thread: the model gets the summary and the newest items", async () => {
    const session = newSession({ strategy: summaryStrategy({ window: 2, summarizeEvery: 2 }) });
    const model = new ScriptedModel([...toolTurn(), [answer("msg_2", "Milder tomorrow.")]]);
    const agent = new Agent({ name: "forecaster", model, tools: [weather] });
    await run(agent, "Weather in Oslo?", { session });
    await run(agent, "And tomorrow?", { session });
    const input = model.inputs[2] ?? [];
    expect(input[0]).toMatchObject({ role: "system" });
    expect(JSON.stringify(input[0])).toContain("Summary of the earlier conversation:");
    // The window keeps the tool result with its call, then the new question.
    expect(kinds(input.slice(1))).toEqual([
      "function_call",
      "function_call_result",
      "message",
      "message",
    ]);
    expect(await session.getItems(10)).toHaveLength(7);
  });

  it("reports a failed call as the client's MemoryError", async () => {
    const err = await live.client
      .rewind(`js-agents-none-${process.pid}`, 0)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(MemoryError);
    expect((err as MemoryError).code).toBe(Code.NotFound);
  });
});
