/**
 * Google Gemini generateContent, from https://ai.google.dev/gemini-api/docs/function-calling
 * and https://ai.google.dev/api/generate-content:
 * - system text is the separate `system_instruction`; `contents` roles are
 *   only "user" and "model" (function responses are user-side parts);
 * - "Please ensure that function call turn comes immediately after a user
 *   turn or after a function response turn" and "… that function response
 *   turn comes immediately after a function call turn" (the API's 400 texts),
 *   one response part per call;
 * - multi-turn contents alternate user and model, starting with user.
 */
import type { ChatMessage } from "../../../src/core/types.js";
import { separateSystemAlternatingTurns, type Violations } from "./rules.js";

export function checkGemini(msgs: readonly ChatMessage[]): Violations {
  return separateSystemAlternatingTurns(msgs);
}
