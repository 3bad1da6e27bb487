import { invalidArgument } from "./errors.js";
import type { Strategy } from "./types.js";

/** The defaults the proto's Strategy comments promise. */
export const DEFAULT_WINDOW = 20;
export const DEFAULT_SUMMARY_WINDOW = 10;
export const DEFAULT_SUMMARIZE_EVERY = 6;
export const DEFAULT_MAX_STORED = 1000;

/**
 * A strategy as a request gives it: every size optional, the kind possibly
 * unset (then the server's default kind applies).
 */
export interface StrategyDraft {
  kind: "buffer" | "window" | "summary" | undefined;
  excludeSystem: boolean;
  maxStored: number | undefined;
  maxMessages?: number | undefined;
  window?: number | undefined;
  summarizeEvery?: number | undefined;
  model?: string | undefined;
}

export interface ResolveOptions {
  /** The server's default strategy, used for an unset kind. */
  defaultStrategy: Strategy;
  /** The summariser used when `model` is empty. */
  defaultModel: string;
  /** Whether a summariser of this name is configured. */
  hasModel: (name: string) => boolean;
  /** Upper bound on max_stored (a server limit). */
  maxStoredLimit: number;
  /** Field path prefix for error messages, e.g. "strategy". */
  field: string;
}

/**
 * Fills in defaults and validates; throws invalid_argument naming the field.
 * An unset kind takes the server's default strategy, keeping the draft's
 * exclude_system and max_stored when they are given.
 */
export function resolveStrategy(draft: StrategyDraft, opts: ResolveOptions): Strategy {
  const f = opts.field;
  if (draft.maxStored !== undefined && draft.maxStored <= 0) {
    throw invalidArgument(`${f}.max_stored`, "must be positive when set");
  }
  if (draft.maxStored !== undefined && draft.maxStored > opts.maxStoredLimit) {
    throw invalidArgument(`${f}.max_stored`, `must be at most ${opts.maxStoredLimit}`);
  }
  const base = {
    excludeSystem: draft.excludeSystem,
    maxStored: draft.maxStored ?? DEFAULT_MAX_STORED,
  };
  switch (draft.kind) {
    case undefined:
      return {
        ...opts.defaultStrategy,
        excludeSystem: draft.excludeSystem || opts.defaultStrategy.excludeSystem,
        maxStored: draft.maxStored ?? opts.defaultStrategy.maxStored,
      };
    case "buffer":
      return { kind: "buffer", maxMessages: draft.maxMessages ?? 0, ...base };
    case "window": {
      const window = draft.window ?? DEFAULT_WINDOW;
      if (window <= 0) throw invalidArgument(`${f}.window.window`, "must be positive");
      return { kind: "window", window, ...base };
    }
    case "summary": {
      const model = draft.model || opts.defaultModel;
      if (!opts.hasModel(model)) {
        throw invalidArgument(`${f}.summary.model`, `no summariser named "${model}" is configured`);
      }
      return {
        kind: "summary",
        window: draft.window ?? DEFAULT_SUMMARY_WINDOW,
        summarizeEvery: Math.max(1, draft.summarizeEvery ?? DEFAULT_SUMMARIZE_EVERY),
        model,
        ...base,
      };
    }
  }
}

/** A canonical text of a strategy: equal strategies give equal keys. */
export function strategyKey(s: Strategy): string {
  switch (s.kind) {
    case "buffer":
      return `buffer(max_messages=${s.maxMessages},exclude_system=${s.excludeSystem},max_stored=${s.maxStored})`;
    case "window":
      return `window(window=${s.window},exclude_system=${s.excludeSystem},max_stored=${s.maxStored})`;
    case "summary":
      return `summary(window=${s.window},summarize_every=${s.summarizeEvery},model=${s.model},exclude_system=${s.excludeSystem},max_stored=${s.maxStored})`;
  }
}

export function sameStrategy(a: Strategy, b: Strategy): boolean {
  return strategyKey(a) === strategyKey(b);
}
