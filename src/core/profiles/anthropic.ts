/**
 * Anthropic Messages. There is no system role among `messages`: the system
 * prompt is the separate `system` parameter, so every system message (the
 * summary's included) comes first, for the caller to send there. The first
 * message is a user turn. Tool results are tool_result blocks of the user
 * turn right after the assistant turn whose tool_use blocks they answer,
 * every call answered, results before any text of that turn; the caller
 * puts consecutive tool messages (and a user message after them) into that
 * one user turn. The Messages API combines consecutive same-role turns, but
 * Anthropic-compatible endpoints reject them and the first-user rule reads
 * the combined turns, so they are merged here (roles strictly alternate).
 * gpt-tokenizer has no Claude tokenizer: budgets
 * count with the strategy's token_encoding, an approximation of Anthropic's
 * count (its count_tokens endpoint gives the exact figure).
 */
import type { ProfileRules } from "./shape.js";

export const ANTHROPIC: ProfileRules = {
  profile: "anthropic",
  systemFirst: true,
  userFirst: true,
  alternate: true,
};
