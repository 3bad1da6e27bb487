/**
 * Google Gemini (generateContent `contents`). System text goes in the
 * separate system_instruction, so system messages come first for the caller
 * to send there. Contents alternate between the user and the model roles:
 * a function-call turn comes right after a user turn or a function-response
 * turn, and the function-response turn right after the function-call turn,
 * one response per call. So the first turn is a user turn and consecutive
 * user, and consecutive assistant, messages are merged; the caller puts
 * tool results (and a user message after them) into one user turn.
 * gpt-tokenizer has no Gemini tokenizer: budgets count with the strategy's
 * token_encoding, an approximation of Gemini's count (countTokens gives the
 * exact figure).
 */
import type { ProfileRules } from "./shape.js";

export const GEMINI: ProfileRules = {
  profile: "gemini",
  systemFirst: true,
  userFirst: true,
  alternate: true,
};
