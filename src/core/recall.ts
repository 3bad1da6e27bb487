/**
 * Recall and fold planning: what a Get returns for each strategy, and which
 * messages a summary fold takes in. Plain functions over a thread's stored
 * messages (README, Semantics: Recall), so they are tested without a store, a clock or a
 * model; the service reads the thread, calls these and writes the result.
 *
 * Everything refers to messages by seq, never by position, so trimming the
 * oldest messages (max_stored) cannot make a fold skip or repeat a message.
 * The returned arrays are new; their elements are the caller's objects.
 */
import type { StoredMessage, Strategy } from "./types.js";

/** Text the summary system message starts with (the seed's wording). */
export const SUMMARY_PREFIX = "Summary of the earlier conversation:\n";

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
 * else the newest `size`, widened backwards while the slice starts on a tool
 * result, so it starts on the assistant message that made the call (with
 * parallel calls, over all of its results).
 *
 * The loop stops at index 0 whatever that message is. So the slice can start
 * on a tool result only when `msgs` itself does and every message before the
 * cut is a tool result too: a thread whose calls were trimmed away by
 * max_stored. That call is gone from the store; no widening can bring it back,
 * and the seed returns such a thread as it is, so this does too.
 */
export function windowSlice(msgs: readonly StoredMessage[], size: number): StoredMessage[] {
  if (size <= 0 || msgs.length <= size) return [...msgs];
  let start = msgs.length - size;
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
export function ceilingSlice(msgs: readonly StoredMessage[], size: number): StoredMessage[] {
  if (size <= 0 || msgs.length <= size) return [...msgs];
  let start = msgs.length - size;
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
 * The system message a summary is replayed as. It has seq 0 (it is no stored
 * message, and 0 keeps a recalled list's seqs increasing) and the time the
 * summary was written.
 */
export function summaryMessage(summary: string, summaryTime: number): StoredMessage {
  return { role: "system", content: SUMMARY_PREFIX + summary, seq: 0, createTime: summaryTime };
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
): FoldPlan | undefined {
  const unfolded = unfoldedMessages(visibleMessages(strategy, messages), summarizedThroughSeq);
  let end = size > 0 ? Math.max(0, unfolded.length - size) : unfolded.length;
  if (end < strategy.summarizeEvery) return undefined;
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
}

/**
 * Get's result (README, Semantics: Recall).
 * - buffer: the ceiling of ceilingSlice; window: the seed's windowSlice.
 * - summary: the summary as a system message (when there is one), then every
 *   visible message it does not cover yet, verbatim. Unlike the seed, which
 *   keeps only the newest `size`, this returns the overflow not yet folded
 *   too, so every message is in the summary or in the list at all times.
 * - summary with `degraded` (the fold failed or timed out): the last good
 *   summary and a plain window of the newest `size` unfolded messages, as the
 *   seed degrades "to a plain window rather than breaking the conversation".
 *
 * The summary message is added even with excludeSystem: that option hides the
 * stored system messages, not the memory's own account of the conversation
 * (the seed does the same). A thread that does not exist is `messages = []`.
 */
export function recall(
  strategy: Strategy,
  state: { summary: string; summarizedThroughSeq: number; summaryTime: number },
  messages: readonly StoredMessage[],
  opts: { limit?: number | undefined; degraded?: boolean },
): Recalled {
  const msgs = visibleMessages(strategy, messages);
  const size = recallSize(strategy, opts.limit);
  switch (strategy.kind) {
    case "buffer":
      return { messages: ceilingSlice(msgs, size), summary: "" };
    case "window":
      return { messages: windowSlice(msgs, size), summary: "" };
    case "summary": {
      const unfolded = unfoldedMessages(msgs, state.summarizedThroughSeq);
      const recent = opts.degraded === true ? windowSlice(unfolded, size) : unfolded;
      const head = state.summary === "" ? [] : [summaryMessage(state.summary, state.summaryTime)];
      return { messages: [...head, ...recent], summary: state.summary };
    }
  }
}
