import fc from "fast-check";
import { countTokens as cl100k, encode as encodeCl100k } from "gpt-tokenizer/encoding/cl100k_base";
import { encode as encodeO200k, countTokens as o200k } from "gpt-tokenizer/encoding/o200k_base";
import { describe, expect, it } from "vitest";
import {
  countMessageTokens,
  countMessageTokensSliced,
  countTextTokens,
  MAX_RUN,
  TOKENS_PER_MESSAGE,
  TOKENS_PER_NAME,
  TOKENS_PER_TOOL_CALL,
  tokenPieces,
  tokensOf,
} from "../../src/core/tokens.js";
import type { ChatMessage } from "../../src/core/types.js";

const word = fc.oneof(
  fc.constantFrom("the", "memory", "über", "数据", "42", "x.y", "can't", '{"a":1}', "\n", "é"),
  fc.string({ minLength: 1, maxLength: 12 }).filter((s) => !/\s/.test(s)),
);
/** Text whose runs without a space are short: the cuts must change nothing. */
const prose = fc
  .array(word, { maxLength: 400 })
  .map((ws) => ws.join(" "))
  .filter((t) => !/\S{129}/u.test(t));

describe("token counting", () => {
  it("counts a message by the documented rule", () => {
    const m: ChatMessage = {
      role: "assistant",
      content: "Checking the weather.",
      name: "planner",
      toolCalls: [
        { id: "c1", name: "get_weather", arguments: '{"city":"Oslo"}' },
        { id: "c2", name: "get_time", arguments: "{}" },
      ],
    };
    const expected =
      TOKENS_PER_MESSAGE +
      o200k("Checking the weather.") +
      TOKENS_PER_NAME +
      o200k("planner") +
      2 * TOKENS_PER_TOOL_CALL +
      o200k("get_weather") +
      o200k('{"city":"Oslo"}') +
      o200k("get_time") +
      o200k("{}");
    expect(countMessageTokens(m, "o200k_base")).toBe(expected);
    const tool: ChatMessage = { role: "tool", content: "12°C", toolCallId: "c1" };
    expect(countMessageTokens(tool, "cl100k_base")).toBe(
      TOKENS_PER_MESSAGE + cl100k("12°C") + cl100k("c1"),
    );
    expect(countMessageTokens({ role: "user", content: "" }, "o200k_base")).toBe(
      TOKENS_PER_MESSAGE,
    );
  });

  it("counts with the encoding asked for", () => {
    // Text whose counts differ between the two encodings.
    const text = "数据库连接池的最大连接数是多少？ Привет, как дела?";
    expect(countTextTokens(text, "o200k_base")).toBe(o200k(text));
    expect(countTextTokens(text, "cl100k_base")).toBe(cl100k(text));
    expect(o200k(text)).not.toBe(cl100k(text));
  });

  it("cuts text without changing its count when no run without a space is long (property)", () => {
    fc.assert(
      fc.property(prose, (text) => {
        expect(countTextTokens(text, "o200k_base")).toBe(o200k(text));
        expect(countTextTokens(text, "cl100k_base")).toBe(cl100k(text));
        expect([...tokenPieces(text)].join("")).toBe(text);
      }),
      { numRuns: 200 },
    );
  });

  it("cuts long runs into pieces of bounded length, off by at most one token per cut (property)", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ maxLength: 700, unit: "grapheme" }),
          fc.string({ maxLength: 700, unit: "binary" }),
          fc.constantFrom("a".repeat(700), "数".repeat(500), " ".repeat(600), "ab1".repeat(200)),
        ),
        (text) => {
          const pieces = [...tokenPieces(text)];
          expect(pieces.join("")).toBe(text);
          for (const p of pieces) expect(p.length).toBeLessThanOrEqual(2048);
          const whole = o200k(text);
          const cut = countTextTokens(text, "o200k_base");
          expect(Math.abs(cut - whole)).toBeLessThanOrEqual(Math.max(0, pieces.length - 1));
        },
      ),
      { numRuns: 200 },
    );
    // A run without spaces is never handed to the tokenizer longer than MAX_RUN.
    for (const p of tokenPieces("x".repeat(10 * MAX_RUN + 5))) {
      expect(p.length).toBeLessThanOrEqual(MAX_RUN);
    }
  });

  it("counts in slices to the same total, pausing between pieces", async () => {
    const m: ChatMessage = {
      role: "user",
      content: `${"word ".repeat(5000)}${"数".repeat(3000)}`,
      name: "n",
    };
    let pauses = 0;
    const n = await countMessageTokensSliced(
      m,
      "o200k_base",
      async () => {
        pauses += 1;
      },
      0,
    );
    expect(n).toBe(countMessageTokens(m, "o200k_base"));
    // With a zero slice it pauses after every piece: many times for this text.
    expect(pauses).toBeGreaterThanOrEqual([...tokenPieces(m.content)].length);
  });

  it("counts a message the same at once, in slices, and piece by piece, short or long (property)", async () => {
    const text = fc.oneof(
      prose,
      fc.string({ maxLength: 300 }),
      fc.string({ minLength: 120, maxLength: 140 }),
    );
    await fc.assert(
      fc.asyncProperty(text, fc.option(text, { nil: undefined }), async (content, name) => {
        const m: ChatMessage = { role: "user", content, ...(name === undefined ? {} : { name }) };
        const pieces = (t: string) => [...tokenPieces(t)].reduce((n, p) => n + o200k(p), 0);
        const expected =
          TOKENS_PER_MESSAGE +
          pieces(content) +
          (name === undefined || name === "" ? 0 : TOKENS_PER_NAME + pieces(name));
        expect(countMessageTokens(m, "o200k_base")).toBe(expected);
        expect(await countMessageTokensSliced(m, "o200k_base", async () => {})).toBe(expected);
        expect(countTextTokens(content, "o200k_base")).toBe(pieces(content));
      }),
      { numRuns: 300 },
    );
  });

  it("counts the text of special tokens as plain characters, at once and in slices", async () => {
    // gpt-tokenizer's default throws on such text, which failed the Add.
    const special = "<|endoftext|> then <|im_start|>user<|im_end|> and <|endofprompt|>";
    const long = `${special} ${"x".repeat(2 * MAX_RUN)}<|endoftext|>`;
    const m: ChatMessage = {
      role: "assistant",
      content: long,
      name: "<|fim_prefix|>",
      toolCalls: [{ id: "c1", name: "f", arguments: '{"q":"<|endoftext|>"}' }],
    };
    const asText = { disallowedSpecial: new Set<string>() };
    for (const [encoding, encode] of [
      ["o200k_base", encodeO200k],
      ["cl100k_base", encodeCl100k],
    ] as const) {
      // Encoded as text, "<|endoftext|>" is several tokens, none of them the special one.
      expect(encode("<|endoftext|>", asText).length).toBeGreaterThan(1);
      expect(countTextTokens(special, encoding)).toBe(encode(special, asText).length);
      const once = countMessageTokens(m, encoding);
      expect(once).toBeGreaterThan(encode(special, asText).length);
      await expect(countMessageTokensSliced(m, encoding, () => Promise.resolve(), 0)).resolves.toBe(
        once,
      );
    }
  });

  it("uses a stored count of the same encoding and counts others once per message", () => {
    const stored = { role: "user" as const, content: "hello world", tokens: 999 };
    expect(tokensOf(stored, "o200k_base")).toBe(999);
    // Stored for o200k (the default): cl100k is counted.
    expect(tokensOf(stored, "cl100k_base")).toBe(TOKENS_PER_MESSAGE + cl100k("hello world"));
    const legacy: ChatMessage = { role: "user", content: "no count stored" };
    expect(tokensOf(legacy, "o200k_base")).toBe(TOKENS_PER_MESSAGE + o200k("no count stored"));
    const cl: ChatMessage = { role: "user", content: "x", tokens: 7, tokenEncoding: "cl100k_base" };
    expect(tokensOf(cl, "cl100k_base")).toBe(7);
    expect(tokensOf(cl, "o200k_base")).toBe(TOKENS_PER_MESSAGE + o200k("x"));
  });
});
