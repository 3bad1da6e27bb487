/**
 * Provider profiles (README, Provider profiles): GetRequest.profile names
 * one, and Get's list is shaped to that provider's request rules after the
 * strategy's cut and after tool-output clearing.
 */
import type { Profile } from "../types.js";
import { ANTHROPIC } from "./anthropic.js";
import { BEDROCK_CONVERSE } from "./bedrock-converse.js";
import { GEMINI } from "./gemini.js";
import { OPENAI_CHAT } from "./openai-chat.js";
import { OPENAI_RESPONSES } from "./openai-responses.js";
import type { ProfileRules } from "./shape.js";

export { applyProfile, type ProfileRules, type Shaped } from "./shape.js";

export const PROFILES: Readonly<Record<Profile, ProfileRules>> = {
  openai_chat: OPENAI_CHAT,
  openai_responses: OPENAI_RESPONSES,
  anthropic: ANTHROPIC,
  gemini: GEMINI,
  bedrock_converse: BEDROCK_CONVERSE,
};
