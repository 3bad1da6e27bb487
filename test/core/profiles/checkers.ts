/** Each profile's checker, by profile name. */
import type { ChatMessage, Profile } from "../../../src/core/types.js";
import { checkAnthropic } from "./anthropic.checker.js";
import { checkBedrockConverse } from "./bedrock-converse.checker.js";
import { checkGemini } from "./gemini.checker.js";
import { checkOpenAiChat } from "./openai-chat.checker.js";
import { checkOpenAiResponses } from "./openai-responses.checker.js";
import type { Violations } from "./rules.js";

export const CHECKERS: Readonly<Record<Profile, (msgs: readonly ChatMessage[]) => Violations>> = {
  openai_chat: checkOpenAiChat,
  openai_responses: checkOpenAiResponses,
  anthropic: checkAnthropic,
  gemini: checkGemini,
  bedrock_converse: checkBedrockConverse,
};

export const PROFILE_NAMES = Object.keys(CHECKERS) as Profile[];
