/**
 * What a Get does to the strategy's cut before answering: tool-output
 * clearing (tool-clearing.ts), then the provider profile (profiles/). Both
 * are read-time views: nothing stored changes.
 */
import { PROFILES } from "./profiles/index.js";
import { quickShape, shapeFully } from "./profiles/shape.js";
import type { Recalled } from "./recall.js";
import { tokensOf } from "./tokens.js";
import { clearToolResults } from "./tool-clearing.js";
import type { Profile, TokenEncoding, ToolClearing } from "./types.js";

export interface ShapeOptions {
  profile?: Profile | undefined;
  clearing?: ToolClearing | undefined;
  /** The encoding the recall counted with (encodingOf the Get's strategy). */
  encoding: TokenEncoding;
}

/** A recall as a Get returns it, with what clearing did. */
export interface ShapedRecall extends Recalled {
  clearedToolResults: number;
  clearedToolTokens: number;
}

/**
 * The recall cleared and shaped. Its tokens are those of the returned list
 * (plus the summary's when it is not among them, as recall counts it); a
 * list that fitted the budget after clearing still fits it after the
 * profile (profiles/shape.ts).
 */
export function shapeRecalled(r: Recalled, opts: ShapeOptions): ShapedRecall {
  if (opts.profile === undefined && opts.clearing === undefined) {
    // The same literal as below: one object shape for every Get, so the code after stays monomorphic.
    return {
      messages: r.messages,
      summary: r.summary,
      tokens: r.tokens,
      maxTokens: r.maxTokens,
      overBudget: r.overBudget,
      clearedToolResults: 0,
      clearedToolTokens: 0,
    };
  }
  let messages = r.messages;
  let clearedToolResults = 0;
  let clearedToolTokens = 0;
  if (opts.clearing !== undefined) {
    const cleared = clearToolResults(messages, opts.clearing, opts.encoding);
    messages = cleared.messages;
    clearedToolResults = cleared.count;
    clearedToolTokens = cleared.savedTokens;
  }
  let tokens = r.tokens - clearedToolTokens;
  if (opts.profile !== undefined) {
    const rules = PROFILES[opts.profile];
    // The quick shaping counts the list's tokens as it goes: no second pass for them.
    const quick = quickShape(messages, rules, opts.encoding);
    let listTokens = quick?.inputTokens ?? 0;
    if (quick === undefined) for (const m of messages) listTokens += tokensOf(m, opts.encoding);
    // Tokens outside the list: the summary with placement none.
    const outside = tokens - listTokens;
    const fits = r.maxTokens > 0 && tokens <= r.maxTokens;
    const budget = fits ? r.maxTokens - outside : undefined;
    // A quick shaping never adds tokens (it drops and merges), so it fits any budget its input fit.
    const shaped = quick ?? shapeFully(messages, rules, opts.encoding, budget);
    messages = shaped.messages;
    tokens = shaped.tokens + outside;
  }
  return {
    messages,
    summary: r.summary,
    tokens,
    maxTokens: r.maxTokens,
    overBudget: r.maxTokens > 0 && tokens > r.maxTokens,
    clearedToolResults,
    clearedToolTokens,
  };
}
