/** A bad setting: start-up stops with its one-line message, which names the flag. */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
}

/**
 * The longest delay a timer can have: Node runs a longer setTimeout after
 * 1 ms, so "a very long timeout" would become the shortest. Every setting in
 * milliseconds is capped here (about 24.8 days).
 */
export const MAX_TIMER_MS = 2_147_483_647;
