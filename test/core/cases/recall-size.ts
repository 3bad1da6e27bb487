import type { Strategy } from "../../../src/core/types.js";
import { buffer, summary, window20 } from "../../store/fixtures.js";

/**
 * core/recall.ts recallSize: how many messages a Get recalls, which bounds
 * what a store's windowed read must return. Run against the core
 * (test/core/decision-cases.test.ts) and against the Redis store's Lua
 * (src/store/redis/lua/read.ts, test/store/redis-lua-decisions.test.ts).
 */
export interface RecallSizeCase {
  name: string;
  strategy: Strategy;
  limit: number | undefined;
  expected: number;
}

export const RECALL_SIZE_CASES: readonly RecallSizeCase[] = [
  {
    name: "a buffer's max_messages",
    strategy: { kind: "buffer", maxMessages: 7, excludeSystem: false, maxStored: 1000 },
    limit: undefined,
    expected: 7,
  },
  { name: "a buffer of everything", strategy: buffer, limit: undefined, expected: 0 },
  { name: "a window's size", strategy: window20, limit: undefined, expected: 20 },
  { name: "a summary's window", strategy: summary, limit: undefined, expected: 2 },
  { name: "the Get's limit over the strategy's", strategy: window20, limit: 5, expected: 5 },
  { name: "a limit of 0", strategy: summary, limit: 0, expected: 0 },
];
