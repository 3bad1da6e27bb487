/**
 * core/idempotency.ts decideReplay: whether a request id seen before makes
 * a request a retry. Run against the core (test/core/decision-cases.test.ts)
 * and against the Redis store's Lua (src/store/redis/lua/idempotency.ts,
 * test/store/redis-lua-decisions.test.ts).
 */
export interface ReplayCase {
  name: string;
  seen: { hash: string; time: number } | undefined;
  requestId: string;
  requestHash: string;
  now: number;
  retentionMs: number;
  /** "reused": refused with invalid_argument (request_id). */
  expected: "new" | "replay" | "reused";
}

const base = { requestId: "r", requestHash: "h", now: 5000, retentionMs: 1000 };

export const REPLAY_CASES: readonly ReplayCase[] = [
  {
    ...base,
    name: "no request id",
    seen: { hash: "h", time: 4999 },
    requestId: "",
    expected: "new",
  },
  { ...base, name: "never seen", seen: undefined, expected: "new" },
  {
    ...base,
    name: "a retry within retention",
    seen: { hash: "h", time: 4001 },
    expected: "replay",
  },
  {
    ...base,
    name: "a retry at the same instant",
    seen: { hash: "h", time: 5000 },
    expected: "replay",
  },
  { ...base, name: "retention just ended", seen: { hash: "h", time: 4000 }, expected: "new" },
  {
    ...base,
    name: "another payload within retention",
    seen: { hash: "other", time: 4999 },
    expected: "reused",
  },
  {
    ...base,
    name: "another payload past retention",
    seen: { hash: "other", time: 3000 },
    expected: "new",
  },
  {
    ...base,
    name: "an empty hash is a payload too",
    seen: { hash: "", time: 4999 },
    expected: "reused",
  },
];
