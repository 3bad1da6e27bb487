/** Strategy resolution (defaults, validation) and identity (README: Semantics, Errors). */
import { describe, expect, it } from "vitest";
import { isMemoryError, type MemoryError } from "../../src/core/errors.js";
import {
  DEFAULT_MAX_STORED,
  type ResolveOptions,
  resolveStrategy,
  type StrategyDraft,
  sameStrategy,
  strategyKey,
} from "../../src/core/strategy.js";
import type { Strategy } from "../../src/core/types.js";

const SERVER_DEFAULT: Strategy = { kind: "window", window: 7, excludeSystem: false, maxStored: 50 };

const opts: ResolveOptions = {
  defaultStrategy: SERVER_DEFAULT,
  defaultModel: "extractive",
  hasModel: (name) => name === "extractive" || name === "openai",
  maxStoredLimit: 10_000,
  field: "strategy",
};

function draft(init: Partial<StrategyDraft>): StrategyDraft {
  return { kind: undefined, excludeSystem: false, maxStored: undefined, ...init };
}

/** The MemoryError `fn` throws; fails the test when it throws nothing or something else. */
function thrown(fn: () => unknown): MemoryError {
  try {
    fn();
  } catch (err) {
    if (isMemoryError(err)) return err;
    throw err;
  }
  throw new Error("expected a MemoryError");
}

describe("resolveStrategy", () => {
  it("fills in the documented defaults", () => {
    expect(resolveStrategy(draft({ kind: "buffer" }), opts)).toEqual({
      kind: "buffer",
      maxMessages: 0,
      excludeSystem: false,
      maxStored: DEFAULT_MAX_STORED,
    });
    expect(resolveStrategy(draft({ kind: "window" }), opts)).toEqual({
      kind: "window",
      window: 20,
      excludeSystem: false,
      maxStored: 1000,
    });
    expect(resolveStrategy(draft({ kind: "summary" }), opts)).toEqual({
      kind: "summary",
      window: 10,
      summarizeEvery: 6,
      model: "extractive",
      excludeSystem: false,
      maxStored: 1000,
    });
  });

  it("keeps the values given", () => {
    const s = resolveStrategy(
      draft({
        kind: "summary",
        window: 3,
        summarizeEvery: 4,
        model: "openai",
        excludeSystem: true,
        maxStored: 99,
      }),
      opts,
    );
    expect(s).toEqual({
      kind: "summary",
      window: 3,
      summarizeEvery: 4,
      model: "openai",
      excludeSystem: true,
      maxStored: 99,
    });
    expect(resolveStrategy(draft({ kind: "buffer", maxMessages: 5 }), opts)).toMatchObject({
      maxMessages: 5,
    });
  });

  it("takes the server's default for an unset kind, with the draft's options", () => {
    expect(resolveStrategy(draft({}), opts)).toEqual(SERVER_DEFAULT);
    expect(resolveStrategy(draft({ excludeSystem: true, maxStored: 5 }), opts)).toEqual({
      ...SERVER_DEFAULT,
      excludeSystem: true,
      maxStored: 5,
    });
  });

  it("rejects window 0, naming the field", () => {
    const err = thrown(() => resolveStrategy(draft({ kind: "window", window: 0 }), opts));
    expect(err.code).toBe("invalid_argument");
    expect(err.field).toBe("strategy.window.window");
    expect(err.message).toMatch(/^strategy\.window\.window: /);
  });

  it("takes summarize_every 0 as 1, as the seed's max(1, n)", () => {
    const s = resolveStrategy(draft({ kind: "summary", summarizeEvery: 0 }), opts);
    expect(s).toMatchObject({ kind: "summary", summarizeEvery: 1 });
  });

  it("rejects a summariser that is not configured, naming the field", () => {
    const err = thrown(() => resolveStrategy(draft({ kind: "summary", model: "gpt-9" }), opts));
    expect(err.code).toBe("invalid_argument");
    expect(err.field).toBe("strategy.summary.model");
    expect(err.message).toContain("gpt-9");
  });

  it("rejects max_stored 0 and one over the server's limit", () => {
    for (const kind of ["buffer", "window", "summary", undefined] as const) {
      const zero = thrown(() => resolveStrategy(draft({ kind, maxStored: 0 }), opts));
      expect(zero.code).toBe("invalid_argument");
      expect(zero.field).toBe("strategy.max_stored");
    }
    const over = thrown(() => resolveStrategy(draft({ kind: "buffer", maxStored: 10_001 }), opts));
    expect(over.field).toBe("strategy.max_stored");
    expect(resolveStrategy(draft({ kind: "buffer", maxStored: 10_000 }), opts).maxStored).toBe(
      10_000,
    );
  });

  it("names fields under the caller's prefix", () => {
    const err = thrown(() =>
      resolveStrategy(draft({ kind: "window", window: 0 }), { ...opts, field: "default_strategy" }),
    );
    expect(err.field).toBe("default_strategy.window.window");
  });
});

describe("strategyKey and sameStrategy", () => {
  const summary: Strategy = {
    kind: "summary",
    window: 10,
    summarizeEvery: 6,
    model: "extractive",
    excludeSystem: false,
    maxStored: 1000,
  };

  it("gives equal strategies equal keys", () => {
    expect(strategyKey({ ...summary })).toBe(strategyKey(summary));
    expect(sameStrategy({ ...summary }, summary)).toBe(true);
  });

  it("tells apart strategies that differ in any field", () => {
    const variants: Strategy[] = [
      { ...summary, window: 11 },
      { ...summary, summarizeEvery: 5 },
      { ...summary, model: "openai" },
      { ...summary, excludeSystem: true },
      { ...summary, maxStored: 999 },
      { kind: "window", window: 10, excludeSystem: false, maxStored: 1000 },
      { kind: "buffer", maxMessages: 10, excludeSystem: false, maxStored: 1000 },
    ];
    const keys = new Set([summary, ...variants].map(strategyKey));
    expect(keys.size).toBe(variants.length + 1);
    for (const v of variants) expect(sameStrategy(v, summary)).toBe(false);
  });

  it("names the kind and its sizes, for error messages", () => {
    expect(strategyKey({ kind: "window", window: 4, excludeSystem: true, maxStored: 9 })).toBe(
      "window(window=4,exclude_system=true,max_stored=9)",
    );
  });
});

describe("tool-output clearing in a strategy", () => {
  it("is kept when given, named in errors, and part of the strategy's identity", () => {
    const s = resolveStrategy(
      draft({ kind: "window", clearToolResults: { keepToolTurns: 2 } }),
      opts,
    );
    expect(s.clearToolResults).toEqual({ keepToolTurns: 2 });
    const plain = resolveStrategy(draft({ kind: "window" }), opts);
    expect("clearToolResults" in plain).toBe(false);
    expect(sameStrategy(s, plain)).toBe(false);
    expect(strategyKey(plain)).not.toContain("clear_tool_results");
    const unset = thrown(() =>
      resolveStrategy(draft({ kind: "buffer", clearToolResults: {} }), opts),
    );
    expect(unset.field).toBe("strategy.clear_tool_results");
    const turns = thrown(() =>
      resolveStrategy(
        draft({ kind: "window", clearToolResults: { keepToolTurns: 100_001 } }),
        opts,
      ),
    );
    expect(turns.field).toBe("strategy.clear_tool_results.keep_tool_turns");
    const tokens = thrown(() =>
      resolveStrategy(
        draft({ kind: "summary", clearToolResults: { keepToolTokens: 10_000_001 } }),
        opts,
      ),
    );
    expect(tokens.field).toBe("strategy.clear_tool_results.keep_tool_tokens");
    // A stored strategy from before clearing existed reads back with the same key.
    expect(strategyKey(JSON.parse(JSON.stringify(plain)) as Strategy)).toBe(strategyKey(plain));
  });
});
