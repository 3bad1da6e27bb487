import type { Role } from "../../../src/core/types.js";

/**
 * core/append.ts trimCount: how many of a thread's oldest stored messages
 * an Add or a fold's commit drops. Run against the core
 * (test/core/decision-cases.test.ts) and against the Redis store's Lua
 * (src/store/redis/lua/trim.ts, test/store/redis-lua-decisions.test.ts).
 */
export interface TrimCountCase {
  name: string;
  kind: "buffer" | "window" | "summary";
  maxStored: number;
  summarizedThroughSeq: number;
  /** Oldest first. */
  roles: Role[];
  /** The first message's seq (seqs are consecutive). */
  firstSeq: number;
  expected: number;
}

const users = (n: number): Role[] => Array.from({ length: n }, () => "user");

export const TRIM_COUNT_CASES: readonly TrimCountCase[] = [
  {
    name: "within max_stored",
    kind: "window",
    maxStored: 5,
    summarizedThroughSeq: 0,
    roles: users(5),
    firstSeq: 1,
    expected: 0,
  },
  {
    name: "an empty thread",
    kind: "buffer",
    maxStored: 0,
    summarizedThroughSeq: 0,
    roles: [],
    firstSeq: 1,
    expected: 0,
  },
  {
    name: "the excess, oldest first",
    kind: "window",
    maxStored: 3,
    summarizedThroughSeq: 0,
    roles: users(5),
    firstSeq: 1,
    expected: 2,
  },
  {
    name: "max_stored 0 drops everything",
    kind: "buffer",
    maxStored: 0,
    summarizedThroughSeq: 0,
    roles: users(4),
    firstSeq: 7,
    expected: 4,
  },
  {
    name: "tool results left at the front go too",
    kind: "window",
    maxStored: 4,
    summarizedThroughSeq: 0,
    roles: ["user", "assistant", "tool", "tool", "user", "assistant"],
    firstSeq: 1,
    expected: 4,
  },
  {
    name: "tool results to the end: all of them",
    kind: "buffer",
    maxStored: 2,
    summarizedThroughSeq: 0,
    roles: ["assistant", "tool", "tool"],
    firstSeq: 1,
    expected: 3,
  },
  {
    name: "a tool result inside the excess stays dropped with it",
    kind: "window",
    maxStored: 2,
    summarizedThroughSeq: 0,
    roles: ["tool", "user", "user", "user"],
    firstSeq: 1,
    expected: 2,
  },
  {
    name: "summary: nothing folded, nothing dropped",
    kind: "summary",
    maxStored: 2,
    summarizedThroughSeq: 0,
    roles: users(5),
    firstSeq: 1,
    expected: 0,
  },
  {
    name: "summary: only the folded part of the excess",
    kind: "summary",
    maxStored: 2,
    summarizedThroughSeq: 2,
    roles: users(5),
    firstSeq: 1,
    expected: 2,
  },
  {
    name: "summary: all the excess when folded",
    kind: "summary",
    maxStored: 2,
    summarizedThroughSeq: 9,
    roles: users(5),
    firstSeq: 1,
    expected: 3,
  },
  {
    name: "summary: seqs count, not positions",
    kind: "summary",
    maxStored: 1,
    summarizedThroughSeq: 11,
    roles: users(4),
    firstSeq: 10,
    expected: 2,
  },
  {
    name: "summary: tool results after the excess go only while folded",
    kind: "summary",
    maxStored: 3,
    summarizedThroughSeq: 3,
    roles: ["user", "assistant", "tool", "tool", "user", "user"],
    firstSeq: 1,
    expected: 3,
  },
  {
    name: "summary: folded tool results after the excess go",
    kind: "summary",
    maxStored: 3,
    summarizedThroughSeq: 4,
    roles: ["user", "assistant", "tool", "tool", "user", "user"],
    firstSeq: 1,
    expected: 4,
  },
];
