import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import type { ChatMessage } from "../core/types.js";
import type { SummarizeInput, Summarizer } from "./summarizer.js";

/** Options of {@link createExtractiveSummarizer}. */
export interface ExtractiveSummarizerOptions {
  /** The name SummaryStrategy.model selects it by; default "extractive". */
  name?: string;
  /** Upper bound on the summary's length in UTF-16 code units; default 2000. */
  maxChars?: number;
}

/** The longest gist kept of one message's content. */
const GIST_CHARS = 160;
/** The longest line kept for one message, role and tool calls included. */
const LINE_CHARS = 240;
/** The longest rendering of one tool call's arguments. */
const ARGUMENT_CHARS = 60;
const ELLIPSIS = "…";
const OMITTED_MARKER = /^\[(\d+) earlier lines? omitted\]$/;

/**
 * Creates the built-in summariser: no model, no network, no clock and no
 * randomness, so the summary strategy works on a fresh machine and tests can
 * compare its output exactly.
 *
 * The summary is one line per message, oldest first, appended to the previous
 * summary: the role and the first sentences of the content (whitespace
 * collapsed, at most 160 characters), `assistant called name(args)` for tool
 * calls and `tool name -> result` for tool results. When the lines exceed
 * `maxChars`, the oldest are dropped behind a single `[n earlier lines
 * omitted]` marker (its count carries over from fold to fold), because recent
 * turns matter most to the next model call. The result never exceeds
 * `maxChars`.
 */
export function createExtractiveSummarizer(opts: ExtractiveSummarizerOptions = {}): Summarizer {
  const name = opts.name ?? "extractive";
  const maxChars = opts.maxChars ?? 2000;
  if (name === "") throw new Error("extractive summarizer: name must not be empty");
  if (!Number.isInteger(maxChars) || maxChars < 1) {
    throw new Error(`extractive summarizer: maxChars must be a positive integer, got ${maxChars}`);
  }
  return {
    name,
    async summarize(input: SummarizeInput, signal: AbortSignal): Promise<string> {
      signal.throwIfAborted();
      return extractiveSummary(input, maxChars, new Slicer(signal));
    },
  };
}

/**
 * Characters scanned (or a comparable amount of other work) between two
 * yields to the event loop: about a millisecond of work, so a fold over a
 * 4 MiB message never holds up other requests for long.
 */
const SLICE_UNITS = 256 * 1024;
/** The work counted for one message or tool call besides its characters. */
const ITEM_UNITS = 64;

/**
 * Meters a fold's work and yields to the event loop (a macrotask, so I/O
 * and timers run) after every SLICE_UNITS of it, checking for cancellation
 * at each yield.
 */
class Slicer {
  private units = 0;
  private readonly signal: AbortSignal;

  constructor(signal: AbortSignal) {
    this.signal = signal;
  }

  async spend(units: number): Promise<void> {
    this.units += units;
    if (this.units < SLICE_UNITS) return;
    this.units = 0;
    await yieldToEventLoop();
    this.signal.throwIfAborted();
  }
}

async function extractiveSummary(
  input: SummarizeInput,
  maxChars: number,
  slicer: Slicer,
): Promise<string> {
  await slicer.spend(input.previousSummary.length);
  const lines = input.previousSummary
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== "");
  let omitted = 0;
  const marker = lines[0]?.match(OMITTED_MARKER);
  if (marker?.[1] !== undefined) {
    omitted = Number(marker[1]);
    lines.shift();
  }
  for (const line of await renderLines(input.messages, slicer)) lines.push(line);
  await slicer.spend(lines.length);
  return fitLines(lines, omitted, maxChars);
}

/** One line per message; tool results are named after the call they answer. */
async function renderLines(messages: ChatMessage[], slicer: Slicer): Promise<string[]> {
  const toolNames = new Map<string, string>();
  for (const message of messages) {
    const calls = message.toolCalls ?? [];
    for (const call of calls) toolNames.set(call.id, call.name);
    await slicer.spend(ITEM_UNITS * (1 + calls.length));
  }
  const lines: string[] = [];
  for (const message of messages) {
    lines.push(clip(await renderLine(message, toolNames, slicer), LINE_CHARS));
  }
  return lines;
}

/**
 * The message's line, or a prefix of it longer than LINE_CHARS: clipping
 * either to LINE_CHARS gives the same text, so no part of the message
 * beyond what the line can show is ever scanned.
 */
async function renderLine(
  message: ChatMessage,
  toolNames: ReadonlyMap<string, string>,
  slicer: Slicer,
): Promise<string> {
  const content = await gist(message.content, slicer);
  if (message.role === "tool") {
    const tool =
      message.name ||
      (message.toolCallId === undefined ? undefined : toolNames.get(message.toolCallId));
    const toolName = tool ? ` ${await collapse(tool, LINE_CHARS + 1, slicer)}` : "";
    return `tool${toolName} -> ${content || "(empty)"}`;
  }
  const speaker = message.name
    ? `${message.role} (${await collapse(message.name, LINE_CHARS + 1, slicer)})`
    : message.role;
  // Enough calls to fill the line: the rest would be clipped away.
  const calls: string[] = [];
  let callsLength = -", ".length;
  for (const call of message.toolCalls ?? []) {
    if (callsLength > LINE_CHARS) break;
    const callName = await collapse(call.name, LINE_CHARS + 1, slicer);
    const args = clip(await collapse(call.arguments, ARGUMENT_CHARS + 1, slicer), ARGUMENT_CHARS);
    const rendered = `${callName}(${args})`;
    calls.push(rendered);
    callsLength += ", ".length + rendered.length;
  }
  if (calls.length === 0) return `${speaker}: ${content || "(empty)"}`;
  if (content === "") return `${speaker} called ${calls.join(", ")}`;
  return `${speaker}: ${content}; called ${calls.join(", ")}`;
}

/**
 * The first sentences of a text that fit in GIST_CHARS, whitespace collapsed;
 * the whole text when it fits, else cut at a word and marked with "…". A
 * sentence ends at a run of ".", "!" or "?" followed by whitespace. Only the
 * first GIST_CHARS + 1 collapsed characters decide the result, so only they
 * are collected.
 */
async function gist(text: string, slicer: Slicer): Promise<string> {
  const flat = await collapse(text, GIST_CHARS + 1, slicer);
  if (flat.length <= GIST_CHARS) return flat;
  const budget = GIST_CHARS - ELLIPSIS.length;
  // Collapsed text holds no whitespace but single spaces.
  let sentencesEnd = 0;
  for (let end = 1; end <= budget; end++) {
    if (flat.charCodeAt(end) === SPACE && isSentenceMark(flat.charCodeAt(end - 1))) {
      sentencesEnd = end;
    }
  }
  if (sentencesEnd > 0) return `${flat.slice(0, sentencesEnd)} ${ELLIPSIS}`;
  return clip(flat, GIST_CHARS);
}

/**
 * Joins the lines under the omission marker, dropping the oldest until the
 * text fits in maxChars. If even the newest line alone does not fit, it is
 * clipped (and the marker dropped when there is no room for it).
 */
function fitLines(lines: string[], alreadyOmitted: number, maxChars: number): string {
  // suffix[i]: length of lines[i..] joined with "\n".
  const suffix = new Array<number>(lines.length + 1).fill(0);
  for (let i = lines.length - 1; i >= 0; i--) {
    const below = suffix[i + 1] ?? 0;
    suffix[i] = (lines[i]?.length ?? 0) + (below > 0 ? below + 1 : 0);
  }
  for (let start = 0; start < lines.length; start++) {
    const omitted = alreadyOmitted + start;
    const head = omitted > 0 ? omittedMarker(omitted) : "";
    const bodyLength = suffix[start] ?? 0;
    if (head.length + (head && bodyLength > 0 ? 1 : 0) + bodyLength <= maxChars) {
      return [head, ...lines.slice(start)].filter((line) => line !== "").join("\n");
    }
  }
  const newest = lines.at(-1);
  const omitted = alreadyOmitted + Math.max(lines.length - 1, 0);
  const head = omitted > 0 ? omittedMarker(omitted) : "";
  if (newest === undefined) return clip(head, maxChars);
  // Keep the marker only if a useful part of the newest line fits beside it.
  const room = maxChars - head.length - 1;
  if (head !== "" && room >= 24) return `${head}\n${clip(newest, room)}`;
  return clip(newest, maxChars);
}

function omittedMarker(count: number): string {
  return `[${count} earlier ${count === 1 ? "line" : "lines"} omitted]`;
}

const SPACE = 0x20;

/**
 * The text with every run of whitespace made one space and the ends
 * trimmed (what `text.replace(/\s+/g, " ").trim()` gives), cut to its first
 * `limit` code units. One left-to-right scan that stops once `limit` units
 * are out, so a huge text costs what its first words and any whitespace
 * before them cost, and yields between slices of the scan.
 */
async function collapse(text: string, limit: number, slicer: Slicer): Promise<string> {
  let out = "";
  let gap = false;
  for (let from = 0; from < text.length && out.length < limit; ) {
    const to = Math.min(text.length, from + SLICE_UNITS);
    let i = from;
    while (i < to && out.length < limit) {
      if (isWhitespace(text.charCodeAt(i))) {
        gap = out.length > 0;
        i += 1;
        continue;
      }
      if (gap) {
        out += " ";
        gap = false;
        if (out.length >= limit) break;
      }
      const wordEnd = Math.min(to, i + limit - out.length);
      let j = i + 1;
      while (j < wordEnd && !isWhitespace(text.charCodeAt(j))) j += 1;
      out += text.slice(i, j);
      i = j;
    }
    await slicer.spend(i - from);
    from = i;
  }
  return out;
}

/** Exactly the characters of the regular expression class `\s` (and of String.prototype.trim). */
function isWhitespace(c: number): boolean {
  if (c <= 0x20) return c === 0x20 || (c >= 0x09 && c <= 0x0d);
  if (c < 0xa0) return false;
  return (
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000 ||
    c === 0xfeff
  );
}

function isSentenceMark(c: number): boolean {
  return c === 0x2e || c === 0x21 || c === 0x3f; // . ! ?
}

/**
 * Cuts a text to at most `max` UTF-16 code units, ending in "…" when cut, at a
 * word boundary when one is near, and never between the halves of a surrogate
 * pair. Only the first `max` + 1 code units of `text` matter.
 */
function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  if (max < ELLIPSIS.length + 1) return safeSlice(text, max);
  let cut = safeSlice(text, max - ELLIPSIS.length);
  const space = cut.lastIndexOf(" ");
  const endsOnWord = isWhitespace(text.charCodeAt(cut.length));
  if (!endsOnWord && space >= cut.length * 0.6) cut = cut.slice(0, space);
  return `${cut.trimEnd()}${ELLIPSIS}`;
}

function safeSlice(text: string, end: number): string {
  const last = text.charCodeAt(end - 1);
  const splitsPair = last >= 0xd800 && last <= 0xdbff;
  return text.slice(0, splitsPair ? end - 1 : end);
}
