import { describe, expect, it } from "vitest";
import { strategyKey } from "../../src/core/strategy.js";
import type { Strategy } from "../../src/core/types.js";
import {
  decodeResult,
  decodeThread,
  decodeThreadValues,
  LINEAGE_INDEX,
  newThreadIncarnation,
  strategyArgs,
  THREAD_FIELDS,
} from "../../src/store/redis/codec.js";
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

  it("decodes a thread the same from HGETALL's pairs and from an HMGET of THREAD_FIELDS", () => {
    const base: Record<string, string> = {
      thread_id: "t",
      incarnation: "inc.1",
      strategy: JSON.stringify(summary),
      strategy_key: strategyKey(summary),
      kind: "summary",
      last_seq: "42",
      summarized_through_seq: "30",
      summary: "so far",
      summary_time: "1700",
      create_time: "1000",
      update_time: "1900",
      counted: "1",
      bytes: "1234",
    };
    const parent = { threadId: "p", atSeq: 7, forkTime: 1500, parentCreateTime: 900 };
    const hashes: Record<string, string>[] = [
      base,
      { ...base, labels: JSON.stringify({ team: "a", "b/c": "d" }) },
      { ...base, ttl_ms: "60000", expire_at: "61900" },
      { ...base, parent: JSON.stringify(parent), lineage: "[]" },
      {
        ...base,
        labels: '{"x":"y"}',
        ttl_ms: "5",
        expire_at: "1905",
        parent: JSON.stringify(parent),
      },
    ];
    for (const hash of hashes) {
      const flat = Object.entries(hash).flat();
      const values = THREAD_FIELDS.map((name) => hash[name] ?? null);
      const state = decodeThread(flat);
      expect(decodeThreadValues(values)).toEqual(state);
      expect(state.lastSeq).toBe(42);
      expect(state.labels !== undefined).toBe(hash.labels !== undefined);
      expect(state.expireTime !== undefined).toBe(hash.expire_at !== undefined);
      expect(state.parent).toEqual(hash.parent === undefined ? undefined : parent);
      expect(values[LINEAGE_INDEX] !== null).toBe(hash.lineage !== undefined);
    }
    // A record without a field a thread must have is refused, by either path.
    const { summary: _dropped, ...damaged } = base;
    expect(() => decodeThread(Object.entries(damaged).flat())).toThrow(/no field summary/);
    expect(() => decodeThreadValues(THREAD_FIELDS.map((name) => damaged[name] ?? null))).toThrow(
      /no field summary/,
    );
  });

  it("reads an append result with the thread as pairs (recorded) or as values after '='", () => {
    const hash: Record<string, string> = {
      thread_id: "t",
      incarnation: "inc.2",
      strategy: JSON.stringify(window20),
      last_seq: "5",
      summarized_through_seq: "0",
      summary: "",
      summary_time: "0",
      create_time: "1000",
      update_time: "1005",
      labels: '{"k":"v"}',
    };
    const pairs = `4\n5\n${JSON.stringify(Object.entries(hash).flat())}`;
    // What lua/append.ts's cjson.encode of the HMGET gives: false for Lua's nil.
    const values = `4\n5\n=${JSON.stringify(THREAD_FIELDS.map((name) => hash[name] ?? false))}`;
    const fromPairs = decodeResult(pairs, true);
    expect(decodeResult(values, false)).toEqual({ ...fromPairs, replayed: false });
    expect(fromPairs).toMatchObject({ firstSeq: 4, lastSeq: 5, replayed: true });
    expect(fromPairs.thread).toMatchObject({ lastSeq: 5, labels: { k: "v" }, updateTime: 1005 });
    expect(fromPairs.thread.expireTime).toBeUndefined();
  });
});
