/**
 * OpenAI Chat Completions, from https://platform.openai.com/docs/guides/function-calling
 * and the API reference https://platform.openai.com/docs/api-reference/chat/create:
 * - "messages with role 'tool' must be a response to a preceding message
 *   with 'tool_calls'" (the API's 400 text for a misplaced result);
 * - "An assistant message with 'tool_calls' must be followed by tool messages
 *   responding to each 'tool_call_id'" (likewise for an unanswered call).
 * System and developer messages may stand anywhere; roles need not alternate.
 */
import type { ChatMessage } from "../../../src/core/types.js";
import { resultsFollowTheirCalls, type Violations } from "./rules.js";

export function checkOpenAiChat(msgs: readonly ChatMessage[]): Violations {
  return resultsFollowTheirCalls(msgs);
}
