/**
 * Amazon Bedrock Converse (`messages`, `system`). System prompts are the
 * separate `system` field, so system messages come first. A conversation
 * starts with a user message and alternates between user and assistant
 * roles; toolResult blocks go in the user message right after the assistant
 * message whose toolUse blocks they answer, one per call. So consecutive
 * user, and consecutive assistant, messages are merged; the caller puts
 * tool results (and a user message after them) into one user message.
 * Bedrock's models each have their own tokenizer, none in gpt-tokenizer:
 * budgets count with the strategy's token_encoding, an approximation.
 */
import type { ProfileRules } from "./shape.js";

export const BEDROCK_CONVERSE: ProfileRules = {
  profile: "bedrock_converse",
  systemFirst: true,
  userFirst: true,
  alternate: true,
};
