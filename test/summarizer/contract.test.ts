/**
 * The Summarizer contract, written once and run against every implementation
 * (the openai one against a real local server that speaks the protocol).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ChatMessage } from "../../src/core/types.js";
import { createExtractiveSummarizer } from "../../src/summarizer/extractive.js";
import { createOpenAiSummarizer } from "../../src/summarizer/openai.js";
import type { Summarizer } from "../../src/summarizer/summarizer.js";
import { type FakeLlm, startFakeLlm } from "../support/fake-llm.js";

interface Subject {
  summarizer: Summarizer;
  /** Requests that reached a model so far (0 for summarisers without one). */
  calls(): number;
  close(): Promise<void>;
}

interface Implementation {
  name: string;
  start(): Promise<Subject>;
}

const implementations: Implementation[] = [
  {
    name: "extractive",
    async start() {
      const summarizer = createExtractiveSummarizer();
      return { summarizer, calls: () => 0, close: async () => {} };
    },
  },
  {
    name: "openai",
    async start() {
      // A model that "summarises" by echoing its prompt: enough to check that
      // the previous summary and the new messages reach it and the reply comes back.
      const llm: FakeLlm = await startFakeLlm({
        fallback: { reply: (req) => `  Summary: ${req.body?.messages.at(-1)?.content ?? ""}\n` },
      });
      const summarizer = createOpenAiSummarizer({
        baseUrl: llm.baseUrl,
        model: "fake-model",
        timeoutMs: 2000,
        maxRetries: 1,
        initialBackoffMs: 1,
      });
      return { summarizer, calls: () => llm.requests.length, close: () => llm.close() };
    },
  },
];

const conversation: ChatMessage[] = [
  { role: "user", content: "My name is Ada and I live in Lisbon." },
  { role: "assistant", content: "Nice to meet you, Ada." },
  { role: "user", content: "What is the weather like today?" },
  {
    role: "assistant",
    content: "",
    toolCalls: [{ id: "call_1", name: "get_weather", arguments: '{"city":"Lisbon"}' }],
  },
  { role: "tool", content: "22C and sunny", toolCallId: "call_1" },
  { role: "assistant", content: "It is 22C and sunny in Lisbon." },
];

describe.each(implementations)("Summarizer contract: $name", (implementation) => {
  let subject: Subject;
  beforeAll(async () => {
    subject = await implementation.start();
  });
  afterAll(async () => {
    await subject.close();
  });
  const live = () => new AbortController().signal;

  it("has the name it was configured with", () => {
    expect(subject.summarizer.name).toBe(implementation.name);
  });

  it("summarises new messages without a previous summary", async () => {
    const summary = await subject.summarizer.summarize(
      { previousSummary: "", messages: conversation.slice(0, 2) },
      live(),
    );
    expect(summary).not.toBe("");
    expect(summary).toContain("Lisbon");
    expect(summary).toBe(summary.trim());
  });

  it("folds new messages into a previous summary", async () => {
    const summary = await subject.summarizer.summarize(
      {
        previousSummary: "The user is called Ada and lives in Lisbon.",
        messages: [{ role: "user", content: "Please remember that I prefer tea over coffee." }],
      },
      live(),
    );
    expect(summary).toContain("Ada");
    expect(summary).toContain("tea over coffee");
  });

  it("renders tool calls and tool results", async () => {
    const summary = await subject.summarizer.summarize(
      { previousSummary: "", messages: conversation.slice(2) },
      live(),
    );
    expect(summary).toContain("get_weather");
    expect(summary).toContain("22C and sunny");
  });

  it("does not modify its input", async () => {
    const input = {
      previousSummary: "Earlier: greetings.",
      messages: structuredClone(conversation),
    };
    const before = structuredClone(input);
    await subject.summarizer.summarize(input, live());
    expect(input).toEqual(before);
  });

  it("rejects at once, without calling a model, when the signal is already aborted", async () => {
    const controller = new AbortController();
    controller.abort();
    const callsBefore = subject.calls();
    await expect(
      subject.summarizer.summarize(
        { previousSummary: "", messages: conversation },
        controller.signal,
      ),
    ).rejects.toMatchObject({ name: "AbortError" });
    expect(subject.calls()).toBe(callsBefore);
  });

  it("rejects with the caller's reason when aborted with one", async () => {
    const controller = new AbortController();
    const reason = new Error("shutting down");
    controller.abort(reason);
    await expect(
      subject.summarizer.summarize(
        { previousSummary: "", messages: conversation },
        controller.signal,
      ),
    ).rejects.toBe(reason);
  });

  it("serves independent concurrent folds", async () => {
    const [first, second] = await Promise.all([
      subject.summarizer.summarize(
        { previousSummary: "", messages: [{ role: "user", content: "Alpha topic." }] },
        live(),
      ),
      subject.summarizer.summarize(
        { previousSummary: "", messages: [{ role: "user", content: "Beta topic." }] },
        live(),
      ),
    ]);
    expect(first).toContain("Alpha");
    expect(first).not.toContain("Beta");
    expect(second).toContain("Beta");
    expect(second).not.toContain("Alpha");
  });
});
