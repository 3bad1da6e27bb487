/**
 * Amazon Bedrock Converse, from https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html
 * and https://docs.aws.amazon.com/bedrock/latest/userguide/tool-use-inference-call.html:
 * - system prompts are the separate `system` field; message roles are only
 *   user and assistant;
 * - "A conversation must start with a user message" and "A conversation must
 *   alternate between user and assistant roles" (its ValidationException texts);
 * - the toolResult blocks go in the user message right after the assistant
 *   message with the toolUse blocks, one per toolUse, all in that one message.
 */
import type { ChatMessage } from "../../../src/core/types.js";
import { separateSystemAlternatingTurns, type Violations } from "./rules.js";

export function checkBedrockConverse(msgs: readonly ChatMessage[]): Violations {
  return separateSystemAlternatingTurns(msgs);
}
