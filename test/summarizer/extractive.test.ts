import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { ChatMessage } from "../../src/core/types.js";
import { createExtractiveSummarizer } from "../../src/summarizer/extractive.js";
import type { SummarizeInput } from "../../src/summarizer/summarizer.js";

const live = (): AbortSignal => new AbortController().signal;

function summarize(input: SummarizeInput, maxChars?: number): Promise<string> {
  return createExtractiveSummarizer({ maxChars }).summarize(input, live());
}

const weather: ChatMessage[] = [
  { role: "system", content: "You are a travel assistant." },
  { role: "user", content: "My name is Ada.\n\nWhat is the   weather in Lisbon?" },
  {
    role: "assistant",
    content: "",
    toolCalls: [{ id: "call_1", name: "get_weather", arguments: '{ "city": "Lisbon" }' }],
  },
  { role: "tool", content: "22C and sunny", toolCallId: "call_1" },
  { role: "assistant", content: "It is 22C and sunny in Lisbon." },
];

describe("extractive summarizer: rendering", () => {
  it("writes one line per message, tool calls and results included", async () => {
    expect(await summarize({ previousSummary: "", messages: weather })).toBe(
      [
        "system: You are a travel assistant.",
        "user: My name is Ada. What is the weather in Lisbon?",
        'assistant called get_weather({ "city": "Lisbon" })',
        "tool get_weather -> 22C and sunny",
        "assistant: It is 22C and sunny in Lisbon.",
      ].join("\n"),
    );
  });

  it("appends to the previous summary", async () => {
    const summary = await summarize({
      previousSummary: "user: Hello.\nassistant: Hi!\n",
      messages: [{ role: "user", content: "Bye." }],
    });
    expect(summary).toBe("user: Hello.\nassistant: Hi!\nuser: Bye.");
  });

  it("keeps the first sentences of a long message, within 160 characters", async () => {
    const first = "This first sentence says what matters most.";
    const second = "The second one adds a detail that still fits.";
    const rest = " Then it goes on and on".repeat(10);
    const summary = await summarize({
      previousSummary: "",
      messages: [{ role: "user", content: `${first} ${second}${rest}.` }],
    });
    expect(summary).toBe(`user: ${first} ${second} …`);
  });

  it("cuts a long message without sentences at a word", async () => {
    const words = Array.from({ length: 60 }, (_, i) => `word${i}`).join(" ");
    const summary = await summarize({
      previousSummary: "",
      messages: [{ role: "user", content: words }],
    });
    const gist = summary.slice("user: ".length);
    expect(gist.length).toBeLessThanOrEqual(160);
    expect(gist).toMatch(/^word0 word1 .* word\d+…$/);
    expect(words.startsWith(gist.slice(0, -1))).toBe(true);
  });

  it("renders names, tool calls beside content, named tool results and empty messages", async () => {
    const summary = await summarize({
      previousSummary: "",
      messages: [
        { role: "user", content: "Book it.", name: "ada" },
        {
          role: "assistant",
          content: "Booking now.",
          toolCalls: [
            { id: "a", name: "book_hotel", arguments: `{"notes":"${"x".repeat(200)}"}` },
            { id: "b", name: "send_mail", arguments: "{}" },
          ],
        },
        { role: "tool", name: "book_hotel", content: "confirmed", toolCallId: "a" },
        { role: "tool", content: "queued", toolCallId: "unknown-id" },
        { role: "user", content: "  " },
      ],
    });
    const lines = summary.split("\n");
    expect(lines[0]).toBe("user (ada): Book it.");
    expect(lines[1]).toMatch(
      /^assistant: Booking now\.; called book_hotel\(\{"notes":"x+…\), send_mail\(\{\}\)$/,
    );
    expect(lines[1]?.length).toBeLessThan(120);
    expect(lines[2]).toBe("tool book_hotel -> confirmed");
    expect(lines[3]).toBe("tool -> queued");
    expect(lines[4]).toBe("user: (empty)");
  });

  it("is deterministic", async () => {
    const input = { previousSummary: "Earlier things.", messages: weather };
    const outputs = await Promise.all([summarize(input, 100), summarize(input, 100)]);
    expect(outputs[0]).toBe(outputs[1]);
  });
});

describe("extractive summarizer: budget", () => {
  const many: ChatMessage[] = Array.from({ length: 12 }, (_, i) => ({
    role: i % 2 === 0 ? "user" : "assistant",
    content: `Message number ${i}.`,
  }));

  it("drops the oldest lines behind a marker when over budget", async () => {
    const summary = await summarize({ previousSummary: "", messages: many }, 120);
    expect(summary.length).toBeLessThanOrEqual(120);
    const lines = summary.split("\n");
    expect(lines[0]).toBe("[9 earlier lines omitted]");
    expect(lines.slice(1)).toEqual([
      "assistant: Message number 9.",
      "user: Message number 10.",
      "assistant: Message number 11.",
    ]);
  });

  it("carries the omitted count over from fold to fold", async () => {
    const first = await summarize({ previousSummary: "", messages: many }, 120);
    const second = await summarize(
      { previousSummary: first, messages: [{ role: "user", content: "One more." }] },
      120,
    );
    expect(second.split("\n")[0]).toBe("[10 earlier lines omitted]");
    expect(second.endsWith("assistant: Message number 11.\nuser: One more.")).toBe(true);
  });

  it("clips the newest line when even it does not fit", async () => {
    const message = {
      role: "user" as const,
      content: "A fairly long sentence about nothing at all.",
    };
    expect(await summarize({ previousSummary: "", messages: [message] }, 20)).toBe(
      "user: A fairly long…",
    );
    const withMarker = await summarize(
      { previousSummary: "[3 earlier lines omitted]", messages: [message] },
      60,
    );
    expect(withMarker).toBe("[3 earlier lines omitted]\nuser: A fairly long sentence…");
    expect((await summarize({ previousSummary: "", messages: [message] }, 1)).length).toBe(1);
  });

  it("rejects a budget that is not a positive integer", () => {
    for (const maxChars of [0, -5, 1.5, Number.NaN]) {
      expect(() => createExtractiveSummarizer({ maxChars })).toThrow(/maxChars/);
    }
  });

  const role = fc.constantFrom("system", "user", "assistant", "tool") as fc.Arbitrary<
    ChatMessage["role"]
  >;
  const text = fc.oneof(
    fc.string({ unit: "binary", maxLength: 400 }),
    fc.lorem({ maxCount: 40, mode: "sentences" }),
  );
  const message: fc.Arbitrary<ChatMessage> = fc.record(
    {
      role,
      content: text,
      name: fc.string({ maxLength: 20 }),
      toolCalls: fc.array(
        fc.record({ id: fc.string({ maxLength: 4 }), name: fc.string(), arguments: text }),
        { maxLength: 3 },
      ),
      toolCallId: fc.string({ maxLength: 4 }),
    },
    { requiredKeys: ["role", "content"] },
  );
  const inputWith = (minMessages: number): fc.Arbitrary<SummarizeInput> =>
    fc.record({
      previousSummary: fc.oneof(
        text,
        fc.nat({ max: 10_000 }).map((n) => `[${n} earlier lines omitted]\nuser: earlier`),
      ),
      messages: fc.array(message, { minLength: minMessages, maxLength: 30 }),
    });
  const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

  it("never exceeds maxChars, never splits a surrogate pair, and is deterministic", async () => {
    await fc.assert(
      fc.asyncProperty(inputWith(0), fc.integer({ min: 1, max: 600 }), async (input, maxChars) => {
        const summary = await summarize(input, maxChars);
        expect(summary.length).toBeLessThanOrEqual(maxChars);
        expect(summary).not.toMatch(loneSurrogate);
        expect(await summarize(input, maxChars)).toBe(summary);
      }),
      { numRuns: 300 },
    );
  });

  it("with room for one line, drops only the oldest lines and keeps the newest whole", async () => {
    await fc.assert(
      fc.asyncProperty(
        inputWith(1),
        fc.integer({ min: 300, max: 2000 }),
        async (input, maxChars) => {
          const full = (await summarize(input, 1_000_000))
            .split("\n")
            .filter((l) => !l.startsWith("["));
          const kept = (await summarize(input, maxChars))
            .split("\n")
            .filter((l) => !l.startsWith("["));
          expect(full.slice(full.length - kept.length)).toEqual(kept);
          expect(kept.at(-1)).toBe(full.at(-1));
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe("extractive summarizer: cancellation", () => {
  it("rejects with the signal's reason when already aborted", async () => {
    const controller = new AbortController();
    const reason = new Error("stop");
    controller.abort(reason);
    await expect(
      createExtractiveSummarizer().summarize(
        { previousSummary: "", messages: weather },
        controller.signal,
      ),
    ).rejects.toBe(reason);
  });
});
