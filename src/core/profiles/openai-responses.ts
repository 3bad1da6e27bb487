/**
 * OpenAI Responses (`input` items). Each function_call_output item needs the
 * function_call item with its call_id earlier in the input, and each
 * function_call needs its output before the model runs again; message items
 * of any role (system and developer included) may stand anywhere. A caller
 * turns an assistant message with tool calls into one function_call item
 * per call, and each tool result into a function_call_output. Budgets count
 * as for openai_chat, with OpenAI's own encodings.
 */
import type { ProfileRules } from "./shape.js";

export const OPENAI_RESPONSES: ProfileRules = {
  profile: "openai_responses",
  systemFirst: false,
  userFirst: false,
  alternate: false,
};
