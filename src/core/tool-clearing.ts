/**
 * Tool-output clearing (README, Clearing old tool output): a read-time view
 * in which old tool results are replaced by a short placeholder naming the
 * tool, the call and the result's original token count. The stored
 * transcript is never changed and no model is called, so a summary fold
 * still reads every result whole.
 *
 * A tool turn is an assistant message with tool calls and the results that
 * follow it. Walking from the newest message back, a result is cleared when
 * it belongs to a tool turn older than the newest `keepToolTurns`, or when
 * it and the newer results kept so far exceed `keepToolTokens` (from then on
 * every older result is cleared too). A result whose placeholder would not
 * be smaller is left whole. One pass each way: linear in the list.
 *
 * The placeholder names the tool of the call the result answers: the call
 * right before its run of results; for a result not right after its call
 * (a stray), the newest call of its id in the list; else the result's own
 * name, else "unknown tool". (Call ids repeat in some transcripts: the
 * call right before a result is the one it answers.)
 */
import { countMessageTokens, DEFAULT_TOKEN_ENCODING, tokensOf } from "./tokens.js";
import type { StoredMessage, TokenEncoding, ToolCall, ToolClearing } from "./types.js";

/** What clearing did to a list. */
export interface Cleared {
  messages: StoredMessage[];
  /** How many tool results were replaced by a placeholder. */
  count: number;
  /** Tokens the placeholders saved (original minus placeholder tokens). */
  savedTokens: number;
}

/** The placeholder text of a cleared result. */
export function clearedContent(toolName: string, callId: string, tokens: number): string {
  return `[tool result cleared: ${toolName} call ${callId}, ${tokens} tokens]`;
}

/** The list with old tool results cleared (module comment); `messages` itself is not changed. */
export function clearToolResults(
  messages: readonly StoredMessage[],
  opts: ToolClearing,
  encoding: TokenEncoding,
): Cleared {
  let toolNames: Map<string, string> | undefined;
  const keepTurns = opts.keepToolTurns ?? Number.POSITIVE_INFINITY;
  const keepTokens = opts.keepToolTokens ?? Number.POSITIVE_INFINITY;
  const out = messages.slice();
  let turnsSeen = 0;
  let keptTokens = 0;
  let overTokens = false;
  let count = 0;
  let savedTokens = 0;
  // The index of the message before the run of results being walked (-1: none, the run
  // starts the list; undefined: not looked for yet).
  let runCallAt: number | undefined;
  for (let i = out.length - 1; i >= 0; i--) {
    const m = out[i] as StoredMessage;
    if (m.role === "assistant" && (m.toolCalls?.length ?? 0) > 0) {
      turnsSeen += 1;
      continue;
    }
    if (m.role !== "tool") continue;
    const tokens = tokensOf(m, encoding);
    if (!overTokens && keptTokens + tokens > keepTokens) overTokens = true;
    if (!overTokens && turnsSeen < keepTurns) {
      keptTokens += tokens;
      continue;
    }
    // Each run is scanned back once, from its newest cleared result: linear in all.
    if (runCallAt === undefined || runCallAt >= i) {
      runCallAt = i - 1;
      while (runCallAt >= 0 && (messages[runCallAt] as StoredMessage).role === "tool") runCallAt--;
    }
    let toolName = nameInCall(messages[runCallAt], m.toolCallId ?? "");
    if (toolName === undefined) {
      toolNames ??= namesOfCalls(messages);
      toolName = toolNames.get(m.toolCallId ?? "") ?? (m.name || "unknown tool");
    }
    const placeholder = placeholderOf(m, toolName, tokens, encoding);
    if (placeholder.tokens === undefined || placeholder.tokens >= tokens) continue;
    out[i] = placeholder;
    count += 1;
    savedTokens += tokens - placeholder.tokens;
  }
  return { messages: out, count, savedTokens };
}

/** Largest parallel call searched in place for a result's name; a larger one goes by namesOfCalls. */
const SEARCHED_CALLS = 16;

/** The tool name `call` (the message before a run of results) gives `id`, if it calls it. */
function nameInCall(call: StoredMessage | undefined, id: string): string | undefined {
  const calls = call?.role === "assistant" ? call.toolCalls : undefined;
  if (calls === undefined || calls.length > SEARCHED_CALLS) return undefined;
  for (let c = 0; c < calls.length; c++) {
    const one = calls[c] as ToolCall;
    if (one.id === id) return one.name;
  }
  return undefined;
}

/** Each call id's tool name (the newest call of an id wins), for stray results (nameInCall found none). */
function namesOfCalls(messages: readonly StoredMessage[]): Map<string, string> {
  const names = new Map<string, string>();
  for (const m of messages) for (const c of m.toolCalls ?? []) names.set(c.id, c.name);
  return names;
}

/**
 * Placeholders made so far, per stored result and encoding: a thread's old
 * results are cleared again on every Get, and reusing the object saves
 * counting its tokens and (service/pre-encoded.ts) encoding it each time.
 * Kept only while the store keeps the result object.
 */
const placeholders = new WeakMap<
  StoredMessage,
  Partial<Record<TokenEncoding, { toolName: string; cleared: StoredMessage }>>
>();

function placeholderOf(
  m: StoredMessage,
  toolName: string,
  tokens: number,
  encoding: TokenEncoding,
): StoredMessage {
  const callId = m.toolCallId ?? "";
  let known = placeholders.get(m);
  const made = known?.[encoding];
  // The result's tokens in one encoding never change: the tool's name is all that may.
  if (made !== undefined && made.toolName === toolName) return made.cleared;
  const { tokenEncoding: _stale, ...rest } = m;
  const cleared: StoredMessage = { ...rest, content: clearedContent(toolName, callId, tokens) };
  cleared.tokens = countMessageTokens(cleared, encoding);
  if (encoding !== DEFAULT_TOKEN_ENCODING) cleared.tokenEncoding = encoding;
  Object.freeze(cleared);
  if (known === undefined) {
    known = {};
    placeholders.set(m, known);
  }
  known[encoding] = { toolName, cleared };
  return cleared;
}
