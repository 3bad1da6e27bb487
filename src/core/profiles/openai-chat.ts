/**
 * OpenAI Chat Completions (`messages`). A message with role tool must answer
 * a tool call of the assistant message before it, and an assistant message
 * with tool_calls must be followed by tool messages answering each call;
 * system (developer) messages may stand anywhere, and roles need not
 * alternate. The grouping step is all it needs. Budgets count with the
 * strategy's token_encoding, OpenAI's own: o200k_base (GPT-4o and later)
 * or cl100k_base (GPT-4, GPT-3.5).
 */
import type { ProfileRules } from "./shape.js";

export const OPENAI_CHAT: ProfileRules = {
  profile: "openai_chat",
  systemFirst: false,
  userFirst: false,
  alternate: false,
};
