/**
 * The wire forms of Get's shaping options: GetRequest.profile, and
 * ToolResultClearing (GetRequest.clear_tool_results, Strategy.clear_tool_results).
 */
import { create } from "@bufbuild/protobuf";
import {
  Profile as ProfilePb,
  type ToolResultClearing as ToolResultClearingPb,
  ToolResultClearingSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { invalidArgument } from "../core/errors.js";
import type { ToolClearingDraft } from "../core/strategy.js";
import type { Profile, ToolClearing } from "../core/types.js";

const PROFILE_FROM_PB: Partial<Record<number, Profile>> = {
  [ProfilePb.OPENAI_CHAT]: "openai_chat",
  [ProfilePb.OPENAI_RESPONSES]: "openai_responses",
  [ProfilePb.ANTHROPIC]: "anthropic",
  [ProfilePb.GEMINI]: "gemini",
  [ProfilePb.BEDROCK_CONVERSE]: "bedrock_converse",
};

/** GetRequest.profile; undefined when unset. */
export function profileFromPb(p: ProfilePb): Profile | undefined {
  if (p === ProfilePb.UNSPECIFIED) return undefined;
  const profile = PROFILE_FROM_PB[p];
  if (profile === undefined) {
    throw invalidArgument(
      "profile",
      `must be one of PROFILE_OPENAI_CHAT, PROFILE_OPENAI_RESPONSES, PROFILE_ANTHROPIC, PROFILE_GEMINI or PROFILE_BEDROCK_CONVERSE (got ${p})`,
    );
  }
  return profile;
}

/** A ToolResultClearing as a draft (validated by resolveToolClearing); undefined when unset. */
export function clearingDraftFromPb(
  c: ToolResultClearingPb | undefined,
): ToolClearingDraft | undefined {
  if (c === undefined) return undefined;
  return { keepToolTurns: c.keepToolTurns, keepToolTokens: c.keepToolTokens };
}

export function clearingToPb(c: ToolClearing): ToolResultClearingPb {
  return create(ToolResultClearingSchema, {
    ...(c.keepToolTurns === undefined ? {} : { keepToolTurns: c.keepToolTurns }),
    ...(c.keepToolTokens === undefined ? {} : { keepToolTokens: c.keepToolTokens }),
  });
}
