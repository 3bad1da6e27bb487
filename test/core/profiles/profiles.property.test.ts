/**
 * Over generated transcripts with tool calls (parallel, pending at the end,
 * and the broken shapes a stored thread can hold: results cut off from their
 * call, calls never answered), every strategy's cut at random windows,
 * budgets, summaries and tool-output clearing, shaped for a random profile:
 * the list passes that profile's checker, keeps the budget it kept before
 * shaping, keeps a pending call whole, and leaves the stored thread as it was.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { shapeRecalled } from "../../../src/core/get-shaping.js";
import { PROFILES } from "../../../src/core/profiles/index.js";
import { applyProfile, quickShape, shapeFully } from "../../../src/core/profiles/shape.js";
import { recall, summaryTokens } from "../../../src/core/recall.js";
import { tokensOf } from "../../../src/core/tokens.js";
import { clearToolResults } from "../../../src/core/tool-clearing.js";
import type {
  ChatMessage,
  StoredMessage,
  Strategy,
  ToolClearing,
} from "../../../src/core/types.js";
import { CHECKERS, PROFILE_NAMES } from "./checkers.js";

type Unit =
  | { kind: "user" | "system" | "assistant" | "orphan" | "unanswered"; words: number }
  | { kind: "calls"; words: number; results: number[]; order: number[] };

const words = (n: number, seed: string): string =>
  Array.from({ length: n }, (_, i) => `${seed}${i % 7}`).join(" ");

const wordsArb = fc.integer({ min: 1, max: 30 });
const unitArb: fc.Arbitrary<Unit> = fc.oneof(
  { arbitrary: fc.record({ kind: fc.constant("user" as const), words: wordsArb }), weight: 4 },
  { arbitrary: fc.record({ kind: fc.constant("system" as const), words: wordsArb }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant("assistant" as const), words: wordsArb }), weight: 3 },
  { arbitrary: fc.record({ kind: fc.constant("orphan" as const), words: wordsArb }), weight: 1 },
  {
    arbitrary: fc.record({ kind: fc.constant("unanswered" as const), words: wordsArb }),
    weight: 1,
  },
  {
    arbitrary: fc.record({
      kind: fc.constant("calls" as const),
      words: fc.nat({ max: 5 }),
      results: fc.array(fc.integer({ min: 1, max: 60 }), { minLength: 1, maxLength: 3 }),
      order: fc.array(fc.nat(), { minLength: 3, maxLength: 3 }),
    }),
    weight: 5,
  },
);

/** A stored thread: the units, then maybe a pending call answered in part. */
const threadArb = fc
  .record({
    units: fc.array(unitArb, { maxLength: 24 }),
    pending: fc.option(
      fc.record({ calls: fc.integer({ min: 1, max: 3 }), answered: fc.nat({ max: 2 }) }),
      {
        nil: undefined,
      },
    ),
  })
  .map(({ units, pending }): StoredMessage[] => {
    const out: ChatMessage[] = [];
    let n = 0;
    const id = (): string => `call_${++n}`;
    const addCalls = (count: number, answered: number, resultWords: (i: number) => number) => {
      const ids = Array.from({ length: count }, id);
      out.push({
        role: "assistant",
        content: "",
        toolCalls: ids.map((callId, i) => ({ id: callId, name: `tool${i}`, arguments: "{}" })),
      });
      for (const [i, callId] of ids.slice(0, answered).entries()) {
        out.push({ role: "tool", content: words(resultWords(i), "out"), toolCallId: callId });
      }
    };
    for (const u of units) {
      if (u.kind === "user" || u.kind === "system" || u.kind === "assistant") {
        out.push({ role: u.kind, content: words(u.words, u.kind) });
      } else if (u.kind === "orphan") {
        out.push({ role: "tool", content: words(u.words, "lost"), toolCallId: id() });
      } else if (u.kind === "unanswered") {
        addCalls(1, 0, () => 0);
        out.push({ role: "user", content: words(u.words, "user") });
      } else if (u.kind === "calls") {
        // Parallel calls; results in a generated order.
        const ids = u.results.map(id);
        out.push({
          role: "assistant",
          content: words(u.words, "thinking"),
          toolCalls: ids.map((callId) => ({ id: callId, name: "search", arguments: '{"q":1}' })),
        });
        const order = ids.map((callId, i) => ({
          callId,
          key: u.order[i] ?? 0,
          w: u.results[i] ?? 1,
        }));
        order.sort((a, b) => a.key - b.key);
        for (const r of order) {
          out.push({ role: "tool", content: words(r.w, "result"), toolCallId: r.callId });
        }
      }
    }
    if (pending !== undefined) {
      addCalls(pending.calls, Math.min(pending.answered, pending.calls - 1), () => 5);
    }
    return out.map((m, i) => Object.freeze({ ...m, seq: i + 1, createTime: i + 1 }));
  });

const clearingArb: fc.Arbitrary<ToolClearing | undefined> = fc.option(
  fc.oneof(
    fc.record({ keepToolTurns: fc.nat({ max: 4 }) }),
    fc.record({ keepToolTokens: fc.nat({ max: 200 }) }),
    fc.record({ keepToolTurns: fc.nat({ max: 4 }), keepToolTokens: fc.nat({ max: 200 }) }),
  ),
  { nil: undefined },
);

const strategyArb: fc.Arbitrary<Strategy> = fc.oneof(
  fc
    .record({ maxMessages: fc.nat({ max: 12 }), excludeSystem: fc.boolean() })
    .map((o): Strategy => ({ kind: "buffer", maxStored: 1000, ...o })),
  fc
    .record({ window: fc.integer({ min: 1, max: 12 }), excludeSystem: fc.boolean() })
    .map((o): Strategy => ({ kind: "window", maxStored: 1000, ...o })),
  fc
    .record({
      window: fc.nat({ max: 8 }),
      excludeSystem: fc.boolean(),
      placement: fc.constantFrom("system" as const, "user" as const, "none" as const),
    })
    .map(
      (o): Strategy => ({
        kind: "summary",
        window: o.window,
        summarizeEvery: 3,
        model: "fake",
        excludeSystem: o.excludeSystem,
        maxStored: 1000,
        summaryPlacement: o.placement,
      }),
    ),
);

const caseArb = fc.record({
  thread: threadArb,
  strategy: strategyArb,
  profile: fc.constantFrom(...PROFILE_NAMES),
  maxTokens: fc.option(fc.integer({ min: 1, max: 400 }), { nil: undefined }),
  clearing: clearingArb,
  summaryWords: fc.nat({ max: 20 }),
  foldedFraction: fc.double({ min: 0, max: 1, noNaN: true }),
  degraded: fc.boolean(),
});

const sum = (ms: readonly StoredMessage[]): number => {
  let n = 0;
  for (const m of ms) n += tokensOf(m, "o200k_base");
  return n;
};

function pendingCall(list: readonly StoredMessage[]): StoredMessage | undefined {
  let i = list.length - 1;
  while (i >= 0 && list[i]?.role === "tool") i -= 1;
  const call = list[i];
  if (call?.role !== "assistant" || (call.toolCalls?.length ?? 0) === 0) return undefined;
  const answered = new Set(list.slice(i + 1).map((m) => m.toolCallId));
  return call.toolCalls?.every((c) => answered.has(c.id)) ? undefined : call;
}

describe("provider profiles over generated transcripts", () => {
  it("every Get passes its profile's checker, keeps its budget and a pending call whole", () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        const folded = Math.floor(c.thread.length * c.foldedFraction);
        const summary =
          c.strategy.kind === "summary" && c.summaryWords > 0 ? words(c.summaryWords, "sum") : "";
        const state = {
          summary,
          summarizedThroughSeq: summary === "" ? 0 : folded,
          summaryTime: 1,
        };
        const before = JSON.stringify(c.thread);
        const r = recall(c.strategy, state, c.thread, {
          maxTokens: c.maxTokens,
          degraded: c.degraded,
        });
        const shaped = shapeRecalled(r, {
          profile: c.profile,
          clearing: c.clearing,
          encoding: "o200k_base",
        });

        expect(CHECKERS[c.profile](shaped.messages)).toEqual([]);
        // A list the provider accepts as it is comes back as it is.
        const cleared =
          c.clearing === undefined
            ? r.messages
            : clearToolResults(r.messages, c.clearing, "o200k_base").messages;
        if (CHECKERS[c.profile](cleared).length === 0) expect(shaped.messages).toEqual(cleared);
        // The quick paths give what every step gives.
        const rules = PROFILES[c.profile];
        const quick = quickShape(cleared, rules, "o200k_base");
        if (quick !== undefined) {
          expect(quick.inputTokens).toBe(sum(cleared));
          // Why shapeRecalled takes a quick shaping without checking the budget.
          expect(quick.tokens).toBeLessThanOrEqual(quick.inputTokens);
        }
        for (const budget of [undefined, c.maxTokens]) {
          expect(applyProfile(cleared, rules, "o200k_base", budget)).toEqual(
            shapeFully(cleared, rules, "o200k_base", budget),
          );
        }
        expect(JSON.stringify(c.thread)).toBe(before);

        const placementNone =
          c.strategy.kind === "summary" && c.strategy.summaryPlacement === "none";
        const outside = placementNone ? summaryTokens(summary, "o200k_base") : 0;
        expect(shaped.tokens).toBe(sum(shaped.messages) + outside);
        const afterClearing = r.tokens - shaped.clearedToolTokens;
        if (r.maxTokens > 0 && afterClearing <= r.maxTokens) {
          expect(shaped.tokens).toBeLessThanOrEqual(r.maxTokens);
        }
        expect(shaped.overBudget).toBe(r.maxTokens > 0 && shaped.tokens > r.maxTokens);

        // Each stored message at most once; the conversation oldest first (system
        // messages may be moved to the head, the summary, seq 0, after them).
        const stored = shaped.messages.map((m) => m.seq).filter((seq) => seq > 0);
        expect(new Set(stored).size).toBe(stored.length);
        const seqs = shaped.messages
          .filter((m) => m.role !== "system" && m.seq > 0)
          .map((m) => m.seq);
        for (let i = 1; i < seqs.length; i++) expect(seqs[i]).toBeGreaterThan(seqs[i - 1] ?? -1);

        const pending = pendingCall(r.messages);
        const kept = shaped.messages.findIndex((m) => m.seq === pending?.seq);
        if (pending !== undefined && kept >= 0) {
          const results = r.messages.filter((m) => m.seq > pending.seq).map((m) => m.seq);
          expect(shaped.messages.slice(kept + 1).map((m) => m.seq)).toEqual(results);
          expect(shaped.messages[kept]?.toolCalls).toEqual(pending.toolCalls);
        }
      }),
      { numRuns: 400 },
    );
  });

  it("clearing replaces exactly the results past either limit, each by a smaller placeholder", () => {
    fc.assert(
      fc.property(threadArb, clearingArb, (thread, clearing) => {
        if (clearing === undefined) return;
        const cleared = clearToolResults(thread, clearing, "o200k_base");
        // The rule stated over suffixes: calls after the result, tool tokens from it on.
        const expected = thread.map((m, i) => {
          if (m.role !== "tool") return false;
          const later = thread.slice(i + 1);
          const turnsAfter = later.filter((x) => (x.toolCalls?.length ?? 0) > 0).length;
          const tokensFrom = sum(thread.slice(i).filter((x) => x.role === "tool"));
          return (
            turnsAfter >= (clearing.keepToolTurns ?? Number.POSITIVE_INFINITY) ||
            tokensFrom > (clearing.keepToolTokens ?? Number.POSITIVE_INFINITY)
          );
        });
        let saved = 0;
        cleared.messages.forEach((m, i) => {
          const original = thread[i] as StoredMessage;
          if (m === original) {
            // Left whole: not past a limit, or its placeholder would not be smaller.
            if (expected[i])
              expect(sum([placeholderFor(thread, original)])).toBeGreaterThanOrEqual(
                sum([original]),
              );
            return;
          }
          expect(expected[i]).toBe(true);
          expect(m.toolCallId).toBe(original.toolCallId);
          expect(m.content).toBe(
            `[tool result cleared: search call ${original.toolCallId}, ${sum([original])} tokens]`.replace(
              "search",
              thread.flatMap((x) => x.toolCalls ?? []).find((c) => c.id === original.toolCallId)
                ?.name ?? "unknown tool",
            ),
          );
          expect(sum([m])).toBeLessThan(sum([original]));
          saved += sum([original]) - sum([m]);
        });
        expect(cleared.count).toBe(cleared.messages.filter((m, i) => m !== thread[i]).length);
        expect(cleared.savedTokens).toBe(saved);
      }),
    );
  });
});

/** The placeholder the README promises for `result`, written out here on its own. */
function placeholderFor(thread: readonly StoredMessage[], result: StoredMessage): StoredMessage {
  const call = thread.flatMap((x) => x.toolCalls ?? []).find((c) => c.id === result.toolCallId);
  const { tokens: _t, ...rest } = result;
  return {
    ...rest,
    content: `[tool result cleared: ${call?.name ?? "unknown tool"} call ${result.toolCallId}, ${sum([result])} tokens]`,
  };
}
