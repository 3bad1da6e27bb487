import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import {
  AIMessage,
  type BaseMessage,
  ChatMessage,
  HumanMessage,
  SystemMessage,
  ToolMessage,
} from "@langchain/core/messages";
import type { ChatResult } from "@langchain/core/outputs";
import type { ChatPromptValueInterface } from "@langchain/core/prompt_values";
import { ChatPromptTemplate, MessagesPlaceholder } from "@langchain/core/prompts";
import { RunnableLambda, RunnableWithMessageHistory } from "@langchain/core/runnables";
import { FakeListChatModel } from "@langchain/core/utils/testing";
import { bufferStrategy, Role, summaryStrategy } from "@windlass-memory/client";
import { describe, expect, it } from "vitest";
import { WindlassChatMessageHistory } from "../src/index.js";
import { liveClient } from "./support/server.js";

const live = liveClient();

const history = (threadId: string) =>
  new WindlassChatMessageHistory({ client: live.client, threadId, strategy: bufferStrategy() });

/** What LangChain itself serialises of a message: every field it carries. */
const dict = (m: BaseMessage) => JSON.parse(JSON.stringify(m.toDict()));

describe("WindlassChatMessageHistory", () => {
  it("round-trips every message type without losing tool calls, names or ids", async () => {
    const written: BaseMessage[] = [
      new SystemMessage({ content: "You are terse.", id: "sys-1" }),
      new HumanMessage({ content: "Weather and time in Oslo?", name: "ada", id: "h-1" }),
      new AIMessage({
        content: "",
        id: "ai-1",
        name: "planner",
        tool_calls: [
          { type: "tool_call", id: "call_1", name: "weather", args: { city: "Oslo", units: "C" } },
          { type: "tool_call", id: "call_2", name: "clock", args: {} },
        ],
        usage_metadata: { input_tokens: 12, output_tokens: 7, total_tokens: 19 },
        response_metadata: { model_name: "scripted", finish_reason: "tool_calls" },
        additional_kwargs: { refusal: null },
      }),
      new ToolMessage({
        content: "4 °C, rain",
        tool_call_id: "call_1",
        name: "weather",
        id: "t-1",
        status: "success",
        artifact: { raw: [4, "rain"] },
      }),
      new ToolMessage({ content: "clock broke", tool_call_id: "call_2", status: "error" }),
      new AIMessage({
        content: [
          { type: "text", text: "4 °C and rain; " },
          { type: "text", text: "the clock failed." },
        ],
        id: "ai-2",
      }),
      new ChatMessage({ content: "thanks", role: "user" }),
    ];
    const h = history("round-trip");
    await h.addMessages(written);

    const read = await h.getMessages();
    expect(read.map(dict)).toEqual(
      written.map((m) =>
        // A ChatMessage with a role windlass-memory knows comes back as that role's class.
        m instanceof ChatMessage ? dict(new HumanMessage({ content: m.content })) : dict(m),
      ),
    );

    // Stored natively, so every other client sees the same thread.
    const { messages } = await live.client.get("round-trip");
    expect(messages.map((m) => m.role)).toEqual([
      Role.SYSTEM,
      Role.USER,
      Role.ASSISTANT,
      Role.TOOL,
      Role.TOOL,
      Role.ASSISTANT,
      Role.USER,
    ]);
    expect(messages[1]?.name).toBe("ada");
    expect(messages[2]?.toolCalls.map((c) => [c.id, c.name, JSON.parse(c.arguments)])).toEqual([
      ["call_1", "weather", { city: "Oslo", units: "C" }],
      ["call_2", "clock", {}],
    ]);
    expect(messages.slice(3, 5).map((m) => m.toolCallId)).toEqual(["call_1", "call_2"]);
    expect(messages[5]?.content).toBe("4 °C and rain; the clock failed.");
  });

  it("refuses what it cannot store, and stores none of the batch", async () => {
    const h = history("refused");
    const noId = new AIMessage({
      content: "",
      tool_calls: [{ type: "tool_call", name: "weather", args: {} }],
    });
    await expect(h.addMessages([new HumanMessage("first"), noId])).rejects.toThrow(
      /tool_calls\[0\]\.id/,
    );
    await expect(h.addMessage(new ChatMessage({ content: "x", role: "critic" }))).rejects.toThrow(
      /critic/,
    );
    expect(await h.getMessages()).toEqual([]);
  });

  it("returns the thread as its strategy shapes it, the summary as a system message", async () => {
    const h = new WindlassChatMessageHistory({
      client: live.client,
      threadId: "summarised",
      strategy: summaryStrategy({ window: 2, summarizeEvery: 2 }),
    });
    for (let i = 1; i <= 6; i++) {
      await h.addMessages([
        new HumanMessage(`Question ${i} is about the harbour.`),
        new AIMessage(`Answer ${i}: the harbour opens at ${i} o'clock.`),
      ]);
    }
    const read = await h.getMessages();
    expect(read[0]).toBeInstanceOf(SystemMessage);
    expect(read[0]?.content).toMatch(/^Summary of the earlier conversation:\n/);
    expect(read.slice(-2).map((m) => m.content)).toEqual([
      "Question 6 is about the harbour.",
      "Answer 6: the harbour opens at 6 o'clock.",
    ]);
    await h.clear();
    expect(await h.getMessages()).toEqual([]);
  });
});

describe("RunnableWithMessageHistory over a live server", () => {
  it("keeps a prompt chain's turns and feeds them back to the model", async () => {
    const prompts: BaseMessage[][] = [];
    const prompt = ChatPromptTemplate.fromMessages([
      ["system", "You remember names."],
      new MessagesPlaceholder("history"),
      ["human", "{question}"],
    ]);
    const record = RunnableLambda.from((value: ChatPromptValueInterface) => {
      prompts.push(value.toChatMessages());
      return value;
    });
    const model = new FakeListChatModel({ responses: ["Hello, Ada.", "Your name is Ada."] });
    const chain = new RunnableWithMessageHistory({
      runnable: prompt.pipe(record).pipe(model),
      getMessageHistory: (sessionId: string) => history(sessionId),
      inputMessagesKey: "question",
      historyMessagesKey: "history",
    });
    const config = { configurable: { sessionId: "chain-names" } };

    expect((await chain.invoke({ question: "My name is Ada." }, config)).content).toBe(
      "Hello, Ada.",
    );
    expect((await chain.invoke({ question: "What is my name?" }, config)).content).toBe(
      "Your name is Ada.",
    );

    expect(prompts[1]?.map((m) => [m.type, m.content])).toEqual([
      ["system", "You remember names."],
      ["human", "My name is Ada."],
      ["ai", "Hello, Ada."],
      ["human", "What is my name?"],
    ]);
    const { messages } = await live.client.get("chain-names");
    expect(messages.map((m) => [m.role, m.content])).toEqual([
      [Role.USER, "My name is Ada."],
      [Role.ASSISTANT, "Hello, Ada."],
      [Role.USER, "What is my name?"],
      [Role.ASSISTANT, "Your name is Ada."],
    ]);
  });

  it("stores a tool-calling turn: the call, its result and the answer", async () => {
    const model = new ScriptedChatModel([
      new AIMessage({
        content: "",
        tool_calls: [{ type: "tool_call", id: "call_w", name: "weather", args: { city: "Oslo" } }],
      }),
      new AIMessage("It is 4 °C and raining in Oslo."),
    ]);
    const chain = new RunnableWithMessageHistory({
      runnable: model,
      getMessageHistory: (sessionId: string) => history(sessionId),
    });
    const config = { configurable: { sessionId: "chain-tools" } };

    const call = await chain.invoke([new HumanMessage("Weather in Oslo?")], config);
    expect((call as AIMessage).tool_calls?.map((c) => c.id)).toEqual(["call_w"]);
    const tool = new ToolMessage({
      content: "4 °C, rain",
      tool_call_id: "call_w",
      name: "weather",
    });
    const answer = await chain.invoke([tool], config);
    expect(answer.content).toBe("It is 4 °C and raining in Oslo.");

    // The model's second call saw the whole exchange, tool call id included.
    const seen = model.calls[1] ?? [];
    expect(seen.map((m) => m.type)).toEqual(["human", "ai", "tool"]);
    expect((seen[1] as AIMessage).tool_calls?.[0]).toMatchObject({
      id: "call_w",
      name: "weather",
      args: { city: "Oslo" },
    });
    expect((seen[2] as ToolMessage).tool_call_id).toBe("call_w");

    const { messages } = await live.client.get("chain-tools");
    expect(messages.map((m) => m.role)).toEqual([
      Role.USER,
      Role.ASSISTANT,
      Role.TOOL,
      Role.ASSISTANT,
    ]);
    expect(messages[1]?.toolCalls.map((c) => [c.id, c.name, c.arguments])).toEqual([
      ["call_w", "weather", '{"city":"Oslo"}'],
    ]);
    expect(messages[2]?.toolCallId).toBe("call_w");
  });
});

/** A chat model (LangChain's own BaseChatModel) that answers from a script and records its input. */
class ScriptedChatModel extends BaseChatModel {
  readonly calls: BaseMessage[][] = [];
  readonly #script: AIMessage[];

  constructor(script: AIMessage[]) {
    super({});
    this.#script = script;
  }

  _llmType(): string {
    return "scripted";
  }

  async _generate(messages: BaseMessage[]): Promise<ChatResult> {
    const reply = this.#script[this.calls.length];
    this.calls.push(messages);
    if (reply === undefined) throw new Error("the script has no more replies");
    return { generations: [{ text: String(reply.content), message: reply }] };
  }
}
