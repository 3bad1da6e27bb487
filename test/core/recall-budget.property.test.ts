/**
 * Properties of token budgets over generated threads whose messages carry
 * stored token counts (as the service stores them at Add): a window, a
 * buffer ceiling and a summary thread folded until nothing is due stay
 * within the budget except through the documented widening over a tool call's
 * results (or a summary larger than the budget by itself), never split a
 * tool call from its results, and every message is in the summary or the list.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  planFold,
  recall,
  summaryTokens,
  totalTokens,
  visibleMessages,
} from "../../src/core/recall.js";
import type { ChatMessage, StoredMessage, Strategy } from "../../src/core/types.js";

type Unit =
  | { kind: "user"; tokens: number }
  | { kind: "system"; tokens: number }
  | { kind: "assistant"; tokens: number; calls: number[] }
  | { kind: "orphan"; tokens: number };

const tokensArb = fc.integer({ min: 1, max: 25 });
const unitArb: fc.Arbitrary<Unit> = fc.oneof(
  { arbitrary: tokensArb.map((tokens): Unit => ({ kind: "user", tokens })), weight: 3 },
  { arbitrary: tokensArb.map((tokens): Unit => ({ kind: "system", tokens })), weight: 1 },
  {
    arbitrary: fc
      .record({ tokens: tokensArb, calls: fc.array(tokensArb, { maxLength: 3 }) })
      .map((r): Unit => ({ kind: "assistant", ...r })),
    weight: 4,
  },
  { arbitrary: tokensArb.map((tokens): Unit => ({ kind: "orphan", tokens })), weight: 1 },
);

/** A stored thread with counts; its oldest messages possibly trimmed mid-exchange. */
const threadArb: fc.Arbitrary<StoredMessage[]> = fc
  .record({ units: fc.array(unitArb, { maxLength: 20 }), trimmed: fc.nat({ max: 4 }) })
  .map(({ units, trimmed }) => {
    const out: ChatMessage[] = [];
    let n = 0;
    const next = (p: string): string => `${p}${++n}`;
    for (const u of units) {
      if (u.kind === "user" || u.kind === "system") {
        out.push({ role: u.kind, content: next(u.kind), tokens: u.tokens });
      } else if (u.kind === "orphan") {
        out.push({ role: "tool", content: "r", toolCallId: next("gone"), tokens: u.tokens });
      } else {
        const ids = u.calls.map(() => next("call"));
        out.push({
          role: "assistant",
          content: next("assistant"),
          tokens: u.tokens,
          ...(ids.length === 0
            ? {}
            : { toolCalls: ids.map((id) => ({ id, name: "f", arguments: "{}" })) }),
        });
        u.calls.forEach((tokens, i) => {
          out.push({ role: "tool", content: "r", toolCallId: ids[i] ?? "", tokens });
        });
      }
    }
    return out.map((m, i) => ({ ...m, seq: i + 1, createTime: i + 1 })).slice(trimmed);
  });

const sum = (ms: readonly StoredMessage[]): number => totalTokens(ms, "o200k_base");

function expectPairsKept(all: readonly StoredMessage[], result: readonly StoredMessage[]): void {
  const inResult = new Set(result.map((m) => m.seq));
  for (const m of result) {
    if (m.role !== "tool") continue;
    const caller = all.find((a) => a.toolCalls?.some((c) => c.id === m.toolCallId));
    if (caller !== undefined) expect(inResult.has(caller.seq)).toBe(true);
  }
}

/**
 * `list` fits `budget`, or only through the widening: dropping its first
 * message and the tool results right after it leaves what fits. When the
 * list is the front of what the strategy sees (`atFront`) it may start on
 * tool results whose call was trimmed away: those are the widening then.
 */
function expectWithinBudgetOrWidened(
  list: readonly StoredMessage[],
  budget: number,
  atFront: boolean,
): void {
  if (sum(list) <= budget) return;
  const startsOnTool = list[0]?.role === "tool";
  if (startsOnTool) expect(atFront).toBe(true);
  let j = startsOnTool ? 0 : 1;
  while (list[j]?.role === "tool") j++;
  expect(j).toBeGreaterThan(1); // the over-budget part is a call and its results
  expect(sum(list.slice(j))).toBeLessThanOrEqual(budget);
}

const noSummary = { summary: "", summarizedThroughSeq: 0, summaryTime: 0 };

describe("token budgets", () => {
  it("a window takes the newest messages that fit, widened only over a tool call's results", () => {
    fc.assert(
      fc.property(
        threadArb,
        fc.integer({ min: 1, max: 10 }),
        fc.integer({ min: 1, max: 80 }),
        fc.option(fc.nat({ max: 80 }), { nil: undefined }),
        (thread, window, maxTokens, override) => {
          const strategy: Strategy = {
            kind: "window",
            window,
            excludeSystem: false,
            maxStored: 1000,
            maxTokens,
          };
          const r = recall(strategy, noSummary, thread, { maxTokens: override });
          const budget = override ?? maxTokens;
          expect(r.maxTokens).toBe(budget);
          expect(r.tokens).toBe(sum(r.messages));
          expect(r.overBudget).toBe(budget > 0 && r.tokens > budget);
          // A suffix of the thread.
          expect(r.messages.map((m) => m.seq)).toEqual(
            thread.slice(thread.length - r.messages.length).map((m) => m.seq),
          );
          expectPairsKept(thread, r.messages);
          if (budget === 0) {
            expect(r.messages.length).toBe(
              Math.min(thread.length, Math.max(window, r.messages.length)),
            );
            return;
          }
          expectWithinBudgetOrWidened(r.messages, budget, r.messages.length === thread.length);
          // Maximal: one more message (within the window) would not fit.
          const start = thread.length - r.messages.length;
          const prev = thread[start - 1];
          if (prev !== undefined && r.messages.length < window && !r.overBudget) {
            expect(sum(r.messages) + (prev.tokens ?? 0)).toBeGreaterThan(budget);
          }
        },
      ),
    );
  });

  it("a buffer ceiling never exceeds the budget and never starts on a cut-off tool result", () => {
    fc.assert(
      fc.property(threadArb, fc.integer({ min: 1, max: 80 }), (thread, maxTokens) => {
        const strategy: Strategy = {
          kind: "buffer",
          maxMessages: 0,
          excludeSystem: false,
          maxStored: 1000,
        };
        const r = recall(strategy, noSummary, thread, { maxTokens });
        if (sum(thread) <= maxTokens) {
          expect(r.messages.length).toBe(thread.length);
        } else {
          expect(r.tokens).toBeLessThanOrEqual(maxTokens);
          expect(r.overBudget).toBe(false);
          expect(r.messages[0]?.role ?? "user").not.toBe("tool");
        }
        expectPairsKept(thread, r.messages);
      }),
    );
  });

  it("a summary thread folded until nothing is due fits its budget and loses nothing", () => {
    fc.assert(
      fc.property(
        threadArb,
        fc.record({
          window: fc.nat({ max: 8 }),
          summarizeEvery: fc.integer({ min: 1, max: 6 }),
          maxTokens: fc.integer({ min: 1, max: 120 }),
          excludeSystem: fc.boolean(),
          summaryWords: fc.array(fc.nat({ max: 12 }), { minLength: 1, maxLength: 12 }),
          placement: fc.constantFrom("system" as const, "user" as const, "none" as const),
        }),
        (thread, o) => {
          const strategy: Strategy = {
            kind: "summary",
            model: "fake",
            maxStored: 1000,
            window: o.window,
            summarizeEvery: o.summarizeEvery,
            excludeSystem: o.excludeSystem,
            maxTokens: o.maxTokens,
            summaryPlacement: o.placement,
          };
          let state = { summary: "", summarizedThroughSeq: 0, summaryTime: 0 };
          // Each fold writes a summary of a generated length ("w w w …").
          for (let fold = 0; ; fold++) {
            const plan = planFold(strategy, thread, state.summarizedThroughSeq, o.window, {
              summary: state.summary,
            });
            if (plan === undefined) break;
            expect(plan.throughSeq).toBeGreaterThan(state.summarizedThroughSeq);
            const words = o.summaryWords[fold % o.summaryWords.length] ?? 0;
            state = {
              summary: `s${" w".repeat(words)}`,
              summarizedThroughSeq: plan.throughSeq,
              summaryTime: fold + 1,
            };
          }
          const r = recall(strategy, state, thread, {});
          const visible = visibleMessages(strategy, thread);
          // Every visible message is in the summary or in the list.
          const listed = new Set(r.messages.map((m) => m.seq));
          for (const m of visible) {
            expect(m.seq <= state.summarizedThroughSeq || listed.has(m.seq)).toBe(true);
          }
          const verbatim = r.messages.filter((m) => m.seq !== 0);
          expectPairsKept(visible, verbatim);
          const head = summaryTokens(state.summary, "o200k_base");
          expect(r.tokens).toBe(head + sum(verbatim));
          expect(r.overBudget).toBe(r.tokens > o.maxTokens);
          if (head > o.maxTokens) return; // the summary alone is over: nothing else is listed but a kept call
          const unfolded = visible.filter((m) => m.seq > state.summarizedThroughSeq);
          expectWithinBudgetOrWidened(
            verbatim,
            o.maxTokens - head,
            verbatim[0] !== undefined && verbatim[0] === unfolded[0],
          );
          // Placement: the summary message first (system or user), or only in summary.
          if (state.summary !== "") {
            expect(r.summary).toBe(state.summary);
            const first = r.messages[0];
            if (o.placement === "none") expect(first?.seq ?? 1).not.toBe(0);
            else expect(first).toMatchObject({ seq: 0, role: o.placement });
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
