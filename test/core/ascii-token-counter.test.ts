import fc from "fast-check";
import o200kRanks from "gpt-tokenizer/bpeRanks/o200k_base";
import { countTokens } from "gpt-tokenizer/encoding/o200k_base";
import { describe, expect, it } from "vitest";
import { asciiTokenCounter, PIECE_COUNTS_KEPT } from "../../src/core/ascii-token-counter.js";

/** The reference: gpt-tokenizer, with special tokens' text as plain text (as core/tokens.ts). */
const reference = (text: string): number => countTokens(text, { disallowedSpecial: new Set() });

const counter = asciiTokenCounter(o200kRanks, reference);
const ascii = (text: string): number | undefined => counter.count(text);

const ALL_ASCII = Array.from({ length: 128 }, (_, c) => String.fromCharCode(c));

/** Characters where the pattern's alternatives meet: cases, digits, every kind of whitespace, contractions. */
const TRICKY = [
  ..." \t\n\r\v\f",
  ..."aAzZqQ09'/.,-_<|>!?",
  ..."sSdDmMtTlLvVeErR",
  "'s",
  "'LL",
  "'ve",
  "'Re",
  "  ",
  "\r\n",
  " \n ",
  "<|endoftext|>",
  "<|im_start|>",
  "http://example.com/a/b?c=1",
  "1234567",
  "McDonald's",
  "HTTPServer",
];

const asciiText = fc
  .array(fc.oneof(fc.constantFrom(...TRICKY), fc.constantFrom(...ALL_ASCII)), { maxLength: 60 })
  .map((parts) => parts.join(""));

const words = [
  "The",
  "quick",
  "brown",
  "fox",
  "jumps",
  "over",
  "the",
  "lazy",
  "dog",
  "windlass",
  "harbour",
  "don't",
  "I'll",
  "JSON",
  "userId",
  "snake_case",
  "3.14",
  "2026-12-07",
  "(see",
  "below):",
  "\n\n",
  "  -",
  "```ts",
];
const prose = fc.array(fc.constantFrom(...words), { maxLength: 200 }).map((ws) => ws.join(" "));

describe("asciiTokenCounter (o200k_base)", () => {
  it("counts every ASCII character and every pair of them as gpt-tokenizer does", () => {
    for (const a of ALL_ASCII) {
      expect(ascii(a), JSON.stringify(a)).toBe(reference(a));
      for (const b of ALL_ASCII) expect(ascii(a + b), JSON.stringify(a + b)).toBe(reference(a + b));
    }
  });

  it("counts every triple of the characters where its rules meet as gpt-tokenizer does", () => {
    const chars = [..." \t\n\r\vaAzZ09'/.!sSlLvVe"];
    for (const a of chars)
      for (const b of chars)
        for (const c of chars) {
          const t = a + b + c;
          expect(ascii(t), JSON.stringify(t)).toBe(reference(t));
        }
  });

  it("counts random ASCII text as gpt-tokenizer does", () => {
    fc.assert(
      fc.property(asciiText, (t) => ascii(t) === reference(t)),
      { numRuns: 20_000 },
    );
  });

  it("counts prose and code as gpt-tokenizer does", () => {
    fc.assert(
      fc.property(prose, (t) => ascii(t) === reference(t)),
      { numRuns: 2_000 },
    );
  });

  it("leaves text with any character above U+007F to the caller", () => {
    expect(ascii("café")).toBeUndefined();
    expect(ascii("plain text and then \u00a0")).toBeUndefined();
    expect(ascii("数据")).toBeUndefined();
    expect(ascii("")).toBe(0);
  });

  it("asks countPiece once per distinct pre-token that is not one token, and keeps a bounded number", () => {
    const asked: string[] = [];
    const own = asciiTokenCounter(o200kRanks, (piece) => {
      asked.push(piece);
      return reference(piece);
    });
    own.prepare();
    const counter = (text: string): number | undefined => own.count(text);
    // " windlass" is not one token; " the" is.
    expect(counter("the windlass the windlass")).toBe(reference("the windlass the windlass"));
    expect(asked).toEqual([" windlass"]);
    // Past the bound the remembered counts start again: still correct, asked again.
    // Distinct pre-tokens of letters only (a digit would start a pre-token of its own).
    const letters = (i: number): string =>
      [...i.toString(26)].map((d) => String.fromCharCode(97 + Number.parseInt(d, 26))).join("");
    for (let i = 0; i <= PIECE_COUNTS_KEPT; i++) counter(` qzx${letters(i)}vq`);
    asked.length = 0;
    expect(counter(" windlass")).toBe(reference(" windlass"));
    expect(asked).toEqual([" windlass"]);
  });
});
