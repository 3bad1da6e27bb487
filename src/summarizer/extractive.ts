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
      return extractiveSummary(input, maxChars);
    },
  };
}

function extractiveSummary(input: SummarizeInput, maxChars: number): string {
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
  lines.push(...renderLines(input.messages));
  return fitLines(lines, omitted, maxChars);
}

/** One line per message; tool results are named after the call they answer. */
function renderLines(messages: ChatMessage[]): string[] {
  const toolNames = new Map<string, string>();
  for (const message of messages) {
    for (const call of message.toolCalls ?? []) toolNames.set(call.id, call.name);
  }
  return messages.map((message) => clip(renderLine(message, toolNames), LINE_CHARS));
}

function renderLine(message: ChatMessage, toolNames: ReadonlyMap<string, string>): string {
  const content = gist(message.content);
  if (message.role === "tool") {
    const tool =
      message.name ||
      (message.toolCallId === undefined ? undefined : toolNames.get(message.toolCallId));
    return `tool${tool ? ` ${collapse(tool)}` : ""} -> ${content || "(empty)"}`;
  }
  const speaker = message.name ? `${message.role} (${collapse(message.name)})` : message.role;
  const calls = (message.toolCalls ?? []).map(
    (call) => `${collapse(call.name)}(${clip(collapse(call.arguments), ARGUMENT_CHARS)})`,
  );
  if (calls.length === 0) return `${speaker}: ${content || "(empty)"}`;
  if (content === "") return `${speaker} called ${calls.join(", ")}`;
  return `${speaker}: ${content}; called ${calls.join(", ")}`;
}

/**
 * The first sentences of a text that fit in GIST_CHARS, whitespace collapsed;
 * the whole text when it fits, else cut at a word and marked with "…".
 */
function gist(text: string): string {
  const flat = collapse(text);
  if (flat.length <= GIST_CHARS) return flat;
  const budget = GIST_CHARS - ELLIPSIS.length;
  let sentencesEnd = 0;
  for (const end of flat.matchAll(/[.!?]+(?=\s)/g)) {
    const endIndex = end.index + end[0].length;
    if (endIndex > budget) break;
    sentencesEnd = endIndex;
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

function collapse(text: string): string {
  return text.replace(/\s+/g, " ").trim();
}

/**
 * Cuts a text to at most `max` UTF-16 code units, ending in "…" when cut, at a
 * word boundary when one is near, and never between the halves of a surrogate
 * pair.
 */
function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  if (max < ELLIPSIS.length + 1) return safeSlice(text, max);
  let cut = safeSlice(text, max - ELLIPSIS.length);
  const space = cut.lastIndexOf(" ");
  const endsOnWord = /\s/.test(text.charAt(cut.length));
  if (!endsOnWord && space >= cut.length * 0.6) cut = cut.slice(0, space);
  return `${cut.trimEnd()}${ELLIPSIS}`;
}

function safeSlice(text: string, end: number): string {
  const last = text.charCodeAt(end - 1);
  const splitsPair = last >= 0xd800 && last <= 0xdbff;
  return text.slice(0, splitsPair ? end - 1 : end);
}
