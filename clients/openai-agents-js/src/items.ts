import type { AgentInputItem } from "@openai/agents";
import {
  assistant,
  type ChatMessage,
  type MessageInit,
  Role,
  system,
  toolCall,
  toolResult,
  user,
} from "@windlass-memory/client";

/**
 * Agents SDK items ↔ windlass-memory chat messages. One item is one message:
 * the item's JSON, whole, in the message's metadata under ITEM_KEY (so every
 * item type comes back exactly as added), and a chat projection of it in
 * role/content/toolCalls/toolCallId, which the server's windows, token
 * budgets and summaries read. The README's "How items are stored" has the
 * table.
 */
export const ITEM_KEY = "openai_agents.item";

type Json = { [key: string]: unknown };

const TEXT_PARTS = new Set(["input_text", "output_text", "text", "reasoning_text"]);

/** The chat message that stores `item`; `field` names it in errors ("items[2]"). */
export function toMessage(item: AgentInputItem, field: string): MessageInit {
  const encoded = encodeItem(item, field);
  const value = item as Json;
  const metadata = { [ITEM_KEY]: encoded };
  const kind = value.type;
  const role = value.role;
  if ((kind === undefined || kind === "message") && typeof role === "string") {
    const content = textOf(value.content);
    if (role === "user") return user(content, { metadata });
    if (role === "system" || role === "developer") return system(content, { metadata });
    if (role === "assistant") return assistant(content, { metadata });
  }
  if (kind === "function_call") {
    const callId = requiredCallId(value, field);
    const call = toolCall(callId, String(value.name ?? ""), argumentsOf(value));
    return assistant("", { toolCalls: [call], metadata });
  }
  if (kind === "function_call_result") {
    return toolResult(requiredCallId(value, field), textOf(value.output), { metadata });
  }
  if (kind === "reasoning") {
    return assistant(`[reasoning] ${textOf(value.content)}`.trimEnd(), { metadata });
  }
  return assistant(`[${String(kind)}]`, { metadata });
}

/** The item a stored message holds, or, for a message without one, the item its projection describes. */
export function toItem(message: ChatMessage): AgentInputItem {
  const stored = message.metadata[ITEM_KEY];
  if (stored !== undefined) return JSON.parse(stored) as AgentInputItem;
  if (message.role === Role.TOOL) {
    return {
      type: "function_call_result",
      callId: message.toolCallId,
      name: "",
      status: "completed",
      output: message.content,
    };
  }
  const call = message.toolCalls[0];
  if (call !== undefined) {
    // Only the first: a message of another client with several calls is read
    // as one item, so that popItem removes what getItems showed.
    return { type: "function_call", callId: call.id, name: call.name, arguments: call.arguments };
  }
  if (message.role === Role.ASSISTANT) {
    return {
      type: "message",
      role: "assistant",
      status: "completed",
      content: [{ type: "output_text", text: message.content }],
    };
  }
  return { role: message.role === Role.SYSTEM ? "system" : "user", content: message.content };
}

function encodeItem(item: AgentInputItem, field: string): string {
  if (item === null || typeof item !== "object" || Array.isArray(item)) {
    throw new TypeError(`${field}: expected an input item (an object), not ${typeof item}`);
  }
  return JSON.stringify(item, (key, v: unknown) => {
    if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer) {
      throw new TypeError(
        `${field}${key === "" ? "" : `.${key}`}: binary data does not round-trip as JSON; pass it as a base64 or URL string`,
      );
    }
    return v;
  });
}

function requiredCallId(value: Json, field: string): string {
  if (typeof value.callId !== "string" || value.callId === "") {
    throw new TypeError(`${field}.callId: a ${String(value.type)} item needs one`);
  }
  return value.callId;
}

function argumentsOf(value: Json): string {
  return typeof value.arguments === "string"
    ? value.arguments
    : JSON.stringify(value.arguments ?? {});
}

function textOf(content: unknown): string {
  if (content === undefined || content === null) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map(partText).join("\n");
  return partText(content);
}

function partText(part: unknown): string {
  if (part !== null && typeof part === "object") {
    const p = part as Json;
    if (TEXT_PARTS.has(String(p.type)) && typeof p.text === "string") return p.text;
    if (p.type === "refusal" && typeof p.refusal === "string") return p.refusal;
    return `[${String(p.type)}]`;
  }
  return String(part);
}
