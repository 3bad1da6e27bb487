/**
 * The grouping step every profile starts with: a recalled list as turns, a
 * tool call kept as one group with its results (parallel calls and all of
 * their results together), repaired where the strategy's cut or the stored
 * transcript left something no provider accepts:
 * - a tool result whose call is not right before it (its call was cut off or
 *   trimmed, or the transcript had something between them) is dropped;
 * - a call answered by no result, before the end, loses that call (an
 *   assistant message left with no call and no text is dropped);
 * - calls not yet answered at the very end are a pending group, kept whole,
 *   so the caller can append the results and send.
 * Results stay in the order they were stored. Linear in the list.
 */
import { countMessageTokens, DEFAULT_TOKEN_ENCODING } from "../tokens.js";
import type { StoredMessage, TokenEncoding, ToolCall } from "../types.js";

export type Turn =
  /** `summary`: the memory's own summary message (seq 0), not a stored one. */
  | { kind: "system"; message: StoredMessage; summary: boolean }
  | { kind: "user"; message: StoredMessage; summary: boolean }
  | { kind: "assistant"; message: StoredMessage }
  | { kind: "tools"; call: StoredMessage; results: StoredMessage[]; pending: boolean };

/** A copy of `m` with `changes`, its tokens counted again in `encoding`. */
export function recounted(
  m: StoredMessage,
  changes: Partial<StoredMessage>,
  encoding: TokenEncoding,
): StoredMessage {
  const { tokenEncoding: _stale, ...rest } = m;
  const out: StoredMessage = { ...rest, ...changes };
  if (out.toolCalls?.length === 0) delete out.toolCalls;
  out.tokens = countMessageTokens(out, encoding);
  if (encoding !== DEFAULT_TOKEN_ENCODING) out.tokenEncoding = encoding;
  return out;
}

function isSummary(m: StoredMessage, index: number): boolean {
  return index === 0 && m.seq === 0;
}

/** The list as turns (module comment). */
export function groupTurns(msgs: readonly StoredMessage[], encoding: TokenEncoding): Turn[] {
  const turns: Turn[] = [];
  let i = 0;
  while (i < msgs.length) {
    const m = msgs[i] as StoredMessage;
    if (m.role === "tool") {
      i += 1;
    } else if (m.role === "assistant" && (m.toolCalls?.length ?? 0) > 0) {
      i = groupCall(msgs, i, encoding, turns);
    } else if (m.role === "assistant") {
      turns.push({ kind: "assistant", message: m });
      i += 1;
    } else {
      turns.push({ kind: m.role, message: m, summary: isSummary(m, i) });
      i += 1;
    }
  }
  return turns;
}

/** Groups the call at `start` with the results right after it; returns the index after them. */
function groupCall(
  msgs: readonly StoredMessage[],
  start: number,
  encoding: TokenEncoding,
  turns: Turn[],
): number {
  const call = msgs[start] as StoredMessage;
  const calls = call.toolCalls ?? [];
  if (calls.length <= FEW_CALLS) {
    const few = groupFewCalls(msgs, start, calls);
    if (few !== undefined) {
      turns.push({ kind: "tools", call, ...few });
      return start + 1 + few.scanned;
    }
  }
  const wanted = new Set(calls.map((c) => c.id));
  const answered = new Set<string>();
  const results: StoredMessage[] = [];
  let j = start + 1;
  for (; j < msgs.length && msgs[j]?.role === "tool"; j++) {
    const r = msgs[j] as StoredMessage;
    const id = r.toolCallId ?? "";
    if (wanted.has(id) && !answered.has(id)) {
      answered.add(id);
      results.push(r);
    }
  }
  const pending = j === msgs.length && answered.size < wanted.size;
  const kept = keptCalls(calls, pending ? wanted : answered);
  if (kept.length === calls.length) {
    turns.push({ kind: "tools", call, results, pending });
  } else if (kept.length > 0) {
    turns.push({
      kind: "tools",
      call: recounted(call, { toolCalls: kept }, encoding),
      results,
      pending,
    });
  } else if (call.content !== "") {
    turns.push({ kind: "assistant", message: recounted(call, { toolCalls: [] }, encoding) });
  }
  return j;
}

/** Up to this many parallel calls are grouped with a bit mask instead of sets (the usual case). */
const FEW_CALLS = 30;

/**
 * The results after a call of at most FEW_CALLS distinct calls, when they
 * need no repair (every call answered once, or pending at the end; no stray
 * result in the run); undefined otherwise, and the general path decides.
 */
function groupFewCalls(
  msgs: readonly StoredMessage[],
  start: number,
  calls: readonly ToolCall[],
): { results: StoredMessage[]; pending: boolean; scanned: number } | undefined {
  for (let a = 0; a < calls.length; a++) {
    for (let b = a + 1; b < calls.length; b++) if (calls[a]?.id === calls[b]?.id) return undefined;
  }
  const all = 2 ** calls.length - 1;
  let answered = 0;
  const results: StoredMessage[] = [];
  let j = start + 1;
  for (; j < msgs.length && msgs[j]?.role === "tool"; j++) {
    const r = msgs[j] as StoredMessage;
    const at = calls.findIndex((c) => c.id === r.toolCallId);
    const bit = 2 ** at;
    if (at < 0 || (answered & bit) !== 0) return undefined;
    answered |= bit;
    results.push(r);
  }
  const pending = answered !== all;
  if (pending && j < msgs.length) return undefined;
  return { results, pending, scanned: j - start - 1 };
}

/** The calls whose id is in `ids`, each id once. */
function keptCalls(calls: readonly ToolCall[], ids: ReadonlySet<string>): ToolCall[] {
  const seen = new Set<string>();
  const out: ToolCall[] = [];
  for (const c of calls) {
    if (ids.has(c.id) && !seen.has(c.id)) {
      seen.add(c.id);
      out.push(c);
    }
  }
  return out;
}

/** The turns as messages again, in order. */
export function flatten(turns: readonly Turn[]): StoredMessage[] {
  const out: StoredMessage[] = [];
  for (const t of turns) {
    if (t.kind === "tools") out.push(t.call, ...t.results);
    else out.push(t.message);
  }
  return out;
}
