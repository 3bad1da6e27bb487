/**
 * Token counting (README, Semantics: Token budgets). A message's count is
 * what a chat model is charged for it, by OpenAI's rule for chat models:
 *
 *   3 per message
 *   + tokens(content)
 *   + tokens(name) + 1            when the message has a name
 *   + per tool call: 3 + tokens(name) + tokens(arguments)
 *   + tokens(tool_call_id)        on tool results
 *
 * The service counts each message once, at Add, with the encoding of the
 * strategy the Add names (else the server default's) and stores the count
 * with it; Get sums stored counts. A message stored without a count for the
 * strategy's encoding (stored before counting existed, or under a strategy
 * with another encoding) is counted when a Get first needs it and the count
 * is kept with that message object for as long as the store keeps it.
 *
 * Cost: the tokenizer's BPE is quadratic in the length of one pre-token (a run
 * without whitespace), so text is cut into pieces first: exactly before a
 * space that follows a non-space and precedes a non-space (no pre-token of
 * either encoding spans such a space, so those cuts change nothing), and
 * hard every MAX_RUN characters inside longer runs (a long URL, base64 or
 * text without spaces), where a token spanning the cut is counted as two
 * (at most one token more per cut). Work is then linear in the text.
 *
 * ASCII text under o200k_base is counted by ascii-token-counter.ts, which
 * gives gpt-tokenizer's counts for less CPU per Add (README, Token budgets).
 */
import o200kRanks from "gpt-tokenizer/bpeRanks/o200k_base";
import { countTokens as countCl100k } from "gpt-tokenizer/encoding/cl100k_base";
import { countTokens as countO200k } from "gpt-tokenizer/encoding/o200k_base";
import { asciiTokenCounter } from "./ascii-token-counter.js";
import type { ChatMessage, TokenEncoding } from "./types.js";

export const TOKEN_ENCODINGS: readonly TokenEncoding[] = ["o200k_base", "cl100k_base"];
export const DEFAULT_TOKEN_ENCODING: TokenEncoding = "o200k_base";

/** Fixed tokens per message (role and framing), per tool call, and for a name. */
export const TOKENS_PER_MESSAGE = 3;
export const TOKENS_PER_TOOL_CALL = 3;
export const TOKENS_PER_NAME = 1;

/** Longest run without a safe cut that is tokenized in one piece. */
export const MAX_RUN = 128;

/** Target size of a piece handed to the tokenizer at once. */
const PIECE = 2048;

/**
 * A special token's text in a message ("<|endoftext|>", "<|im_start|>") is
 * ordinary text there: a chat API never reads control tokens from content,
 * and charges for those characters as any others. gpt-tokenizer's default
 * refuses such text (it throws), which failed the whole Add; with no token
 * disallowed and none allowed, it counts the text as plain characters.
 */
const SPECIAL_AS_TEXT = { disallowedSpecial: new Set<string>() };

/** o200k_base (the default encoding) counts ASCII text itself: the same counts, for less. */
const countO200kAscii = asciiTokenCounter(o200kRanks, (piece) =>
  countO200k(piece, SPECIAL_AS_TEXT),
);

/**
 * Builds the ASCII counter's vocabulary table (about 50 ms), so that a
 * server does it while starting rather than inside its first Add.
 */
export function prepareTokenCounting(): void {
  countO200kAscii.prepare();
}

const COUNTERS: Record<TokenEncoding, (text: string) => number> = {
  o200k_base: (t) => countO200kAscii.count(t) ?? countO200k(t, SPECIAL_AS_TEXT),
  cl100k_base: (t) => countCl100k(t, SPECIAL_AS_TEXT),
};

function isSpace(code: number): boolean {
  return code === 32 || (code >= 9 && code <= 13) || code === 0xa0 || code === 0x3000;
}

/**
 * The text in pieces of about PIECE characters, cut only where the count
 * cannot change (see the module comment) or, inside a run longer than
 * MAX_RUN without such a place, every MAX_RUN characters.
 */
export function* tokenPieces(text: string): Generator<string, void, undefined> {
  let start = 0;
  let lastSafe = 0; // a safe cut position after start, or start when none yet
  let runStart = 0; // where the current stretch without a safe cut began
  for (let i = 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 32 && !isSpace(text.charCodeAt(i - 1)) && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (!isSpace(next)) {
        lastSafe = i;
        runStart = i;
      }
    }
    if (i - runStart >= MAX_RUN && !isHighSurrogateAt(text, i - 1)) {
      // No safe cut for MAX_RUN characters: cut hard (never inside a surrogate pair).
      if (i > start) yield text.slice(start, i);
      start = i;
      lastSafe = i;
      runStart = i;
      continue;
    }
    if (i - start >= PIECE && lastSafe > start) {
      yield text.slice(start, lastSafe);
      start = lastSafe;
    }
  }
  if (start < text.length) yield text.slice(start);
}

function isHighSurrogateAt(text: string, i: number): boolean {
  const c = text.charCodeAt(i);
  return c >= 0xd800 && c <= 0xdbff;
}

/** Tokens of a text under `encoding`, in pieces (see tokenPieces). */
export function countTextTokens(text: string, encoding: TokenEncoding): number {
  if (text === "") return 0;
  const count = COUNTERS[encoding];
  // tokenPieces yields a text of at most MAX_RUN characters whole: skip its generator.
  if (text.length <= MAX_RUN) return count(text);
  let n = 0;
  for (const piece of tokenPieces(text)) n += count(piece);
  return n;
}

/** The texts of a message that are charged, and its fixed overhead. */
function chargedParts(m: ChatMessage): { fixed: number; texts: string[] } {
  let fixed = TOKENS_PER_MESSAGE;
  const texts = [m.content];
  if (m.name !== undefined && m.name !== "") {
    fixed += TOKENS_PER_NAME;
    texts.push(m.name);
  }
  for (const c of m.toolCalls ?? []) {
    fixed += TOKENS_PER_TOOL_CALL;
    texts.push(c.name, c.arguments);
  }
  if (m.toolCallId !== undefined) texts.push(m.toolCallId);
  return { fixed, texts };
}

/** A message's token count (the rule in the module comment), computed now, synchronously. */
export function countMessageTokens(m: ChatMessage, encoding: TokenEncoding): number {
  const { fixed, texts } = chargedParts(m);
  let n = fixed;
  for (const t of texts) n += countTextTokens(t, encoding);
  return n;
}

/**
 * countMessageTokens in slices: after about `sliceMs` (4) of tokenizing it awaits
 * `pause()` (the service passes a turn of the event loop), so one huge
 * message does not hold up other calls.
 */
export async function countMessageTokensSliced(
  m: ChatMessage,
  encoding: TokenEncoding,
  pause: () => Promise<void>,
  sliceMs = 4,
): Promise<number> {
  const { fixed, texts } = chargedParts(m);
  const count = COUNTERS[encoding];
  let n = fixed;
  // A message of short texts (most chat turns) is counted at once: no slice can be due.
  if (texts.every((t) => t.length <= MAX_RUN)) {
    for (const t of texts) if (t !== "") n += count(t);
    return n;
  }
  let sliceStart = performance.now();
  for (const t of texts) {
    for (const piece of tokenPieces(t)) {
      n += count(piece);
      if (performance.now() - sliceStart >= sliceMs) {
        await pause();
        sliceStart = performance.now();
      }
    }
  }
  return n;
}

/** Counts computed on read for messages stored without one, kept per message object. */
const lazyCounts = new WeakMap<object, Partial<Record<TokenEncoding, number>>>();

/**
 * The message's tokens under `encoding`: the count stored with it when it was
 * counted with that encoding, else counted now (once per message object).
 */
export function tokensOf(m: ChatMessage, encoding: TokenEncoding): number {
  if (m.tokens !== undefined && (m.tokenEncoding ?? DEFAULT_TOKEN_ENCODING) === encoding) {
    return m.tokens;
  }
  let known = lazyCounts.get(m);
  const cached = known?.[encoding];
  if (cached !== undefined) return cached;
  const n = countMessageTokens(m, encoding);
  if (known === undefined) {
    known = {};
    lazyCounts.set(m, known);
  }
  known[encoding] = n;
  return n;
}
