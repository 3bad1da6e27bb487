import type { Strategy } from "../../../src/core/types.js";
import { buffer, summary, window20 } from "../../store/fixtures.js";

/**
 * core/append.ts decideAppend (the strategy an Add leaves the thread with,
 * or its refusal) and keepsSummary (whether a strategy change keeps the
 * summary). Run against the core (test/core/decision-cases.test.ts) and
 * against the Redis store's Lua (src/store/redis/lua/append.ts,
 * test/store/redis-lua-decisions.test.ts).
 */

const window30: Strategy = { ...window20, window: 30 };

export interface AppendDecisionCase {
  name: string;
  thread: { lastSeq: number; strategy: Strategy } | undefined;
  strategy: Strategy | undefined;
  defaultStrategy: Strategy;
  replaceStrategy: boolean;
  expectedLastSeq: number | undefined;
  /** Whose strategy the thread has after the Add, or the refusal's code. */
  expected: "thread" | "request" | "default" | { refused: "aborted" | "failed_precondition" };
}

const add = { defaultStrategy: buffer, replaceStrategy: false, expectedLastSeq: undefined };
const thread = { lastSeq: 4, strategy: window20 };

export const APPEND_DECISION_CASES: readonly AppendDecisionCase[] = [
  {
    ...add,
    name: "a new thread, no strategy asked",
    thread: undefined,
    strategy: undefined,
    expected: "default",
  },
  {
    ...add,
    name: "a new thread, a strategy asked",
    thread: undefined,
    strategy: window20,
    expected: "request",
  },
  {
    ...add,
    name: "a new thread, expected_last_seq 0",
    thread: undefined,
    strategy: undefined,
    expectedLastSeq: 0,
    expected: "default",
  },
  {
    ...add,
    name: "a new thread, expected_last_seq above 0",
    thread: undefined,
    strategy: undefined,
    expectedLastSeq: 1,
    expected: { refused: "aborted" },
  },
  {
    ...add,
    name: "no strategy asked: the thread's",
    thread,
    strategy: undefined,
    expected: "thread",
  },
  {
    ...add,
    name: "the same strategy asked (an equal object)",
    thread,
    strategy: { ...window20 },
    expected: "thread",
  },
  {
    ...add,
    name: "the same strategy with replace",
    thread,
    strategy: { ...window20 },
    replaceStrategy: true,
    expected: "thread",
  },
  {
    ...add,
    name: "another strategy without replace",
    thread,
    strategy: window30,
    expected: { refused: "failed_precondition" },
  },
  {
    ...add,
    name: "another kind without replace",
    thread,
    strategy: summary,
    expected: { refused: "failed_precondition" },
  },
  {
    ...add,
    name: "another strategy with replace",
    thread,
    strategy: summary,
    replaceStrategy: true,
    expected: "request",
  },
  {
    ...add,
    name: "expected_last_seq matches",
    thread,
    strategy: undefined,
    expectedLastSeq: 4,
    expected: "thread",
  },
  {
    ...add,
    name: "expected_last_seq differs",
    thread,
    strategy: undefined,
    expectedLastSeq: 3,
    expected: { refused: "aborted" },
  },
  {
    ...add,
    name: "expected_last_seq checked before the strategy",
    thread,
    strategy: window30,
    expectedLastSeq: 3,
    expected: { refused: "aborted" },
  },
];

export interface KeepsSummaryCase {
  name: string;
  from: Strategy;
  to: Strategy;
  expected: boolean;
}

export const KEEPS_SUMMARY_CASES: readonly KeepsSummaryCase[] = [
  { name: "summary to the same summary", from: summary, to: summary, expected: true },
  {
    name: "summary to a summary with another window",
    from: summary,
    to: { ...summary, window: 9 },
    expected: true,
  },
  {
    name: "summary to a summary that excludes system",
    from: summary,
    to: { ...summary, excludeSystem: true },
    expected: false,
  },
  { name: "summary to window", from: summary, to: window20, expected: false },
  { name: "window to summary", from: window20, to: summary, expected: false },
  { name: "buffer to buffer", from: buffer, to: buffer, expected: false },
];
