/**
 * OpenAI Responses `input`, from https://platform.openai.com/docs/guides/function-calling
 * (Responses tab) and https://platform.openai.com/docs/api-reference/responses/create:
 * each function_call_output carries the call_id of a function_call item
 * before it ("No tool call found for function call output with call_id …"),
 * and every function_call in the input has its output ("No tool output found
 * for function call …"), the primary requirement being that a function_call
 * is immediately followed by its function_call_output. Message items of any
 * role may stand anywhere.
 */
import type { ChatMessage } from "../../../src/core/types.js";
import { resultsFollowTheirCalls, type Violations } from "./rules.js";

export function checkOpenAiResponses(msgs: readonly ChatMessage[]): Violations {
  return resultsFollowTheirCalls(msgs);
}
