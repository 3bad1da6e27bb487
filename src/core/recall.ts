/**
 * Recall and fold planning: what a Get returns for each strategy, and which
 * messages a summary fold takes in. Plain functions over a thread's stored
 * messages (README, Semantics: Recall), so they are tested without a store, a clock or a
 * model; the service reads the thread, calls these and writes the result.
 *
 * Everything refers to messages by seq, never by position, so trimming the
 * oldest messages (max_stored) cannot make a fold skip or repeat a message.
 * The returned arrays are new; their elements are the caller's objects, except
 * a message without a stored count in the strategy's encoding, returned as a
 * copy that carries one.
 */
import { encodingOf } from "./strategy.js";
import { DEFAULT_TOKEN_ENCODING, tokensOf } from "./tokens.js";
import type { StoredMessage, Strategy, TokenEncoding } from "./types.js";

/** Text the summary system message starts with (the seed's wording). */
export const SUMMARY_PREFIX = "Summary of the earlier conversation:\n";

/**
 * The token budget a Get uses: the request's max_tokens when given (0: none),
 * else the strategy's (0 when it has none; buffer strategies have none).
 */
export function recallBudget(strategy: Strategy, maxTokens: number | undefined): number {
  if (maxTokens !== undefined) return maxTokens;
  return strategy.kind === "buffer" ? 0 : (strategy.maxTokens ?? 0);
}

/** Sum of the messages' tokens under `encoding`. */
export function totalTokens(msgs: readonly StoredMessage[], encoding: TokenEncoding): number {
  let n = 0;
  for (const m of msgs) n += tokensOf(m, encoding);
  return n;
}

/**
 * Index of the oldest message of the longest newest suffix of `msgs`, from
 * `from` on, whose tokens sum to at most `budget` (msgs.length when not even
 * the newest fits). Walks only as far back as the budget reaches.
 */
export function budgetStart(
  msgs: readonly StoredMessage[],
  from: number,
  budget: number,
  encoding: TokenEncoding,
): number {
  let start = msgs.length;
  let used = 0;
  while (start > from) {
    const m = msgs[start - 1];
    if (m === undefined) break;
    const t = tokensOf(m, encoding);
    if (used + t > budget) break;
    used += t;
    start -= 1;
  }
  return start;
}

/**
 * The strategy a Get shapes the thread with (GetRequest.recall): the thread's
 * own, or the request's `recall`, so that each memory object of a client
 * reads a shared thread with its own window, budget and ceiling. A summary
 * recall on a thread without the summary strategy reads as a window of its
 * size (0: every message, as summary + unfolded is for a thread with no
 * summary): such a thread has no summary, and a read must not start folds
 * the thread's strategy never asked for. The thread's max_stored stays: a
 * read stores nothing.
 */
export function readStrategy(thread: Strategy, recall: Strategy | undefined): Strategy {
  if (recall === undefined) return thread;
  const base = { excludeSystem: recall.excludeSystem, maxStored: thread.maxStored };
  if (recall.kind === "summary" && thread.kind !== "summary") {
    return {
      kind: "window",
      window: recall.window,
      ...base,
      ...(recall.maxTokens === undefined ? {} : { maxTokens: recall.maxTokens }),
      ...(recall.tokenEncoding === undefined ? {} : { tokenEncoding: recall.tokenEncoding }),
      ...(recall.clearToolResults === undefined
        ? {}
        : { clearToolResults: recall.clearToolResults }),
    };
  }
  // A summary recall on a summary thread keeps the thread's summariser: only
  // the thread's strategy decides folds.
  if (recall.kind === "summary" && thread.kind === "summary") {
    return { ...recall, ...base, summarizeEvery: thread.summarizeEvery, model: thread.model };
  }
  return { ...recall, ...base };
}

/**
 * The size a Get uses: the request's limit when given, else the strategy's
 * (buffer: maxMessages, window: window, summary: window). 0 means "no ceiling"
 * for buffer and window, and "keep nothing back from a fold" for summary.
 */
export function recallSize(strategy: Strategy, limit: number | undefined): number {
  if (limit !== undefined) return limit;
  switch (strategy.kind) {
    case "buffer":
      return strategy.maxMessages;
    case "window":
    case "summary":
      return strategy.window;
  }
}

/**
 * Stored messages as the strategy sees them: system messages removed when
 * strategy.excludeSystem. Every size, window and fold counts only these, as in
 * the seed, which filters before it slices.
 */
export function visibleMessages(
  strategy: Strategy,
  messages: readonly StoredMessage[],
): StoredMessage[] {
  return strategy.excludeSystem ? messages.filter((m) => m.role !== "system") : [...messages];
}

/**
 * The seed's WindowMemory slice: all of `msgs` when `size <= 0` or they fit;
 * else the newest `size`; with a `budget`, at most the newest that fit in
 * it (none when not even the newest does); then widened backwards while the slice starts on a tool
 * result, so it starts on the assistant message that made the call (with
 * parallel calls, over all of its results).
 *
 * The loop stops at index 0 whatever that message is. So the slice can start
 * on a tool result only when `msgs` itself does and every message before the
 * cut is a tool result too: a thread whose calls were trimmed away by
 * max_stored. That call is gone from the store; no widening can bring it back,
 * and the seed returns such a thread as it is, so this does too.
 */
export function windowSlice(
  msgs: readonly StoredMessage[],
  size: number,
  budget?: { maxTokens: number; encoding: TokenEncoding },
): StoredMessage[] {
  let start = size <= 0 || msgs.length <= size ? 0 : msgs.length - size;
  if (budget !== undefined) {
    start = budgetStart(msgs, start, budget.maxTokens, budget.encoding);
    // Nothing fits: return nothing rather than widen from past the end.
    if (start >= msgs.length) return [];
  }
  while (start > 0 && msgs[start]?.role === "tool") start -= 1;
  return msgs.slice(start);
}

/**
 * The buffer's ceiling: all of `msgs` when `size <= 0` or they fit; else the
 * newest `size`, minus any tool results at the front of the cut (their call
 * fell outside it). A ceiling never widens, so it may return fewer than
 * `size` messages, even none when the newest `size` are all tool results:
 * a transcript that starts on an orphaned tool result is rejected by some
 * providers. As with the window, a thread that itself starts on one (its call
 * trimmed by max_stored) is returned as stored when it fits.
 */
export function ceilingSlice(
  msgs: readonly StoredMessage[],
  size: number,
  budget?: { maxTokens: number; encoding: TokenEncoding },
): StoredMessage[] {
  let start = size <= 0 || msgs.length <= size ? 0 : msgs.length - size;
  if (budget !== undefined) {
    start = budgetStart(msgs, start, budget.maxTokens, budget.encoding);
  }
  if (start === 0) return [...msgs];
  while (start < msgs.length && msgs[start]?.role === "tool") start += 1;
  return msgs.slice(start);
}

/** The messages a summary does not cover yet: those after `summarizedThroughSeq`. */
export function unfoldedMessages(
  msgs: readonly StoredMessage[],
  summarizedThroughSeq: number,
): StoredMessage[] {
  return msgs.filter((m) => m.seq > summarizedThroughSeq);
}

/**
 * The message a summary is replayed as: a system message (the default) or,
 * with summary_placement user, a user message, with the same text. It has
 * seq 0 (it is no stored message, and 0 keeps a recalled list's seqs
 * increasing) and the time the summary was written.
 */
export function summaryMessage(
  summary: string,
  summaryTime: number,
  role: "system" | "user" = "system",
): StoredMessage {
  return { role, content: SUMMARY_PREFIX + summary, seq: 0, createTime: summaryTime };
}

/**
 * Tokens a summary takes from a budget: those of its message as a system
 * message, whatever the placement (with placement none the caller still
 * sends it, merged into its system prompt); 0 when there is no summary.
 */
export function summaryTokens(summary: string, encoding: TokenEncoding): number {
  return summary === "" ? 0 : tokensOf(summaryMessage(summary, 0), encoding);
}

/**
 * The message with its count in `encoding`: itself when it was stored with
 * one, else a copy carrying the count (stored messages may be frozen).
 */
function withTokens(m: StoredMessage, encoding: TokenEncoding): StoredMessage {
  if (m.tokens !== undefined && (m.tokenEncoding ?? DEFAULT_TOKEN_ENCODING) === encoding) return m;
  const { tokenEncoding: _stale, ...rest } = m;
  return {
    ...rest,
    tokens: tokensOf(m, encoding),
    ...(encoding === DEFAULT_TOKEN_ENCODING ? {} : { tokenEncoding: encoding }),
  };
}

/** A fold to run: these messages go into the summary, through `throughSeq`. */
export interface FoldPlan {
  /** The visible messages to fold, oldest first; never empty. */
  messages: StoredMessage[];
  /** Newest seq folded: the thread's summarizedThroughSeq once the fold commits. */
  throughSeq: number;
}

/**
 * Summary strategy: the fold due now, or undefined.
 *
 * With a token budget (the strategy's, or `tokens.maxTokens` for one Get)
 * the messages that stay verbatim are also at most the newest that fit in
 * the budget beside the current summary (`tokens.summary`), and a fold is
 * also due, however small, when the summary and every unfolded message
 * together exceed the budget.
 *
 * The overflow is every not-yet-folded visible message except the newest
 * `size` (all of them when `size <= 0`, the seed's `recent = []`). A fold is
 * due once the overflow holds at least `summarizeEvery` messages, and then it
 * takes all of the overflow in one model call, as the seed does.
 *
 * The boundary never separates an assistant's tool call from its results: if
 * the first message that stays is a tool result, the boundary moves back
 * until it is not, so the call and its results stay verbatim together. That
 * can shrink the fold below `summarizeEvery` (it still runs: it was due) or to
 * nothing (no fold until later messages move the boundary on).
 *
 * @param messages the thread's stored messages, oldest first (system ones too).
 * @param size the Get's size, see recallSize.
 */
export function planFold(
  strategy: Strategy & { kind: "summary" },
  messages: readonly StoredMessage[],
  summarizedThroughSeq: number,
  size: number,
  tokens: { maxTokens?: number | undefined; summary?: string } = {},
): FoldPlan | undefined {
  const unfolded = unfoldedMessages(visibleMessages(strategy, messages), summarizedThroughSeq);
  let end = size > 0 ? Math.max(0, unfolded.length - size) : unfolded.length;
  const budget = recallBudget(strategy, tokens.maxTokens);
  let overBudget = false;
  if (budget > 0) {
    // With a budget, what stays verbatim is also at most what fits beside the summary.
    const encoding = encodingOf(strategy);
    const head = summaryTokens(tokens.summary ?? "", encoding);
    end = Math.max(end, budgetStart(unfolded, end, Math.max(0, budget - head), encoding));
    overBudget = end > 0 && head + totalTokens(unfolded, encoding) > budget;
  }
  if (end < strategy.summarizeEvery && !overBudget) return undefined;
  while (end > 0 && unfolded[end]?.role === "tool") end -= 1;
  const last = unfolded[end - 1];
  if (last === undefined) return undefined;
  return { messages: unfolded.slice(0, end), throughSeq: last.seq };
}

/** What a Get returns. */
export interface Recalled {
  /** Ready to send to a model, oldest first; a summary comes first as a system message. */
  messages: StoredMessage[];
  /** The running summary for the summary strategy; "" otherwise or when none exists. */
  summary: string;
  /** Tokens of `messages`, plus the summary's when it is not among them (placement none). */
  tokens: number;
  /** The budget applied; 0: none. */
  maxTokens: number;
  /** `tokens` exceeds the budget (see recall for when that can happen). */
  overBudget: boolean;
}

/**
 * Get's result (README, Semantics: Recall).
 * - buffer: the ceiling of ceilingSlice; window: the seed's windowSlice.
 * - summary: the summary message (when there is one and the placement is not
 *   none), then every visible message it does not cover yet, verbatim.
 *   Unlike the seed, which keeps only the newest `size`, this returns the
 *   overflow not yet folded too, so every message is in the summary or in
 *   the list at all times.
 * - summary with `degraded` (the fold failed or timed out): the last good
 *   summary and a plain window of the newest `size` unfolded messages that
 *   fit the budget, as the seed degrades "to a plain window rather than
 *   breaking the conversation".
 *
 * Token budgets (recallBudget): the window and the buffer's ceiling take the
 * newest messages that fit; the window then widens back over tool results
 * as without a budget, which may exceed it (overBudget). A summary thread
 * stays within its budget because planFold folds what does not fit; it can
 * exceed it when the widening keeps a tool call with its results, when the
 * summary alone is larger than the budget, or when the list is not folded
 * yet (allow_stale, or a fold that failed).
 *
 * The summary message is added even with excludeSystem: that option hides the
 * stored system messages, not the memory's own account of the conversation
 * (the seed does the same). A thread that does not exist is `messages = []`.
 */
export function recall(
  strategy: Strategy,
  state: { summary: string; summarizedThroughSeq: number; summaryTime: number },
  messages: readonly StoredMessage[],
  opts: { limit?: number | undefined; maxTokens?: number | undefined; degraded?: boolean },
): Recalled {
  const msgs = visibleMessages(strategy, messages);
  const size = recallSize(strategy, opts.limit);
  const maxTokens = recallBudget(strategy, opts.maxTokens);
  const encoding = encodingOf(strategy);
  const tokenBudget = maxTokens > 0 ? { maxTokens, encoding } : undefined;
  const done = (list: StoredMessage[], summary: string, extra = 0): Recalled => {
    const tokens = totalTokens(list, encoding) + extra;
    return {
      messages: list.map((m) => withTokens(m, encoding)),
      summary,
      tokens,
      maxTokens,
      overBudget: maxTokens > 0 && tokens > maxTokens,
    };
  };
  switch (strategy.kind) {
    case "buffer":
      return done(ceilingSlice(msgs, size, tokenBudget), "");
    case "window":
      return done(windowSlice(msgs, size, tokenBudget), "");
    case "summary": {
      const unfolded = unfoldedMessages(msgs, state.summarizedThroughSeq);
      const placement = strategy.summaryPlacement ?? "system";
      const headTokens = summaryTokens(state.summary, encoding);
      const recent =
        opts.degraded === true
          ? windowSlice(
              unfolded,
              size,
              maxTokens > 0
                ? { maxTokens: Math.max(0, maxTokens - headTokens), encoding }
                : undefined,
            )
          : unfolded;
      if (state.summary === "") return done(recent, "");
      if (placement === "none") return done(recent, state.summary, headTokens);
      const head: StoredMessage = {
        ...summaryMessage(state.summary, state.summaryTime, placement),
        tokens: headTokens,
        ...(encoding === DEFAULT_TOKEN_ENCODING ? {} : { tokenEncoding: encoding }),
      };
      return done([head, ...recent], state.summary);
    }
  }
}
