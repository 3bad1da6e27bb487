/**
 * Provider profiles and tool-output clearing: the get() options that shape a
 * list for a model (README, "Provider profiles" and "Clearing old tool
 * output"). Checked here, before anything is sent, so a typo fails at once
 * with the option's name instead of as INVALID_ARGUMENT from the server.
 */
import { Profile } from "./gen/windlass/memory/v1/memory_pb.js";

/** A provider profile by name; the `Profile` enum's values work too. */
export type ProfileName =
  | "openai_chat"
  | "openai_responses"
  | "anthropic"
  | "gemini"
  | "bedrock_converse";

const PROFILES: Readonly<Record<ProfileName, Profile>> = {
  openai_chat: Profile.OPENAI_CHAT,
  openai_responses: Profile.OPENAI_RESPONSES,
  anthropic: Profile.ANTHROPIC,
  gemini: Profile.GEMINI,
  bedrock_converse: Profile.BEDROCK_CONVERSE,
};
const KNOWN_NUMBERS = new Set<number>(Object.values(PROFILES));
const NAMES = Object.keys(PROFILES)
  .map((n) => JSON.stringify(n))
  .join(", ");

/**
 * Old tool results returned as a placeholder: those of the newest
 * `keepToolTurns` tool turns stay whole (0: none), and, newest first, those
 * whose tokens sum to at most `keepToolTokens`. At least one must be set.
 */
export interface ToolResultClearingInit {
  keepToolTurns?: number;
  keepToolTokens?: number;
}

/** The server's limits (proto ToolResultClearing), so what it would refuse is refused here. */
export const MAX_KEEP_TOOL_TURNS = 100_000;
export const MAX_KEEP_TOOL_TOKENS = 10_000_000;

/** The shaping options of get(). */
export interface ShapingOptions {
  /**
   * Shape the list to this provider's request rules ("anthropic": system
   * messages first, a user turn first, turns alternating). An unknown name
   * is a RangeError naming `profile`, before the call.
   */
  profile?: ProfileName | Profile;
  /**
   * Return old tool results as a placeholder, replacing the strategy's
   * clearing for this call (see GetResponse.clearedToolResults and
   * clearedToolTokens).
   */
  clearToolResults?: ToolResultClearingInit;
}

/** The GetRequest fields of `options`, checked (throws as profileValue and clearingValue do). */
export function shapingFields(options: ShapingOptions): {
  profile?: Profile;
  clearToolResults?: ToolResultClearingInit;
} {
  return {
    ...(options.profile === undefined ? {} : { profile: profileValue(options.profile) }),
    ...(options.clearToolResults === undefined
      ? {}
      : { clearToolResults: clearingValue(options.clearToolResults) }),
  };
}

/** The Profile of `profile`; a TypeError or RangeError naming `field` for anything else. */
export function profileValue(profile: ProfileName | Profile, field = "profile"): Profile {
  if (typeof profile === "number") {
    if (KNOWN_NUMBERS.has(profile)) return profile;
    throw new RangeError(`${field}: unknown Profile value ${profile}; expected one of ${NAMES}`);
  }
  if (typeof profile !== "string") {
    throw new TypeError(`${field}: expected one of ${NAMES}, got ${typeof profile}`);
  }
  const value = Object.hasOwn(PROFILES, profile) ? PROFILES[profile] : undefined;
  if (value === undefined) {
    throw new RangeError(
      `${field}: unknown profile ${JSON.stringify(profile)}; expected one of ${NAMES}`,
    );
  }
  return value;
}

/** `clearing` checked: an Error naming `field` and the limit it breaks, or the same fields. */
export function clearingValue(
  clearing: ToolResultClearingInit,
  field = "clearToolResults",
): ToolResultClearingInit {
  if (typeof clearing !== "object" || clearing === null) {
    throw new TypeError(`${field}: expected { keepToolTurns?, keepToolTokens? }`);
  }
  const { keepToolTurns, keepToolTokens } = clearing;
  if (keepToolTurns === undefined && keepToolTokens === undefined) {
    throw new TypeError(`${field}: set keepToolTurns, keepToolTokens or both`);
  }
  checkLimit(`${field}.keepToolTurns`, keepToolTurns, MAX_KEEP_TOOL_TURNS);
  checkLimit(`${field}.keepToolTokens`, keepToolTokens, MAX_KEEP_TOOL_TOKENS);
  return {
    ...(keepToolTurns === undefined ? {} : { keepToolTurns }),
    ...(keepToolTokens === undefined ? {} : { keepToolTokens }),
  };
}

function checkLimit(field: string, value: unknown, most: number): void {
  if (value === undefined) return;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > most) {
    throw new RangeError(`${field}: expected an integer from 0 to ${most}, got ${String(value)}`);
  }
}
