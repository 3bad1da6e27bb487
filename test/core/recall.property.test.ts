/**
 * Properties of recall and fold planning over generated threads: users,
 * systems, assistants with 0-3 tool calls each followed by their results, and
 * orphaned tool results; seqs strictly increasing with gaps, and a front that
 * may be trimmed mid-exchange (max_stored), as stored threads really look.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { trimCount } from "../../src/core/append.js";
import {
  planFold,
  recall,
  recallSize,
  SUMMARY_PREFIX,
  visibleMessages,
} from "../../src/core/recall.js";
import type { ChatMessage, StoredMessage, Strategy } from "../../src/core/types.js";

type SummaryStrategy = Extract<Strategy, { kind: "summary" }>;

/** One step of a conversation; an assistant's tool results always follow it in the same Add. */
type Unit =
  | { kind: "user" }
  | { kind: "system" }
  | { kind: "assistant"; calls: number }
  | { kind: "orphan" };

const unitArb: fc.Arbitrary<Unit> = fc.oneof(
  { arbitrary: fc.constant<Unit>({ kind: "user" }), weight: 3 },
  { arbitrary: fc.constant<Unit>({ kind: "system" }), weight: 1 },
  {
    arbitrary: fc.integer({ min: 0, max: 3 }).map((calls): Unit => ({ kind: "assistant", calls })),
    weight: 4,
  },
  { arbitrary: fc.constant<Unit>({ kind: "orphan" }), weight: 1 },
);

/** Hands out names unique within one thread, so a tool result finds its call. */
class Names {
  private n = 0;
  next(prefix: string): string {
    this.n += 1;
    return `${prefix}${this.n}`;
  }
}

function materialize(units: readonly Unit[], names: Names): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (const unit of units) {
    switch (unit.kind) {
      case "user":
      case "system":
        out.push({ role: unit.kind, content: names.next(unit.kind) });
        break;
      case "orphan":
        out.push({ role: "tool", content: names.next("orphan"), toolCallId: names.next("gone") });
        break;
      case "assistant": {
        const ids = Array.from({ length: unit.calls }, () => names.next("call"));
        const content = names.next("assistant");
        if (ids.length === 0) {
          out.push({ role: "assistant", content });
          break;
        }
        const toolCalls = ids.map((id) => ({ id, name: "f", arguments: "{}" }));
        out.push({ role: "assistant", content, toolCalls });
        for (const id of ids) out.push({ role: "tool", content: `result ${id}`, toolCallId: id });
      }
    }
  }
  return out;
}

/** A stored thread: seqs with gaps, its oldest messages possibly trimmed mid-exchange. */
const threadArb: fc.Arbitrary<StoredMessage[]> = fc
  .array(unitArb, { maxLength: 20 })
  .map((units) => materialize(units, new Names()))
  .chain((msgs) =>
    fc
      .record({
        gaps: fc.array(fc.integer({ min: 1, max: 3 }), {
          minLength: msgs.length,
          maxLength: msgs.length,
        }),
        firstSeq: fc.integer({ min: 1, max: 40 }),
        trimmed: fc.nat({ max: msgs.length }),
      })
      .map(({ gaps, firstSeq, trimmed }) => {
        let seq = firstSeq;
        const stored = msgs.map((m, i) => {
          seq += i === 0 ? 0 : (gaps[i] ?? 1);
          return { ...m, seq, createTime: seq };
        });
        return stored.slice(trimmed);
      }),
  );

const limitArb = fc.option(fc.nat({ max: 10 }), { nil: undefined, freq: 3 });

const strategyArb: fc.Arbitrary<Strategy> = fc.oneof(
  fc
    .record({ maxMessages: fc.nat({ max: 8 }), excludeSystem: fc.boolean() })
    .map((r): Strategy => ({ kind: "buffer", maxStored: 1000, ...r })),
  fc
    .record({ window: fc.integer({ min: 1, max: 8 }), excludeSystem: fc.boolean() })
    .map((r): Strategy => ({ kind: "window", maxStored: 1000, ...r })),
  fc
    .record({
      window: fc.nat({ max: 8 }),
      summarizeEvery: fc.integer({ min: 1, max: 5 }),
      excludeSystem: fc.boolean(),
    })
    .map((r): Strategy => ({ kind: "summary", model: "fake", maxStored: 1000, ...r })),
);

const seqsOf = (ms: readonly StoredMessage[]): number[] => ms.map((m) => m.seq);

function expectIncreasing(ms: readonly StoredMessage[]): void {
  for (let i = 1; i < ms.length; i++) {
    expect(ms[i]?.seq).toBeGreaterThan(ms[i - 1]?.seq ?? Number.POSITIVE_INFINITY);
  }
}

/**
 * No tool result in `result` is cut from the assistant that called it, when
 * that assistant is still stored at all.
 */
function expectPairsKept(all: readonly StoredMessage[], result: readonly StoredMessage[]): void {
  const inResult = new Set(result.map((m) => m.seq));
  for (const m of result) {
    if (m.role !== "tool") continue;
    const caller = all.find((a) => a.toolCalls?.some((c) => c.id === m.toolCallId));
    if (caller !== undefined) expect(inResult.has(caller.seq)).toBe(true);
  }
}

/**
 * `result` is the seed's window of `msgs`: a suffix, all of it when it fits,
 * else the newest `size` widened backwards over tool results only, and only
 * as far as needed (to index 0 at most).
 */
function expectWindowOf(
  msgs: readonly StoredMessage[],
  size: number,
  result: readonly StoredMessage[],
): void {
  const start = msgs.length - result.length;
  expect(start).toBeGreaterThanOrEqual(0);
  expect(seqsOf(result)).toEqual(seqsOf(msgs.slice(start)));
  if (size <= 0 || msgs.length <= size) {
    expect(start).toBe(0);
  } else {
    const cut = msgs.length - size;
    expect(start).toBeLessThanOrEqual(cut);
    for (let i = start + 1; i <= cut; i++) expect(msgs[i]?.role).toBe("tool");
    if (start > 0) expect(msgs[start]?.role).not.toBe("tool");
  }
  // Never starts on an orphaned tool result, unless the thread itself does.
  if (result[0]?.role === "tool") expect(start).toBe(0);
  expectPairsKept(msgs, result);
}

describe("window and buffer", () => {
  it("a window is a suffix that never starts on a tool result unless the thread does", () => {
    fc.assert(
      fc.property(
        threadArb,
        fc.integer({ min: 1, max: 8 }),
        limitArb,
        fc.boolean(),
        (thread, window, limit, excludeSystem) => {
          const strategy: Strategy = { kind: "window", window, excludeSystem, maxStored: 1000 };
          const msgs = visibleMessages(strategy, thread);
          const r = recall(
            strategy,
            { summary: "", summarizedThroughSeq: 0, summaryTime: 0 },
            thread,
            {
              limit,
            },
          );
          expect(r.summary).toBe("");
          expectWindowOf(msgs, limit ?? window, r.messages);
        },
      ),
    );
  });

  it("a buffer is a ceiling: the newest n minus leading tool results, never more", () => {
    fc.assert(
      fc.property(
        threadArb,
        fc.nat({ max: 8 }),
        limitArb,
        fc.boolean(),
        (thread, maxMessages, limit, excludeSystem) => {
          const strategy: Strategy = {
            kind: "buffer",
            maxMessages,
            excludeSystem,
            maxStored: 1000,
          };
          const msgs = visibleMessages(strategy, thread);
          const size = limit ?? maxMessages;
          const r = recall(
            strategy,
            { summary: "", summarizedThroughSeq: 0, summaryTime: 0 },
            thread,
            {
              limit,
            },
          ).messages;
          const start = msgs.length - r.length;
          expect(seqsOf(r)).toEqual(seqsOf(msgs.slice(start)));
          if (size <= 0 || msgs.length <= size) {
            expect(r).toHaveLength(msgs.length);
          } else {
            const newest = msgs.slice(msgs.length - size);
            const leadingTools = newest.findIndex((m) => m.role !== "tool");
            expect(r).toHaveLength(leadingTools < 0 ? 0 : size - leadingTools);
            expect(r[0]?.role).not.toBe("tool");
          }
          expectPairsKept(msgs, r);
        },
      ),
    );
  });
});

describe("every recall", () => {
  it("lists seqs strictly increasing, a summary (seq 0) first", () => {
    fc.assert(
      fc.property(
        threadArb,
        strategyArb,
        limitArb,
        fc.boolean(),
        fc.constantFrom("", "S"),
        fc.nat({ max: 80 }),
        (thread, strategy, limit, degraded, summary, summarizedThroughSeq) => {
          const state = { summary, summarizedThroughSeq, summaryTime: 1 };
          const r = recall(strategy, state, thread, { limit, degraded });
          expectIncreasing(r.messages);
          const head = r.messages[0];
          if (strategy.kind === "summary" && summary !== "") {
            expect(head).toMatchObject({ role: "system", seq: 0, content: `${SUMMARY_PREFIX}S` });
          } else {
            expect(r.messages.every((m) => m.seq > 0)).toBe(true);
          }
        },
      ),
    );
  });
});

describe("planFold", () => {
  it("folds a prefix of the unfolded messages, keeps the newest size, never splits a call", () => {
    fc.assert(
      fc.property(
        threadArb,
        strategyArb.filter((s): s is SummaryStrategy => s.kind === "summary"),
        fc.nat({ max: 8 }),
        fc.nat({ max: 80 }),
        (thread, strategy, size, through) => {
          const unfolded = visibleMessages(strategy, thread).filter((m) => m.seq > through);
          const overflow = size > 0 ? Math.max(0, unfolded.length - size) : unfolded.length;
          const plan = planFold(strategy, thread, through, size);
          if (overflow < strategy.summarizeEvery) {
            expect(plan).toBeUndefined();
            return;
          }
          if (plan === undefined) {
            // Due, but every message after the first, up to the boundary, is a tool result.
            expect(unfolded.slice(1, overflow + 1).every((m) => m.role === "tool")).toBe(true);
            return;
          }
          const n = plan.messages.length;
          expect(n).toBeGreaterThan(0);
          expect(n).toBeLessThanOrEqual(overflow);
          expect(seqsOf(plan.messages)).toEqual(seqsOf(unfolded.slice(0, n)));
          expect(plan.throughSeq).toBe(plan.messages[n - 1]?.seq);
          expect(unfolded[n]?.role).not.toBe("tool");
          // The boundary moved back over tool results only.
          for (let i = n + 1; i <= overflow; i++) expect(unfolded[i]?.role).toBe("tool");
        },
      ),
    );
  });
});

interface Step {
  batch: Unit[];
  /** False models a fold that failed or has not run yet. */
  foldRuns: boolean;
  /** The limit of the Get that runs this step's fold and recall. */
  limit: number | undefined;
}

const stepArb: fc.Arbitrary<Step> = fc.record({
  batch: fc.array(unitArb, { minLength: 1, maxLength: 4 }),
  foldRuns: fc.integer({ min: 0, max: 3 }).map((n) => n > 0),
  limit: fc.option(fc.nat({ max: 6 }), { nil: undefined, freq: 3 }),
});

const summaryStrategyArb: fc.Arbitrary<SummaryStrategy> = fc
  .record({
    window: fc.nat({ max: 6 }),
    summarizeEvery: fc.integer({ min: 1, max: 5 }),
    excludeSystem: fc.boolean(),
    maxStored: fc.integer({ min: 1, max: 12 }),
  })
  .map((r): SummaryStrategy => ({ kind: "summary", model: "fake", ...r }));

describe("a summary thread over time", () => {
  it("holds every message in exactly one of summary and list, folded once, calls unsplit", () => {
    fc.assert(
      fc.property(
        summaryStrategyArb,
        fc.array(stepArb, { minLength: 1, maxLength: 15 }),
        (strategy, steps) => {
          const names = new Names();
          let stored: StoredMessage[] = [];
          const added: StoredMessage[] = [];
          const callers = new Map<string, StoredMessage>();
          /** seq -> the fold that took it in. */
          const foldOf = new Map<number, number>();
          const state = { summary: "", summarizedThroughSeq: 0, summaryTime: 0 };
          let nextSeq = 1;
          let folds = 0;
          // The store trims on every append and every commit, only folded messages.
          const trim = (): void => {
            const n = trimCount(strategy, stored, state.summarizedThroughSeq);
            stored = stored.slice(n);
          };

          for (const step of steps) {
            for (const m of materialize(step.batch, names)) {
              const s: StoredMessage = { ...m, seq: nextSeq, createTime: nextSeq };
              nextSeq += 1;
              stored.push(s);
              added.push(s);
              for (const c of s.toolCalls ?? []) callers.set(c.id, s);
            }
            trim();

            const size = recallSize(strategy, step.limit);
            if (step.foldRuns) {
              const plan = planFold(strategy, stored, state.summarizedThroughSeq, size);
              if (plan !== undefined) {
                folds += 1;
                for (const m of plan.messages) {
                  expect(foldOf.has(m.seq)).toBe(false);
                  expect(m.seq).toBeGreaterThan(state.summarizedThroughSeq);
                  foldOf.set(m.seq, folds);
                }
                // The fake summariser lists what it was given.
                state.summary += `[${seqsOf(plan.messages).join(",")}]`;
                state.summarizedThroughSeq = plan.throughSeq;
                state.summaryTime = nextSeq;
                trim();
              }
            }

            const through = state.summarizedThroughSeq;
            const visible = added.filter((m) => !(strategy.excludeSystem && m.role === "system"));
            const r = recall(strategy, state, stored, { limit: step.limit });
            const hasHead = state.summary !== "";
            if (hasHead) {
              expect(r.messages[0]).toMatchObject({
                role: "system",
                seq: 0,
                content: SUMMARY_PREFIX + state.summary,
              });
            }
            const listed = r.messages.slice(hasHead ? 1 : 0);
            const listedSeqs = new Set(seqsOf(listed));
            expectIncreasing(r.messages);

            // Each visible message: in the summary (once) or in the list, never both or neither.
            let unfolded = 0;
            for (const m of visible) {
              if (m.seq <= through) {
                expect(foldOf.has(m.seq)).toBe(true);
                expect(listedSeqs.has(m.seq)).toBe(false);
              } else {
                unfolded += 1;
                expect(foldOf.has(m.seq)).toBe(false);
                expect(listedSeqs.has(m.seq)).toBe(true);
              }
            }
            expect(listed).toHaveLength(unfolded);
            expect(foldOf.size).toBe(visible.length - unfolded);
            const summarized = [...state.summary.matchAll(/\d+/g)].map((x) => Number(x[0]));
            expect(summarized).toEqual([...foldOf.keys()]);

            // A call and its results are folded together or not at all.
            for (const m of added) {
              const caller = m.role === "tool" ? callers.get(m.toolCallId ?? "") : undefined;
              if (caller !== undefined) expect(m.seq <= through).toBe(caller.seq <= through);
            }

            // Over max_stored only when what is left is unfolded.
            if (stored.length > strategy.maxStored) {
              expect(stored[0]?.seq ?? 0).toBeGreaterThan(through);
            }

            // Degraded: the last good summary and a plain window of the unfolded.
            const d = recall(strategy, state, stored, { limit: step.limit, degraded: true });
            expect(d.summary).toBe(state.summary);
            if (hasHead) expect(d.messages[0]).toEqual(r.messages[0]);
            expectIncreasing(d.messages);
            expectWindowOf(listed, size, d.messages.slice(hasHead ? 1 : 0));
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

/**
 * The seed's SummaryMemory, transcribed from its source (position-indexed,
 * folding inline in aget), as an oracle. Only for threads without tool
 * results and without trimming, where positions and seqs agree.
 */
class SeedSummaryMemory {
  private messages: ChatMessage[] = [];
  private summarized = 0;
  private summary = "";
  private readonly summarizeEvery: number;

  constructor(
    private readonly window: number,
    summarizeEvery: number,
    private readonly returnSystem: boolean,
  ) {
    this.summarizeEvery = Math.max(1, summarizeEvery);
  }

  add(items: readonly ChatMessage[]): void {
    this.messages.push(...items);
  }

  /** aget with a model that replies `reply`; also returns what was folded. */
  get(reply: string): { recalled: ChatMessage[]; folded: ChatMessage[] } {
    let messages = [...this.messages];
    const already = this.summarized;
    if (!this.returnSystem) messages = messages.filter((m) => m.role !== "system");
    const size = this.window;
    const overflow = messages.slice(already, Math.max(already, messages.length - size));
    let folded: ChatMessage[] = [];
    if (overflow.length >= this.summarizeEvery) {
      this.summary = reply;
      this.summarized = already + overflow.length;
      folded = overflow;
    }
    let recent = size > 0 ? messages.slice(-size) : [];
    while (recent.length > 1 && recent[0]?.role === "tool") recent = recent.slice(1);
    const head: ChatMessage[] = this.summary
      ? [{ role: "system", content: `${SUMMARY_PREFIX}${this.summary}` }]
      : [];
    return { recalled: [...head, ...recent], folded };
  }
}

const noToolUnitArb: fc.Arbitrary<Unit> = fc.constantFrom<Unit>(
  { kind: "user" },
  { kind: "system" },
  { kind: "assistant", calls: 0 },
);

describe("against the seed's SummaryMemory", () => {
  it("folds the same messages, and returns the seed's list plus only what the seed loses", () => {
    fc.assert(
      fc.property(
        fc.nat({ max: 6 }),
        fc.integer({ min: 1, max: 5 }),
        fc.boolean(),
        fc.array(fc.array(noToolUnitArb, { maxLength: 5 }), { minLength: 1, maxLength: 12 }),
        (window, summarizeEvery, excludeSystem, batches) => {
          const strategy: SummaryStrategy = {
            kind: "summary",
            window,
            summarizeEvery,
            model: "fake",
            excludeSystem,
            maxStored: 1000,
          };
          const seed = new SeedSummaryMemory(window, summarizeEvery, !excludeSystem);
          const names = new Names();
          const stored: StoredMessage[] = [];
          const state = { summary: "", summarizedThroughSeq: 0, summaryTime: 0 };

          batches.forEach((units, i) => {
            const batch = materialize(units, names);
            seed.add(batch);
            for (const m of batch) stored.push({ ...m, seq: stored.length + 1, createTime: 0 });

            const reply = `fold after batch ${i}`;
            const fromSeed = seed.get(reply);
            const plan = planFold(strategy, stored, state.summarizedThroughSeq, window);
            expect((plan?.messages ?? []).map((m) => m.content)).toEqual(
              fromSeed.folded.map((m) => m.content),
            );
            if (plan !== undefined) {
              state.summary = reply;
              state.summarizedThroughSeq = plan.throughSeq;
            }

            const ours = recall(strategy, state, stored, {}).messages.map((m) => m.content);
            const theirs = fromSeed.recalled.map((m) => m.content);
            const head = state.summary === "" ? 0 : 1;
            expect(ours.slice(0, head)).toEqual(theirs.slice(0, head));
            // The seed's recent messages are a suffix of ours; the rest is the
            // overflow it drops before folding it, always fewer than summarize_every.
            const oursRecent = ours.slice(head);
            const theirsRecent = theirs.slice(head);
            const lost = oursRecent.length - theirsRecent.length;
            expect(lost).toBeGreaterThanOrEqual(0);
            expect(lost).toBeLessThan(summarizeEvery);
            expect(oursRecent.slice(lost)).toEqual(theirsRecent);
          });
        },
      ),
    );
  });
});
