import { invalidArgument } from "./errors.js";
import { DEFAULT_TOKEN_ENCODING, TOKEN_ENCODINGS } from "./tokens.js";
import type { Strategy, SummaryPlacement, TokenEncoding, ToolClearing } from "./types.js";

/** The defaults the proto's Strategy comments promise. */
export const DEFAULT_WINDOW = 20;
export const DEFAULT_SUMMARY_WINDOW = 10;
export const DEFAULT_SUMMARIZE_EVERY = 6;
export const DEFAULT_MAX_STORED = 1000;
/** Largest token budget a strategy or a Get may ask for (well past any model's context). */
export const MAX_TOKENS_LIMIT = 10_000_000;
/** Largest keep_tool_turns accepted (a thread keeps at most max_stored messages anyway). */
export const MAX_KEEP_TOOL_TURNS = 100_000;

/** Tool-output clearing as a request gives it (README, Clearing old tool output). */
export interface ToolClearingDraft {
  keepToolTurns?: number | undefined;
  keepToolTokens?: number | undefined;
}

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
  /** Window and summary: token budget; 0 or undefined: none. */
  maxTokens?: number | undefined;
  /** Window and summary: encoding name as the request gives it; "" or undefined: o200k_base. */
  tokenEncoding?: string | undefined;
  /** Summary: where Get puts the summary; undefined: "system". */
  summaryPlacement?: SummaryPlacement | undefined;
  /** Tool-output clearing for every Get; undefined: none. */
  clearToolResults?: ToolClearingDraft | undefined;
}

/**
 * The token options of a window or summary draft, validated, with defaults
 * left out (see TokenOptions in types.ts).
 */
function tokenOptions(
  draft: StrategyDraft,
  field: string,
): { maxTokens?: number; tokenEncoding?: TokenEncoding } {
  const out: { maxTokens?: number; tokenEncoding?: TokenEncoding } = {};
  const max = draft.maxTokens ?? 0;
  if (max > MAX_TOKENS_LIMIT) {
    throw invalidArgument(`${field}.max_tokens`, `must be at most ${MAX_TOKENS_LIMIT}`);
  }
  if (max > 0) out.maxTokens = max;
  const enc = draft.tokenEncoding ?? "";
  if (enc !== "") {
    if (!(TOKEN_ENCODINGS as readonly string[]).includes(enc)) {
      throw invalidArgument(
        `${field}.token_encoding`,
        `must be one of ${TOKEN_ENCODINGS.join(", ")} (got "${enc}")`,
      );
    }
    if (enc !== DEFAULT_TOKEN_ENCODING) out.tokenEncoding = enc as TokenEncoding;
  }
  return out;
}

/**
 * Clearing options as a request gives them, validated; throws
 * invalid_argument naming `field` (e.g. "clear_tool_results.keep_tool_turns").
 */
export function resolveToolClearing(draft: ToolClearingDraft, field: string): ToolClearing {
  const out: ToolClearing = {};
  if (draft.keepToolTurns !== undefined) {
    if (draft.keepToolTurns > MAX_KEEP_TOOL_TURNS) {
      throw invalidArgument(`${field}.keep_tool_turns`, `must be at most ${MAX_KEEP_TOOL_TURNS}`);
    }
    out.keepToolTurns = draft.keepToolTurns;
  }
  if (draft.keepToolTokens !== undefined) {
    if (draft.keepToolTokens > MAX_TOKENS_LIMIT) {
      throw invalidArgument(`${field}.keep_tool_tokens`, `must be at most ${MAX_TOKENS_LIMIT}`);
    }
    out.keepToolTokens = draft.keepToolTokens;
  }
  if (out.keepToolTurns === undefined && out.keepToolTokens === undefined) {
    throw invalidArgument(field, "set keep_tool_turns or keep_tool_tokens (or leave it unset)");
  }
  return out;
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
  const clearing =
    draft.clearToolResults === undefined
      ? {}
      : {
          clearToolResults: resolveToolClearing(draft.clearToolResults, `${f}.clear_tool_results`),
        };
  const base = {
    excludeSystem: draft.excludeSystem,
    maxStored: draft.maxStored ?? DEFAULT_MAX_STORED,
    ...clearing,
  };
  switch (draft.kind) {
    case undefined:
      return {
        ...opts.defaultStrategy,
        excludeSystem: draft.excludeSystem || opts.defaultStrategy.excludeSystem,
        maxStored: draft.maxStored ?? opts.defaultStrategy.maxStored,
        ...clearing,
      };
    case "buffer":
      return { kind: "buffer", maxMessages: draft.maxMessages ?? 0, ...base };
    case "window": {
      const window = draft.window ?? DEFAULT_WINDOW;
      if (window <= 0) throw invalidArgument(`${f}.window.window`, "must be positive");
      return { kind: "window", window, ...base, ...tokenOptions(draft, `${f}.window`) };
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
        ...tokenOptions(draft, `${f}.summary`),
        ...(draft.summaryPlacement === undefined || draft.summaryPlacement === "system"
          ? {}
          : { summaryPlacement: draft.summaryPlacement }),
      };
    }
  }
}

/**
 * A canonical text of a strategy: equal strategies give equal keys. Token
 * options and summary placement appear only when not the default, so a
 * thread stored before they existed keeps its key (stores compare keys).
 */
export function strategyKey(s: Strategy): string {
  switch (s.kind) {
    case "buffer":
      return `buffer(max_messages=${s.maxMessages},exclude_system=${s.excludeSystem},max_stored=${s.maxStored}${clearingKey(s)})`;
    case "window":
      return `window(window=${s.window},exclude_system=${s.excludeSystem},max_stored=${s.maxStored}${tokenKey(s)}${clearingKey(s)})`;
    case "summary":
      return `summary(window=${s.window},summarize_every=${s.summarizeEvery},model=${s.model},exclude_system=${s.excludeSystem},max_stored=${s.maxStored}${tokenKey(s)}${
        (s.summaryPlacement ?? "system") === "system"
          ? ""
          : `,summary_placement=${s.summaryPlacement}`
      }${clearingKey(s)})`;
  }
}

function tokenKey(s: { maxTokens?: number; tokenEncoding?: TokenEncoding }): string {
  const max = s.maxTokens ?? 0;
  const enc = s.tokenEncoding ?? DEFAULT_TOKEN_ENCODING;
  return (
    (max > 0 ? `,max_tokens=${max}` : "") +
    (enc !== DEFAULT_TOKEN_ENCODING ? `,token_encoding=${enc}` : "")
  );
}

function clearingKey(s: Strategy): string {
  const c = s.clearToolResults;
  if (c === undefined) return "";
  return `,clear_tool_results(keep_tool_turns=${c.keepToolTurns ?? ""},keep_tool_tokens=${c.keepToolTokens ?? ""})`;
}

/** The encoding a strategy counts tokens with. */
export function encodingOf(s: Strategy): TokenEncoding {
  return s.kind === "buffer" ? DEFAULT_TOKEN_ENCODING : (s.tokenEncoding ?? DEFAULT_TOKEN_ENCODING);
}

export function sameStrategy(a: Strategy, b: Strategy): boolean {
  return strategyKey(a) === strategyKey(b);
}
