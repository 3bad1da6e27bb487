/**
 * core/ttl.ts ttlAfterAdd (a thread's ttl after an Add) and isExpired. Run
 * against the core (test/core/decision-cases.test.ts) and against the Redis
 * store's Lua (src/store/redis/lua/labels.ts, test/store/redis-lua-decisions.test.ts).
 */
export interface TtlAfterAddCase {
  name: string;
  requested: number | undefined;
  current: number | undefined;
  created: boolean;
  defaultTtlMs: number | undefined;
  expected: number;
}

export const TTL_AFTER_ADD_CASES: readonly TtlAfterAddCase[] = [
  {
    name: "the Add's own ttl",
    requested: 500,
    current: 900,
    created: false,
    defaultTtlMs: 700,
    expected: 500,
  },
  {
    name: "the Add's ttl of 0 ends retention",
    requested: 0,
    current: 900,
    created: false,
    defaultTtlMs: 700,
    expected: 0,
  },
  {
    name: "the thread keeps its ttl",
    requested: undefined,
    current: 900,
    created: false,
    defaultTtlMs: 700,
    expected: 900,
  },
  {
    name: "a thread without one keeps none",
    requested: undefined,
    current: undefined,
    created: false,
    defaultTtlMs: 700,
    expected: 0,
  },
  {
    name: "a new thread takes the default",
    requested: undefined,
    current: undefined,
    created: true,
    defaultTtlMs: 700,
    expected: 700,
  },
  {
    name: "a new thread, no default",
    requested: undefined,
    current: undefined,
    created: true,
    defaultTtlMs: undefined,
    expected: 0,
  },
  {
    name: "a new thread with its own ttl",
    requested: 300,
    current: undefined,
    created: true,
    defaultTtlMs: 700,
    expected: 300,
  },
];

export interface IsExpiredCase {
  name: string;
  expireTime: number | undefined;
  now: number;
  expected: boolean;
}

export const IS_EXPIRED_CASES: readonly IsExpiredCase[] = [
  { name: "no retention", expireTime: undefined, now: 5000, expected: false },
  { name: "before its time", expireTime: 5001, now: 5000, expected: false },
  { name: "at its time", expireTime: 5000, now: 5000, expected: true },
  { name: "after it", expireTime: 4000, now: 5000, expected: true },
];
