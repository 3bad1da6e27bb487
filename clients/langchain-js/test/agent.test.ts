/**
 * windlassMemoryMiddleware in a real LangChain.js v1 agent (createAgent),
 * against the real server. The model is @langchain/core's fakeModel (scripted
 * replies, tool calls included; it records every call's messages); the agent
 * runs the real tool between them. Each test checks what the model was given
 * and what the service holds.
 */
import { AIMessage, type BaseMessage, HumanMessage } from "@langchain/core/messages";
import { fakeModel } from "@langchain/core/testing";
import { tool } from "@langchain/core/tools";
import { bufferStrategy, Role, summaryStrategy, windowStrategy } from "@windlass-memory/client";
import { createAgent } from "langchain";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { windlassMemoryMiddleware } from "../src/middleware.js";
import { liveClient } from "./support/server.js";

const live = liveClient();

const weather = tool(async ({ city }: { city: string }) => `${city.length} degrees in ${city}`, {
  name: "weather",
  description: "The temperature in a city.",
  schema: z.object({ city: z.string() }),
});

const calls = (...pairs: [string, string][]) =>
  new AIMessage({
    content: "",
    tool_calls: pairs.map(([city, id]) => ({
      type: "tool_call",
      id,
      name: "weather",
      args: { city },
    })),
  });

/** Each message as [type, text or its tool call ids]. */
const shape = (messages: BaseMessage[]) =>
  messages.map((m) => {
    const ids = (m as AIMessage).tool_calls?.map((c) => c.id) ?? [];
    return [m.type, ids.length > 0 ? `calls ${ids.join(",")}` : m.text];
  });

let counter = 0;
const thread = () => `lc-js-agent-${process.pid}-${++counter}`;

describe("windlassMemoryMiddleware", () => {
  it("keeps several tool-calling runs of a createAgent agent in the thread", async () => {
    const threadId = thread();
    const model = fakeModel()
      .respond(calls(["Oslo", "c1"]))
      .respond(new AIMessage("4 degrees in Oslo."))
      .respond(calls(["Lima", "c2"], ["Rome", "c3"]))
      .respond(new AIMessage("Lima 4, Rome 4."));
    const agent = createAgent({
      model,
      tools: [weather],
      systemPrompt: "Be brief.",
      middleware: [windlassMemoryMiddleware({ client: live.client, strategy: bufferStrategy() })],
    });
    const config = { configurable: { thread_id: threadId } };
    const first = await agent.invoke({ messages: [new HumanMessage("Weather in Oslo?")] }, config);
    const second = await agent.invoke(
      { messages: [new HumanMessage("And Lima and Rome?")] },
      config,
    );

    // A run's result holds that run's messages; the thread holds every run.
    expect(shape(first.messages)).toEqual([
      ["human", "Weather in Oslo?"],
      ["ai", "calls c1"],
      ["tool", "4 degrees in Oslo"],
      ["ai", "4 degrees in Oslo."],
    ]);
    expect(second.messages.at(-1)?.text).toBe("Lima 4, Rome 4.");
    const { messages: stored } = await live.client.get(threadId);
    expect(stored.map((m) => [m.role, m.content, m.toolCallId])).toEqual([
      [Role.USER, "Weather in Oslo?", ""],
      [Role.ASSISTANT, "", ""],
      [Role.TOOL, "4 degrees in Oslo", "c1"],
      [Role.ASSISTANT, "4 degrees in Oslo.", ""],
      [Role.USER, "And Lima and Rome?", ""],
      [Role.ASSISTANT, "", ""],
      [Role.TOOL, "4 degrees in Lima", "c2"],
      [Role.TOOL, "4 degrees in Rome", "c3"],
      [Role.ASSISTANT, "Lima 4, Rome 4.", ""],
    ]);
    expect(stored[5]?.toolCalls.map((c) => [c.id, c.name, c.arguments])).toEqual([
      ["c2", "weather", '{"city":"Lima"}'],
      ["c3", "weather", '{"city":"Rome"}'],
    ]);
    // The second run's first call was given the system prompt and the whole
    // first run, read back from the service, then the new question.
    expect(model.calls).toHaveLength(4);
    const third = model.calls[2]?.messages ?? [];
    expect(third[0]?.type).toBe("system");
    expect(third[0]?.text).toBe("Be brief.");
    expect(shape(third.slice(1))).toEqual([
      ["human", "Weather in Oslo?"],
      ["ai", "calls c1"],
      ["tool", "4 degrees in Oslo"],
      ["ai", "4 degrees in Oslo."],
      ["human", "And Lima and Rome?"],
    ]);
  });

  it("gives the model the summary and the recent turns of a summary thread", async () => {
    const threadId = thread();
    const model = fakeModel()
      .respond(new AIMessage("Hello Ana."))
      .respond(calls(["Oslo", "c1"]))
      .respond(new AIMessage("Oslo is cold."))
      .respond(new AIMessage("Tea noted."))
      .respond(new AIMessage("You are Ana, in Oslo, and like tea."));
    const agent = createAgent({
      model,
      tools: [weather],
      systemPrompt: "Be brief.",
      middleware: [
        windlassMemoryMiddleware({
          client: live.client,
          threadId,
          strategy: summaryStrategy({ window: 2, summarizeEvery: 2 }),
        }),
      ],
    });
    for (const text of ["My name is Ana.", "I live in Oslo.", "I like tea.", "What do you know?"]) {
      await agent.invoke({ messages: [new HumanMessage(text)] });
    }
    const last = model.calls.at(-1)?.messages ?? [];
    // The server's extractive summary of what the window left out (the tool
    // turn included), then the newest two messages verbatim.
    // One system message, first: the prompt, then the summary.
    expect(last.filter((m) => m.type === "system")).toHaveLength(1);
    const summary = last[0]?.type === "system" ? last[0].text : "";
    expect(summary).toMatch(/^Be brief\.\n\nSummary of the earlier conversation:\n/);
    expect(summary).toContain("My name is Ana.");
    expect(summary).toContain('called weather({"city":"Oslo"})');
    expect(shape(last.filter((m) => m.type !== "system"))).toEqual([
      ["ai", "Tea noted."],
      ["human", "What do you know?"],
    ]);
    const { messages } = await live.client.get(threadId);
    expect(messages.at(-1)?.seq).toBe(10n);
  });

  it("makes the summary the system message of an agent without a prompt", async () => {
    const model = fakeModel()
      .respond(new AIMessage("r0"))
      .respond(new AIMessage("r1"))
      .respond(new AIMessage("r2"));
    const strategy = summaryStrategy({ window: 1, summarizeEvery: 2 });
    const agent = createAgent({
      model,
      middleware: [windlassMemoryMiddleware({ client: live.client, threadId: thread(), strategy })],
    });
    for (const text of ["q0", "q1", "q2"]) {
      await agent.invoke({ messages: [new HumanMessage(text)] });
    }
    const last = model.calls.at(-1)?.messages ?? [];
    expect(last[0]?.text).toMatch(/^Summary of the earlier conversation:\n/);
    expect(last.filter((m) => m.type === "system")).toHaveLength(1);
    expect(last.at(-1)?.text).toBe("q2");
  });

  it("never gives the model a tool result without its call under a window", async () => {
    const model = fakeModel()
      .respond(calls(["Oslo", "c1"]))
      .respond(new AIMessage("Cold."));
    const agent = createAgent({
      model,
      tools: [weather],
      middleware: [windlassMemoryMiddleware({ client: live.client, strategy: windowStrategy(2) })],
    });
    await agent.invoke(
      { messages: [new HumanMessage("Weather in Oslo?")] },
      { configurable: { thread_id: thread() } },
    );
    // A window of two would start on the tool result; the service keeps its call.
    expect(shape(model.calls[1]?.messages ?? [])).toEqual([
      ["ai", "calls c1"],
      ["tool", "4 degrees in Oslo"],
    ]);
  });

  it("passes a provider profile and tool-output clearing through getOptions", async () => {
    // A thread an Anthropic-style model refuses as stored: it starts on an
    // assistant turn and has a system message after the first turn.
    const threadId = thread();
    await live.client.add(threadId, [
      { role: Role.ASSISTANT, content: "Welcome back." },
      { role: Role.USER, content: "Weather in Oslo?" },
      {
        role: Role.ASSISTANT,
        toolCalls: [{ id: "c0", name: "weather", arguments: '{"city":"Oslo"}' }],
      },
      {
        role: Role.TOOL,
        toolCallId: "c0",
        content:
          "4 degrees in Oslo, rain all day, wind from the north at twenty knots, clearing later.",
      },
      { role: Role.SYSTEM, content: "Answer in one line." },
    ]);
    const model = fakeModel().respond(new AIMessage("Still cold."));
    const agent = createAgent({
      model,
      systemPrompt: "You are a forecaster.",
      middleware: [
        windlassMemoryMiddleware({
          client: live.client,
          threadId,
          getOptions: { profile: "anthropic", clearToolResults: { keepToolTurns: 0 } },
        }),
      ],
    });
    await agent.invoke({ messages: [new HumanMessage("And tomorrow?")] });
    const given = model.calls[0]?.messages ?? [];
    // The thread's system message joined the prompt; the list starts on a user turn.
    expect(given[0]?.text).toBe("You are a forecaster.\n\nAnswer in one line.");
    expect(shape(given.slice(1))).toEqual([
      ["human", "Weather in Oslo?"],
      ["ai", "calls c0"],
      ["tool", "[tool result cleared: weather call c0, 25 tokens]"],
      ["human", "And tomorrow?"],
    ]);
  });

  it("refuses a run without a thread", async () => {
    const agent = createAgent({
      model: fakeModel().respond(new AIMessage("hi")),
      middleware: [windlassMemoryMiddleware({ client: live.client })],
    });
    await expect(agent.invoke({ messages: [new HumanMessage("hi")] })).rejects.toThrow(
      /needs a thread/,
    );
    expect(() => windlassMemoryMiddleware({ client: live.client, threadId: "" })).toThrow(
      TypeError,
    );
  });
});
