import type { NamespaceUsage, QuotaLimits, QuotaName } from "../../../src/core/quota.js";

/**
 * core/quota.ts checkQuotas: whether a write's change to its namespace's
 * usage passes the quotas. Run against the core
 * (test/core/decision-cases.test.ts) and against the Redis store's Lua
 * (src/store/redis/lua/quota.ts, test/store/redis-lua-decisions.test.ts).
 */
export interface QuotaCase {
  name: string;
  limits: QuotaLimits;
  usage: NamespaceUsage;
  delta: NamespaceUsage;
  expected: "allowed" | QuotaName;
}

const limits = {
  maxThreadsPerNamespace: 2,
  maxMessagesPerNamespace: 10,
  maxBytesPerNamespace: 100,
};
const unlimited = {
  maxThreadsPerNamespace: 0,
  maxMessagesPerNamespace: 0,
  maxBytesPerNamespace: 0,
};
const none = { threads: 0, messages: 0, bytes: 0 };

export const QUOTA_CASES: readonly QuotaCase[] = [
  {
    name: "an empty namespace",
    limits,
    usage: none,
    delta: { threads: 1, messages: 3, bytes: 30 },
    expected: "allowed",
  },
  {
    name: "up to every limit",
    limits,
    usage: { threads: 1, messages: 7, bytes: 70 },
    delta: { threads: 1, messages: 3, bytes: 30 },
    expected: "allowed",
  },
  {
    name: "one thread too many",
    limits,
    usage: { threads: 2, messages: 0, bytes: 0 },
    delta: { threads: 1, messages: 0, bytes: 0 },
    expected: "max_threads_per_namespace",
  },
  {
    name: "one message too many",
    limits,
    usage: { threads: 1, messages: 10, bytes: 0 },
    delta: { threads: 0, messages: 1, bytes: 0 },
    expected: "max_messages_per_namespace",
  },
  {
    name: "one byte too many",
    limits,
    usage: { threads: 1, messages: 1, bytes: 95 },
    delta: { threads: 0, messages: 1, bytes: 6 },
    expected: "max_bytes_per_namespace",
  },
  {
    name: "the first quota passed is named",
    limits,
    usage: { threads: 2, messages: 10, bytes: 100 },
    delta: { threads: 1, messages: 1, bytes: 1 },
    expected: "max_threads_per_namespace",
  },
  {
    name: "a change that grows nothing, over a lowered quota",
    limits,
    usage: { threads: 5, messages: 50, bytes: 500 },
    delta: { threads: 0, messages: 0, bytes: -3 },
    expected: "allowed",
  },
  {
    name: "a trim giving back more than it adds",
    limits,
    usage: { threads: 1, messages: 12, bytes: 50 },
    delta: { threads: 0, messages: -1, bytes: 2 },
    expected: "allowed",
  },
  {
    name: "unlimited",
    limits: unlimited,
    usage: { threads: 1e6, messages: 1e9, bytes: 1e12 },
    delta: { threads: 1, messages: 1, bytes: 1 },
    expected: "allowed",
  },
];
