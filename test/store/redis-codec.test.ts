import { describe, expect, it } from "vitest";
import { strategyKey } from "../../src/core/strategy.js";
import type { Strategy } from "../../src/core/types.js";
import { newThreadIncarnation, strategyArgs } from "../../src/store/redis/codec.js";
import { buffer, summary, window20 } from "./fixtures.js";

/** The Redis store's script arguments that are kept or made cheaply (codec.ts). */
describe("Redis codec", () => {
  it("gives each strategy object its own arguments, the same on every call", () => {
    for (const s of [window20, buffer, summary, { ...window20, window: 7 }] as Strategy[]) {
      const expected = [
        JSON.stringify(s),
        strategyKey(s),
        s.kind,
        String(s.maxStored),
        s.excludeSystem ? "1" : "0",
      ];
      expect(strategyArgs(s)).toEqual(expected);
      expect(strategyArgs(s)).toEqual(expected);
    }
    // An equal strategy in another object has equal arguments.
    expect(strategyArgs({ ...summary })).toEqual(strategyArgs(summary));
    expect(strategyArgs(undefined)).toEqual(["", "", "", "", ""]);
  });

  it("makes a new thread incarnation unique every time", () => {
    const made = new Set<string>();
    for (let i = 0; i < 100_000; i++) made.add(newThreadIncarnation());
    expect(made.size).toBe(100_000);
    // A random part per process: two processes never share one.
    expect(newThreadIncarnation()).toMatch(/^[0-9a-f-]{36}\.[0-9a-z]+$/);
  });
});
