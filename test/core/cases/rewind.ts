import type { ErrorCode } from "../../../src/core/errors.js";

/**
 * core/rewind.ts decideRewind and forgetRequest: what a Rewind does to a
 * thread, and which Adds' request ids it forgets. Run against the core
 * (test/core/decision-cases.test.ts) and against the Redis store's Lua
 * (src/store/redis/lua/rewind.ts and idempotency.ts,
 * test/store/redis-lua-decisions.test.ts).
 */
export interface RewindCase {
  name: string;
  thread: { lastSeq: number; summarizedThroughSeq: number } | undefined;
  /** The oldest stored message's seq; undefined: none stored. */
  oldestStoredSeq: number | undefined;
  toSeq: number;
  expectedLastSeq: number | undefined;
  expected:
    | { refused: ErrorCode }
    | "unchanged"
    | { dropAfterSeq: number; summaryDropped: boolean };
}

const thread = { lastSeq: 10, summarizedThroughSeq: 0 };
const ask = { toSeq: 9, expectedLastSeq: undefined };

export const REWIND_CASES: readonly RewindCase[] = [
  {
    ...ask,
    name: "drops the newest message",
    thread,
    oldestStoredSeq: 1,
    expected: { dropAfterSeq: 9, summaryDropped: false },
  },
  {
    ...ask,
    name: "back to empty",
    thread,
    oldestStoredSeq: 1,
    toSeq: 0,
    expected: { dropAfterSeq: 0, summaryDropped: false },
  },
  {
    ...ask,
    name: "keeps a summary of kept messages",
    thread: { ...thread, summarizedThroughSeq: 5 },
    oldestStoredSeq: 1,
    expected: { dropAfterSeq: 9, summaryDropped: false },
  },
  {
    ...ask,
    name: "keeps a summary ending at to_seq",
    thread: { ...thread, summarizedThroughSeq: 9 },
    oldestStoredSeq: 1,
    expected: { dropAfterSeq: 9, summaryDropped: false },
  },
  {
    ...ask,
    name: "drops a summary covering a dropped message",
    thread: { ...thread, summarizedThroughSeq: 10 },
    oldestStoredSeq: 1,
    expected: { dropAfterSeq: 9, summaryDropped: true },
  },
  {
    ...ask,
    name: "to_seq already last_seq",
    thread,
    oldestStoredSeq: 1,
    toSeq: 10,
    expected: "unchanged",
  },
  {
    ...ask,
    name: "an empty thread at 0",
    thread: { lastSeq: 0, summarizedThroughSeq: 0 },
    oldestStoredSeq: undefined,
    toSeq: 0,
    expected: "unchanged",
  },
  {
    ...ask,
    name: "expected_last_seq matches",
    thread,
    oldestStoredSeq: 1,
    expectedLastSeq: 10,
    expected: { dropAfterSeq: 9, summaryDropped: false },
  },
  {
    ...ask,
    name: "just before the oldest stored message",
    thread,
    oldestStoredSeq: 6,
    toSeq: 5,
    expected: { dropAfterSeq: 5, summaryDropped: false },
  },
  {
    ...ask,
    name: "a summary ending where the store still holds everything after it",
    thread: { ...thread, summarizedThroughSeq: 5 },
    oldestStoredSeq: 6,
    toSeq: 5,
    expected: { dropAfterSeq: 5, summaryDropped: false },
  },
  {
    ...ask,
    name: "no thread",
    thread: undefined,
    oldestStoredSeq: undefined,
    expected: { refused: "not_found" },
  },
  {
    ...ask,
    name: "expected_last_seq differs",
    thread,
    oldestStoredSeq: 1,
    expectedLastSeq: 8,
    expected: { refused: "aborted" },
  },
  {
    ...ask,
    name: "expected_last_seq checked before to_seq",
    thread,
    oldestStoredSeq: 1,
    toSeq: 11,
    expectedLastSeq: 8,
    expected: { refused: "aborted" },
  },
  {
    ...ask,
    name: "to_seq past last_seq",
    thread,
    oldestStoredSeq: 1,
    toSeq: 11,
    expected: { refused: "out_of_range" },
  },
  {
    ...ask,
    name: "messages already trimmed",
    thread,
    oldestStoredSeq: 6,
    toSeq: 4,
    expected: { refused: "failed_precondition" },
  },
  {
    ...ask,
    name: "nothing stored, last_seq above to_seq",
    thread,
    oldestStoredSeq: undefined,
    toSeq: 9,
    expected: { refused: "failed_precondition" },
  },
  {
    ...ask,
    name: "a summary holding messages no longer stored",
    thread: { ...thread, summarizedThroughSeq: 9 },
    oldestStoredSeq: 4,
    toSeq: 7,
    expected: { refused: "failed_precondition" },
  },
];

/** core/rewind.ts forgetRequest: an Add whose newest seq was `recordedLastSeq`, a Rewind to `toSeq`. */
export interface ForgetRequestCase {
  name: string;
  recordedLastSeq: number;
  toSeq: number;
  expected: boolean;
}

export const FORGET_REQUEST_CASES: readonly ForgetRequestCase[] = [
  { name: "an Add that stored a dropped message", recordedLastSeq: 10, toSeq: 9, expected: true },
  { name: "an Add ending at to_seq", recordedLastSeq: 9, toSeq: 9, expected: false },
  { name: "an older Add", recordedLastSeq: 3, toSeq: 9, expected: false },
  { name: "an Add that added nothing", recordedLastSeq: 0, toSeq: 0, expected: false },
];
