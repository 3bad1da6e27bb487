/**
 * Rules the provider checkers share, each a function from a message list to
 * the violations found ("" never; an empty array: the list passes). They read
 * a list as a provider's converter would: an assistant message with tool
 * calls becomes its tool-use blocks or items, each tool message a result.
 */
import type { ChatMessage } from "../../../src/core/types.js";

export type Violations = string[];

/**
 * Every tool result answers a call of the assistant message right before
 * the run of tool messages it stands in, each call once; every call is
 * answered by that run, except the calls of the last assistant message when
 * nothing but its results follows it (a pending call: the caller appends
 * the results before sending).
 */
export function resultsFollowTheirCalls(msgs: readonly ChatMessage[]): Violations {
  const out: Violations = [];
  for (let i = 0; i < msgs.length; i++) {
    const m = msgs[i] as ChatMessage;
    if (m.role === "tool") {
      let j = i - 1;
      while (j >= 0 && msgs[j]?.role === "tool") j -= 1;
      const call = msgs[j];
      const ids = call?.role === "assistant" ? (call.toolCalls ?? []).map((c) => c.id) : [];
      if (!ids.includes(m.toolCallId ?? "")) {
        out.push(`message ${i}: tool result ${m.toolCallId} does not follow the call it answers`);
      }
      continue;
    }
    const calls = m.role === "assistant" ? (m.toolCalls ?? []) : [];
    if (calls.length === 0) continue;
    const answered: string[] = [];
    let j = i + 1;
    for (; j < msgs.length && msgs[j]?.role === "tool"; j++) {
      answered.push(msgs[j]?.toolCallId ?? "");
    }
    const ids = calls.map((c) => c.id);
    if (new Set(ids).size !== ids.length) out.push(`message ${i}: repeats a tool call id`);
    if (new Set(answered).size !== answered.length) {
      out.push(`message ${i}: a call is answered more than once`);
    }
    const pending = j === msgs.length;
    for (const id of ids) {
      if (!answered.includes(id) && !pending) {
        out.push(`message ${i}: call ${id} is not answered before the next turn`);
      }
    }
  }
  return out;
}

/** System messages only at the head (the provider's separate system parameter). */
export function systemOnlyAtHead(msgs: readonly ChatMessage[]): Violations {
  const firstOther = msgs.findIndex((m) => m.role !== "system");
  if (firstOther < 0) return [];
  const late = msgs.findIndex((m, i) => i > firstOther && m.role === "system");
  return late < 0 ? [] : [`message ${late}: a system message after the conversation began`];
}

/** The first message that is not a system message is a user message. */
export function firstTurnIsUser(msgs: readonly ChatMessage[]): Violations {
  const first = msgs.find((m) => m.role !== "system");
  return first === undefined || first.role === "user"
    ? []
    : [`the first non-system message is ${first.role}, not user`];
}

/**
 * Turns alternate: the user side (tool results, then at most one user
 * message, which the caller sends as one user turn) and the assistant side
 * (exactly one assistant message) take turns after the system head.
 */
export function rolesAlternate(msgs: readonly ChatMessage[]): Violations {
  const out: Violations = [];
  for (let i = 1; i < msgs.length; i++) {
    const prev = msgs[i - 1] as ChatMessage;
    const m = msgs[i] as ChatMessage;
    if (prev.role === "assistant" && m.role === "assistant") {
      out.push(`message ${i}: two assistant turns in a row`);
    }
    if (prev.role === "user" && (m.role === "user" || m.role === "tool")) {
      out.push(`message ${i}: a ${m.role} message after a user message in one user turn`);
    }
  }
  return out;
}

/**
 * The rules of providers with a separate system parameter and strictly
 * alternating turns (Anthropic, Gemini, Bedrock Converse state them alike).
 */
export function separateSystemAlternatingTurns(msgs: readonly ChatMessage[]): Violations {
  return [
    ...systemOnlyAtHead(msgs),
    ...firstTurnIsUser(msgs),
    ...resultsFollowTheirCalls(msgs),
    ...rolesAlternate(msgs),
  ];
}
