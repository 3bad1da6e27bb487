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

/**
 * The summariser as it was before it scanned text in linear time, kept as the
 * oracle that the rewrite gives the same summary for every input small
 * enough for its quadratic sentence split.
 */
function referenceSummary(input: SummarizeInput, maxChars: number): string {
  const ELLIPSIS = "…";
  const collapse = (t: string) => t.replace(/\s+/g, " ").trim();
  const safeSlice = (t: string, end: number) => {
    const last = t.charCodeAt(end - 1);
    return t.slice(0, last >= 0xd800 && last <= 0xdbff ? end - 1 : end);
  };
  const clip = (t: string, max: number) => {
    if (t.length <= max) return t;
    if (max < ELLIPSIS.length + 1) return safeSlice(t, max);
    let cut = safeSlice(t, max - ELLIPSIS.length);
    const space = cut.lastIndexOf(" ");
    const endsOnWord = /\s/.test(t.charAt(cut.length));
    if (!endsOnWord && space >= cut.length * 0.6) cut = cut.slice(0, space);
    return `${cut.trimEnd()}${ELLIPSIS}`;
  };
  const gist = (t: string) => {
    const flat = collapse(t);
    if (flat.length <= 160) return flat;
    let sentencesEnd = 0;
    for (const end of flat.matchAll(/[.!?]+(?=\s)/g)) {
      const endIndex = end.index + end[0].length;
      if (endIndex > 160 - ELLIPSIS.length) break;
      sentencesEnd = endIndex;
    }
    if (sentencesEnd > 0) return `${flat.slice(0, sentencesEnd)} ${ELLIPSIS}`;
    return clip(flat, 160);
  };
  const marker = (n: number) => `[${n} earlier ${n === 1 ? "line" : "lines"} omitted]`;
  const lines = input.previousSummary
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== "");
  let already = 0;
  const m = lines[0]?.match(/^\[(\d+) earlier lines? omitted\]$/);
  if (m?.[1] !== undefined) {
    already = Number(m[1]);
    lines.shift();
  }
  const toolNames = new Map<string, string>();
  for (const msg of input.messages) {
    for (const call of msg.toolCalls ?? []) toolNames.set(call.id, call.name);
  }
  for (const msg of input.messages) {
    const content = gist(msg.content);
    let line: string;
    if (msg.role === "tool") {
      const tool =
        msg.name || (msg.toolCallId === undefined ? undefined : toolNames.get(msg.toolCallId));
      line = `tool${tool ? ` ${collapse(tool)}` : ""} -> ${content || "(empty)"}`;
    } else {
      const speaker = msg.name ? `${msg.role} (${collapse(msg.name)})` : msg.role;
      const calls = (msg.toolCalls ?? []).map(
        (c) => `${collapse(c.name)}(${clip(collapse(c.arguments), 60)})`,
      );
      if (calls.length === 0) line = `${speaker}: ${content || "(empty)"}`;
      else if (content === "") line = `${speaker} called ${calls.join(", ")}`;
      else line = `${speaker}: ${content}; called ${calls.join(", ")}`;
    }
    lines.push(clip(line, 240));
  }
  for (let start = 0; start < lines.length; start++) {
    const omitted = already + start;
    const head = omitted > 0 ? marker(omitted) : "";
    const body = lines.slice(start).join("\n");
    if (head.length + (head && body ? 1 : 0) + body.length <= maxChars) {
      return [head, ...lines.slice(start)].filter((l) => l !== "").join("\n");
    }
  }
  const newest = lines.at(-1);
  const omitted = already + Math.max(lines.length - 1, 0);
  const head = omitted > 0 ? marker(omitted) : "";
  if (newest === undefined) return clip(head, maxChars);
  const room = maxChars - head.length - 1;
  if (head !== "" && room >= 24) return `${head}\n${clip(newest, room)}`;
  return clip(newest, maxChars);
}

describe("extractive summarizer: same summaries as the reference", () => {
  // Sentence marks, every kind of whitespace, a surrogate pair and plain letters, densely mixed.
  const tricky = fc
    .array(
      fc.constantFrom(
        ".",
        "!",
        "?",
        "...",
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "\u00a0",
        "\u2028",
        "\u3000",
        "\ufeff",
        "😀",
        "a",
        "word",
        "Sentence.",
        "x".repeat(30),
      ),
      { maxLength: 120 },
    )
    .map((parts) => parts.join(""));
  const text = fc.oneof(
    tricky,
    fc.string({ unit: "binary", maxLength: 400 }),
    fc.lorem({ maxCount: 40, mode: "sentences" }),
  );
  const message: fc.Arbitrary<ChatMessage> = fc.record(
    {
      role: fc.constantFrom("system", "user", "assistant", "tool") as fc.Arbitrary<
        ChatMessage["role"]
      >,
      content: text,
      name: fc.oneof(fc.string({ maxLength: 20 }), tricky),
      toolCalls: fc.array(
        fc.record({ id: fc.string({ maxLength: 2 }), name: tricky, arguments: text }),
        { maxLength: 12 },
      ),
      toolCallId: fc.string({ maxLength: 2 }),
    },
    { requiredKeys: ["role", "content"] },
  );

  it("for any messages, names, tool calls and budget", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          previousSummary: fc.oneof(
            text,
            fc.nat({ max: 100 }).map((n) => `[${n} earlier lines omitted]\nuser: earlier`),
          ),
          messages: fc.array(message, { maxLength: 20 }),
        }),
        fc.integer({ min: 1, max: 3000 }),
        async (input, maxChars) => {
          expect(await summarize(input, maxChars)).toBe(referenceSummary(input, maxChars));
        },
      ),
      { numRuns: 500 },
    );
  });

  it("treats exactly the characters of \\s as whitespace, for every UTF-16 code unit", async () => {
    const messages: ChatMessage[] = [];
    for (let c = 0; c <= 0xffff; c++) {
      const ch = String.fromCharCode(c);
      messages.push({ role: "user", content: `${ch}a${ch}${ch}b${ch}` });
    }
    const input = { previousSummary: "", messages };
    expect(await summarize(input, 10_000_000)).toBe(referenceSummary(input, 10_000_000));
  });
});

/** Main-thread CPU time `work` took, in ms (not wall time: see fastestMs). */
async function cpuMs(work: () => Promise<unknown>): Promise<number> {
  const start = process.threadCpuUsage();
  await work();
  const spent = process.threadCpuUsage(start);
  return (spent.user + spent.system) / 1000;
}

describe("extractive summarizer: bounded work on hostile input", () => {
  const MiB = 1024 * 1024;
  // Runs that made the old sentence split quadratic, or that must be scanned to the end.
  const attacks: [string, (n: number) => string][] = [
    ["dots", (n) => ".".repeat(n)],
    ["mixed marks", (n) => "!?.".repeat(n / 3)],
    ["marks then a space", (n) => `${".".repeat(n - 1)} `],
    ["whitespace", (n) => " \t\n\u3000".repeat(n / 4)],
    ["whitespace then a word", (n) => `${" ".repeat(n - 4)}word`],
    ["one long word", (n) => "x".repeat(n)],
    ["words and marks", (n) => "a. !? ".repeat(n / 6)],
  ];

  /**
   * The fewest CPU ms of a few runs, in this thread's CPU time: waiting for a
   * CPU on a loaded machine does not count, so the bounds below hold there too.
   */
  async function fastestMs(input: SummarizeInput): Promise<number> {
    let best = Number.POSITIVE_INFINITY;
    for (let i = 0; i < 3; i++) {
      best = Math.min(best, await cpuMs(() => summarize(input)));
    }
    return best;
  }

  for (const [name, make] of attacks) {
    it(`summarises 4 MiB of ${name} in linear time`, async () => {
      const asMessage = (content: string): SummarizeInput => ({
        previousSummary: "",
        messages: [{ role: "user", content, name: content, toolCalls: [] }],
      });
      // The old sentence split already took seconds on 64 KiB of dots.
      const smallMs = await fastestMs(asMessage(make(64 * 1024)));
      expect(smallMs).toBeLessThan(2000);
      const big = asMessage(make(4 * MiB));
      expect((await summarize(big)).length).toBeLessThanOrEqual(2000);
      const bigMs = await fastestMs(big);
      expect(bigMs).toBeLessThan(2000);
      // 64 times the input: linear work grows 64x, quadratic 4096x. The floor
      // keeps timer noise on tiny timings out of the ratio.
      expect(bigMs).toBeLessThan(Math.max(smallMs, 1) * 400);
    });
  }

  it("renders a message with 100,000 tool calls and 4 MiB names in bounded time", async () => {
    const toolCalls = Array.from({ length: 100_000 }, (_, i) => ({
      id: `c${i}`,
      name: "f",
      arguments: "{}",
    }));
    const huge = " ".repeat(4 * MiB);
    let summary = "";
    const spentMs = await cpuMs(async () => {
      summary = await summarize({
        previousSummary: "",
        messages: [
          { role: "assistant", content: "", toolCalls },
          { role: "user", content: "hi", name: `${huge}ada${huge}` },
          { role: "tool", content: "ok", name: `${huge}lookup` },
        ],
      });
    });
    expect(spentMs).toBeLessThan(2000);
    const lines = summary.split("\n");
    expect(lines[0]).toMatch(/^assistant called f\(\{\}\), f\(\{\}\), .*…$/);
    expect(lines[0]?.length).toBeLessThanOrEqual(240);
    expect(lines.slice(1)).toEqual(["user (ada): hi", "tool lookup -> ok"]);
  });

  it("yields to the event loop while it folds a huge message, and stops when aborted", async () => {
    const input: SummarizeInput = {
      previousSummary: "",
      messages: [{ role: "user", content: " ".repeat(4 * MiB) }],
    };
    let turns = 0;
    let ticking = true;
    const tick = () => {
      turns += 1;
      if (ticking) setImmediate(tick);
    };
    setImmediate(tick);
    expect(await summarize(input)).toBe("user: (empty)");
    ticking = false;
    // Scanning 4 MiB takes several slices; other callbacks ran between them.
    expect(turns).toBeGreaterThanOrEqual(4);

    const controller = new AbortController();
    const reason = new Error("deadline");
    const folding = createExtractiveSummarizer().summarize(input, controller.signal);
    setImmediate(() => controller.abort(reason));
    await expect(folding).rejects.toBe(reason);
  });
});
