/**
 * Anthropic Messages, from https://platform.claude.com/docs/en/api/messages and
 * https://platform.claude.com/docs/en/agents-and-tools/tool-use/handle-tool-calls:
 * - "there is no "system" role for input messages": the system prompt is
 *   the top-level `system` parameter, so system messages may only lead the
 *   list, for the caller to send there;
 * - the first message uses the user role, and turns alternate between user
 *   and assistant;
 * - "Tool result blocks must immediately follow their corresponding tool use
 *   blocks in the message history", every tool_use answered, and "in the
 *   user message containing tool results, the tool_result blocks must come
 *   first in the content array" (text before them is a 400).
 */
import type { ChatMessage } from "../../../src/core/types.js";
import { separateSystemAlternatingTurns, type Violations } from "./rules.js";

export function checkAnthropic(msgs: readonly ChatMessage[]): Violations {
  return separateSystemAlternatingTurns(msgs);
}
