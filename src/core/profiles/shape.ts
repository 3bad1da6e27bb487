/**
 * Applying a provider's rules to a recalled list, after the strategy's cut
 * and after tool-output clearing: grouping (turns.ts), then as the rules
 * say, system messages moved to the head, the first turn made a user turn,
 * consecutive same-role messages merged.
 *
 * Token budget: every step either drops, moves or merges messages. Dropping
 * and moving never add tokens, and a merged message counts no more than its
 * parts (see merged). A call stripped of unanswered calls is counted again;
 * should that (a stored count from an older rule) make a list that fitted
 * the budget top it, the oldest turns are dropped until it fits again, so a
 * profile never turns a Get that was within its budget into one over it.
 */
import {
  countMessageTokens,
  countTextTokens,
  DEFAULT_TOKEN_ENCODING,
  TOKENS_PER_MESSAGE,
  TOKENS_PER_NAME,
  tokensOf,
} from "../tokens.js";
import type { Profile, StoredMessage, TokenEncoding } from "../types.js";
import { flatten, groupTurns, type Turn } from "./turns.js";

/** What one provider demands of the message list (one module per provider states it). */
export interface ProfileRules {
  profile: Profile;
  /**
   * System messages only at the head: the provider takes them as a separate
   * system parameter (the caller sends the leading system messages there).
   */
  systemFirst: boolean;
  /** The first non-system message must be a user turn. */
  userFirst: boolean;
  /**
   * Turns must alternate between the user side (user messages and tool
   * results) and the assistant side: consecutive user messages, and
   * consecutive assistant messages, are merged into one.
   */
  alternate: boolean;
}

/** A shaped list and its tokens. */
export interface Shaped {
  messages: StoredMessage[];
  tokens: number;
}

/**
 * `messages` shaped by `rules`; `budget`: the tokens the list may take
 * (undefined: no budget, or the list was over it already before shaping).
 */
export function applyProfile(
  messages: readonly StoredMessage[],
  rules: ProfileRules,
  encoding: TokenEncoding,
  budget: number | undefined,
): Shaped {
  const from = quickStart(messages, rules);
  if (from >= 0) {
    let tokens = 0;
    for (let i = from; i < messages.length; i++)
      tokens += tokensOf(messages[i] as StoredMessage, encoding);
    return { messages: messages.slice(from), tokens };
  }
  return shapeFully(messages, rules, encoding, budget);
}

/** applyProfile without its quick paths: every step, even where it changes nothing. */
export function shapeFully(
  messages: readonly StoredMessage[],
  rules: ProfileRules,
  encoding: TokenEncoding,
  budget: number | undefined,
): Shaped {
  let turns = groupTurns(messages, encoding);
  if (rules.systemFirst) turns = systemsFirst(turns);
  for (let round = 0; ; round++) {
    const shaped = build(turns, rules, encoding);
    if (budget === undefined || shaped.tokens <= budget) return shaped;
    // Bounded: after a few rounds every turn the budget may drop goes at once.
    const excess = round < MAX_DROP_ROUNDS ? shaped.tokens - budget : Number.POSITIVE_INFINITY;
    const fewer = dropOldest(turns, excess, encoding);
    if (fewer.length === turns.length) return shaped;
    turns = fewer;
  }
}

/** Rounds of dropping the oldest turns for the budget before dropping all it may. */
const MAX_DROP_ROUNDS = 3;

/** Largest parallel call the quick check below takes; a larger one goes the full way. */
const QUICK_CALLS = 8;

/**
 * Where the shaped list starts in `msgs` when shaping would only keep a
 * suffix of it as it is, else -1 (and the full shaping runs): 0 when `msgs`
 * already satisfies `rules` (a cut that starts on a user turn), or, where a
 * user turn must come first, the first user message when nothing before it
 * is a system message or the summary (the full shaping would drop all of
 * it: a turn before the first user message is no user turn, and grouping
 * never reaches past a user message).
 */
function quickStart(msgs: readonly StoredMessage[], rules: ProfileRules): number {
  if (alreadyShaped(msgs, rules, 0)) return 0;
  if (!rules.userFirst) return -1;
  let u = 0;
  for (; u < msgs.length && msgs[u]?.role !== "user"; u++) {
    if (msgs[u]?.role === "system" || msgs[u]?.seq === 0) return -1;
  }
  return u < msgs.length && alreadyShaped(msgs, rules, u) ? u : -1;
}

/**
 * Whether `msgs` from `from` on already satisfies `rules`, so shaping it
 * would change nothing. One pass, no allocation; any doubt answers false.
 */
function alreadyShaped(msgs: readonly StoredMessage[], rules: ProfileRules, from: number): boolean {
  let seenOther = false;
  let prev: StoredMessage["role"] | undefined;
  for (let i = from; i < msgs.length; i++) {
    const m = msgs[i] as StoredMessage;
    if (m.role === "system") {
      if (rules.systemFirst && seenOther) return false;
      prev = m.role;
      continue;
    }
    if (!seenOther && rules.userFirst && m.role !== "user") return false;
    seenOther = true;
    if (m.role === "tool") return false;
    if (rules.alternate && prev === m.role) return false;
    prev = m.role;
    const calls = m.toolCalls;
    if (calls === undefined || calls.length === 0) continue;
    const end = answeredRun(msgs, i, calls);
    if (end < 0) return false;
    if (end > i + 1) prev = "tool";
    i = end - 1;
  }
  return true;
}

/**
 * The index after the results that follow the call at `at`, when they answer
 * each of its calls once (or the call is pending at the end); -1 otherwise.
 */
function answeredRun(
  msgs: readonly StoredMessage[],
  at: number,
  calls: NonNullable<StoredMessage["toolCalls"]>,
): number {
  if (calls.length > QUICK_CALLS) return -1;
  for (let a = 0; a < calls.length; a++) {
    for (let b = a + 1; b < calls.length; b++) if (calls[a]?.id === calls[b]?.id) return -1;
  }
  let j = at + 1;
  for (; j < msgs.length && msgs[j]?.role === "tool"; j++) {
    // More results than calls: one is a stray or a repeat (and the scan below stays short).
    if (j - at > calls.length) return -1;
    const id = msgs[j]?.toolCallId;
    if (!calls.some((c) => c.id === id)) return -1;
    for (let k = at + 1; k < j; k++) if (msgs[k]?.toolCallId === id) return -1;
  }
  const answered = j - at - 1;
  return answered === calls.length || j === msgs.length ? j : -1;
}

function build(turns: readonly Turn[], rules: ProfileRules, encoding: TokenEncoding): Shaped {
  let shaped = rules.userFirst ? userFirst(turns) : turns;
  if (rules.alternate) shaped = mergeSameRole(shaped, encoding);
  const messages = flatten(shaped);
  let tokens = 0;
  for (const m of messages) tokens += tokensOf(m, encoding);
  return { messages, tokens };
}

function systemsFirst(turns: Turn[]): Turn[] {
  const firstOther = turns.findIndex((t) => t.kind !== "system");
  const late = turns.findIndex((t, i) => i > firstOther && t.kind === "system");
  if (firstOther < 0 || late < 0) return turns;
  return [...turns.filter((t) => t.kind === "system"), ...turns.filter((t) => t.kind !== "system")];
}

/**
 * The turns with a user turn first after the system ones: the summary, when
 * it is a system message, becomes that user turn (where the provider accepts
 * it too); otherwise the turns before the first user turn are dropped.
 */
function userFirst(turns: readonly Turn[]): readonly Turn[] {
  const firstOther = turns.findIndex((t) => t.kind !== "system");
  if (firstOther < 0 || turns[firstOther]?.kind === "user") return turns;
  const head = turns.slice(0, firstOther);
  const summaryAt = head.findIndex((t) => t.kind === "system" && t.summary);
  const summary = head[summaryAt];
  if (summary !== undefined && summary.kind === "system") {
    const asUser: Turn = {
      kind: "user",
      message: { ...summary.message, role: "user" },
      summary: true,
    };
    return [
      ...head.slice(0, summaryAt),
      ...head.slice(summaryAt + 1),
      asUser,
      ...turns.slice(firstOther),
    ];
  }
  const firstUser = turns.findIndex((t, i) => i >= firstOther && t.kind === "user");
  return [...head, ...(firstUser < 0 ? [] : turns.slice(firstUser))];
}

/**
 * Merges each run of user turns into one, and each run of assistant text
 * turns into one (into the tool call after them, when one follows). A run is
 * merged in one step, so the work stays linear in the list.
 */
function mergeSameRole(turns: readonly Turn[], encoding: TokenEncoding): Turn[] {
  const out: Turn[] = [];
  for (let i = 0; i < turns.length; ) {
    const t = turns[i] as Turn;
    if (t.kind !== "user" && t.kind !== "assistant") {
      out.push(t);
      i += 1;
      continue;
    }
    let end = i + 1;
    while (turns[end]?.kind === t.kind) end += 1;
    const run = turns.slice(i, end).map((r) => (r as { message: StoredMessage }).message);
    const next = turns[end];
    if (t.kind === "assistant" && next?.kind === "tools") {
      out.push({ ...next, call: merged([...run, next.call], encoding) });
      end += 1;
    } else if (run.length === 1) {
      out.push(t);
    } else if (t.kind === "user") {
      out.push({ kind: "user", message: merged(run, encoding), summary: false });
    } else {
      out.push({ kind: "assistant", message: merged(run, encoding) });
    }
    i = end;
  }
  return out;
}

/** Tokens of the blank line that joins merged texts ("\n\n" is one token in both encodings). */
const JOIN_TOKENS = 1;

/**
 * One message for `run`, oldest first: the texts joined by a blank line,
 * the last message's calls, seq and time (the newest), a name only when all
 * carry the same. Its tokens are not counted again (that would tokenize the
 * run's text on every Get): they are the parts' counts less the overhead the
 * parts no longer pay each (TOKENS_PER_MESSAGE, and a name's when names are
 * dropped), plus a token per joining blank line. Only profiles of providers
 * whose tokenizers gpt-tokenizer lacks merge, where every count is an
 * estimate already; this one never exceeds the parts' sum.
 */
function merged(run: readonly StoredMessage[], encoding: TokenEncoding): StoredMessage {
  const last = run[run.length - 1] as StoredMessage;
  const known = mergedRuns.get(last);
  if (known !== undefined && known.encoding === encoding && sameRun(known.run, run)) {
    return known.merged;
  }
  const out = Object.freeze(mergeRun(run, last, encoding));
  mergedRuns.set(last, { run: run.slice(), encoding, merged: out });
  return out;
}

/**
 * Merged messages made so far, by the run's newest message: the same run is
 * merged again on every Get, and reusing the object saves building it and
 * (service/pre-encoded.ts) encoding it. Kept while the store keeps that message.
 */
const mergedRuns = new WeakMap<
  StoredMessage,
  { run: readonly StoredMessage[]; encoding: TokenEncoding; merged: StoredMessage }
>();

function sameRun(a: readonly StoredMessage[], b: readonly StoredMessage[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function mergeRun(
  run: readonly StoredMessage[],
  last: StoredMessage,
  encoding: TokenEncoding,
): StoredMessage {
  const texts: string[] = [];
  let metadata: Record<string, string> | undefined;
  let sameName = true;
  let tokens = 0;
  for (const m of run) {
    if (m.content !== "") texts.push(m.content);
    if (m.metadata !== undefined) metadata = { ...metadata, ...m.metadata };
    if (m.name !== last.name) sameName = false;
    tokens += tokensOf(m, encoding);
  }
  tokens -= (run.length - 1) * TOKENS_PER_MESSAGE - Math.max(0, texts.length - 1) * JOIN_TOKENS;
  if (!sameName) {
    for (const m of run) {
      if (m.name !== undefined && m.name !== "") {
        tokens -= TOKENS_PER_NAME + countTextTokens(m.name, encoding);
      }
    }
  }
  const { name: _name, tokenEncoding: _stale, ...withoutName } = last;
  const { tokenEncoding: _staleToo, ...withName } = last;
  return {
    ...(sameName ? withName : withoutName),
    content: texts.join("\n\n"),
    ...(metadata === undefined ? {} : { metadata }),
    tokens,
    ...(encoding === DEFAULT_TOKEN_ENCODING ? {} : { tokenEncoding: encoding }),
  };
}

/**
 * The turns without their oldest non-system ones, as many as hold `excess`
 * tokens (at least one), or the same turns when there are none to drop.
 * Each call drops at least one turn, so applyProfile's loop ends.
 */
function dropOldest(turns: readonly Turn[], excess: number, encoding: TokenEncoding): Turn[] {
  const out: Turn[] = [];
  let dropped = 0;
  let dropping = true;
  for (const t of turns) {
    // The summary stands for the oldest messages of all: the budget never drops it.
    if (t.kind === "system" || (t.kind === "user" && t.summary) || !dropping) {
      out.push(t);
      continue;
    }
    // Counted afresh: a stored count from an older rule may be what a merge outgrew.
    for (const m of flatten([t])) dropped += countMessageTokens(m, encoding);
    if (dropped >= excess) dropping = false;
  }
  return out;
}
