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
import type { Profile, StoredMessage, TokenEncoding, ToolCall } from "../types.js";
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
  const quick = quickShape(messages, rules, encoding);
  // A quick shaping only drops and merges, so it fits a budget that its input fitted (the
  // contract above); over it, the full path is what drops the oldest turns.
  if (quick !== undefined && (budget === undefined || quick.inputTokens <= budget)) {
    return { messages: quick.messages, tokens: quick.tokens };
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

/** Largest parallel call the quick path takes; a larger one goes the full way. */
const QUICK_CALLS = 8;

/** A quick shaping, with the tokens of the list it was given (each message counted once). */
export interface QuickShaped extends Shaped {
  inputTokens: number;
}

/**
 * What shapeFully gives without a budget, in one pass over `msgs` and
 * without building turns, for the lists a Get usually holds: the leading
 * system messages, then (where a user turn must come first) the list from
 * its first user message on, every run of same-role turns merged where
 * turns must alternate. Undefined, and the full shaping runs, at anything
 * else: a stray or repeated tool result, a call left unanswered before the
 * end, a system message after the conversation started, a summary the
 * provider wants as a user turn. Its tokens never exceed its input's (it
 * drops, and a merged message counts no more than its parts), so with a
 * budget the input fitted, shapeFully's first step gives the same.
 *
 * Why a prefix before the first user message is simply dropped: the full
 * shaping drops every turn before the first user turn, and grouping never
 * reaches past a user message (results are tool messages), so that first
 * user turn is the first user message.
 */
export function quickShape(
  msgs: readonly StoredMessage[],
  rules: ProfileRules,
  encoding: TokenEncoding,
): QuickShaped | undefined {
  // Undefined while the list out is msgs[0, i) as it is: copied once, at the first change.
  let out: StoredMessage[] | undefined;
  let inputTokens = 0;
  let tokens = 0;
  let i = 0;
  for (; i < msgs.length && (msgs[i] as StoredMessage).role === "system"; i++) {
    const t = tokensOf(msgs[i] as StoredMessage, encoding);
    inputTokens += t;
    tokens += t;
  }
  if (rules.userFirst) {
    let u = i;
    while (u < msgs.length && (msgs[u] as StoredMessage).role !== "user") {
      if ((msgs[u] as StoredMessage).role === "system") return undefined;
      inputTokens += tokensOf(msgs[u] as StoredMessage, encoding);
      u += 1;
    }
    // Nothing but the head left, or a summary the full path makes the user turn.
    if (u > i && (u === msgs.length || (i > 0 && (msgs[0] as StoredMessage).seq === 0))) {
      return undefined;
    }
    if (u > i) out = msgs.slice(0, i);
    i = u;
  }
  while (i < msgs.length) {
    const m = msgs[i] as StoredMessage;
    if (m.role === "tool" || (m.role === "system" && rules.systemFirst)) return undefined;
    let end = i + 1;
    let after = end;
    if (m.role === "user" && rules.alternate) {
      end = runEnd(msgs, i, false);
      after = end;
    } else if (m.role === "assistant") {
      if (rules.alternate && !hasCalls(m)) end = runEnd(msgs, i, true);
      const next = msgs[end];
      const absorbed =
        rules.alternate && next !== undefined && next.role === "assistant" && hasCalls(next);
      // A call (after the run of assistant texts it absorbs) and its results.
      const at = hasCalls(m) ? i : absorbed ? end : -1;
      if (at >= 0) {
        after = answeredRun(msgs, at);
        if (after < 0) return undefined;
        end = at + 1;
      } else {
        after = end;
      }
    }
    // msgs[i, end) is one message out (merged when more); msgs[end, after) are results.
    if (end === i + 1) {
      const t = tokensOf(m, encoding);
      inputTokens += t;
      tokens += t;
      out?.push(m);
    } else {
      for (let k = i; k < end; k++) inputTokens += tokensOf(msgs[k] as StoredMessage, encoding);
      const one = merged(msgs, i, end, encoding);
      tokens += tokensOf(one, encoding);
      out ??= msgs.slice(0, i);
      out.push(one);
    }
    for (let r = end; r < after; r++) {
      const t = tokensOf(msgs[r] as StoredMessage, encoding);
      inputTokens += t;
      tokens += t;
      out?.push(msgs[r] as StoredMessage);
    }
    i = after;
  }
  return { messages: out ?? msgs.slice(), tokens, inputTokens };
}

function hasCalls(m: StoredMessage): boolean {
  return m.toolCalls !== undefined && m.toolCalls.length > 0;
}

/**
 * The index after the run of same-role turns starting at `from`: user
 * messages, or (`assistant`) assistant messages without calls.
 */
function runEnd(msgs: readonly StoredMessage[], from: number, assistant: boolean): number {
  const role = assistant ? "assistant" : "user";
  let end = from + 1;
  for (; end < msgs.length; end++) {
    const m = msgs[end] as StoredMessage;
    if (m.role !== role || (assistant && hasCalls(m))) break;
  }
  return end;
}

/**
 * The index after the results that follow the call at `at`, when they
 * answer each of its calls once (or the call is pending at the end); -1
 * otherwise (a repeat, a stray, a call left unanswered, too many calls).
 */
function answeredRun(msgs: readonly StoredMessage[], at: number): number {
  const calls = (msgs[at] as StoredMessage).toolCalls ?? [];
  if (calls.length > QUICK_CALLS) return -1;
  for (let a = 0; a < calls.length; a++) {
    for (let b = a + 1; b < calls.length; b++) {
      if ((calls[a] as ToolCall).id === (calls[b] as ToolCall).id) return -1;
    }
  }
  let j = at + 1;
  for (; j < msgs.length && (msgs[j] as StoredMessage).role === "tool"; j++) {
    // More results than calls: one is a stray or a repeat (and the scans stay short).
    if (j - at > calls.length) return -1;
    const id = (msgs[j] as StoredMessage).toolCallId;
    let known = false;
    for (let c = 0; c < calls.length; c++) if ((calls[c] as ToolCall).id === id) known = true;
    if (!known) return -1;
    for (let k = at + 1; k < j; k++) if ((msgs[k] as StoredMessage).toolCallId === id) return -1;
  }
  return j - at - 1 === calls.length || j === msgs.length ? j : -1;
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
      const withCall = [...run, next.call];
      out.push({ ...next, call: merged(withCall, 0, withCall.length, encoding) });
      end += 1;
    } else if (run.length === 1) {
      out.push(t);
    } else if (t.kind === "user") {
      out.push({ kind: "user", message: merged(run, 0, run.length, encoding), summary: false });
    } else {
      out.push({ kind: "assistant", message: merged(run, 0, run.length, encoding) });
    }
    i = end;
  }
  return out;
}

/** Tokens of the blank line that joins merged texts ("\n\n" is one token in both encodings). */
const JOIN_TOKENS = 1;

/**
 * One message for the run msgs[from, end), oldest first: the texts joined by a blank line,
 * the last message's calls, seq and time (the newest), a name only when all
 * carry the same. Its tokens are not counted again (that would tokenize the
 * run's text on every Get): they are the parts' counts less the overhead the
 * parts no longer pay each (TOKENS_PER_MESSAGE, and a name's when names are
 * dropped), plus a token per joining blank line. Only profiles of providers
 * whose tokenizers gpt-tokenizer lacks merge, where every count is an
 * estimate already; this one never exceeds the parts' sum.
 */
function merged(
  msgs: readonly StoredMessage[],
  from: number,
  end: number,
  encoding: TokenEncoding,
): StoredMessage {
  const last = msgs[end - 1] as StoredMessage;
  const known = mergedRuns.get(last);
  // Compared in place: a run merged before (the usual case) is not copied again.
  if (known !== undefined && known.encoding === encoding && sameRun(known.run, msgs, from, end)) {
    return known.merged;
  }
  const run = msgs.slice(from, end);
  const out = Object.freeze(mergeRun(run, last, encoding));
  mergedRuns.set(last, { run, encoding, merged: out });
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

/** Whether `run` is msgs[from, end), message for message. */
function sameRun(
  run: readonly StoredMessage[],
  msgs: readonly StoredMessage[],
  from: number,
  end: number,
): boolean {
  if (run.length !== end - from) return false;
  for (let k = from; k < end; k++) if (run[k - from] !== msgs[k]) return false;
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
