/**
 * core/fold-commit.ts mayCommitSummary: whether a fold's summary may be
 * written. Run against the core (test/core/decision-cases.test.ts) and
 * against the Redis store's Lua (src/store/redis/lua/folds.ts,
 * test/store/redis-lua-decisions.test.ts).
 */
export interface FoldCommitCase {
  name: string;
  thread: { incarnation: string; summarizedThroughSeq: number } | undefined;
  lease: { token: number } | undefined;
  cmd: { incarnation: string; leaseToken: number; fromSeq: number; throughSeq: number };
  expected: boolean;
}

const thread = { incarnation: "i1", summarizedThroughSeq: 4 };
const cmd = { incarnation: "i1", leaseToken: 7, fromSeq: 4, throughSeq: 6 };
const lease = { token: 7 };

export const FOLD_COMMIT_CASES: readonly FoldCommitCase[] = [
  { name: "the lease holder, same incarnation", thread, lease, cmd, expected: true },
  {
    name: "from the start of a thread",
    thread: { ...thread, summarizedThroughSeq: 0 },
    lease,
    cmd: { ...cmd, fromSeq: 0 },
    expected: true,
  },
  { name: "no thread", thread: undefined, lease, cmd, expected: false },
  {
    name: "another incarnation",
    thread: { ...thread, incarnation: "i2" },
    lease,
    cmd,
    expected: false,
  },
  {
    name: "another fold committed",
    thread: { ...thread, summarizedThroughSeq: 5 },
    lease,
    cmd,
    expected: false,
  },
  {
    name: "a summary that does not move forward",
    thread,
    lease,
    cmd: { ...cmd, throughSeq: 4 },
    expected: false,
  },
  {
    name: "a summary that moves back",
    thread,
    lease,
    cmd: { ...cmd, throughSeq: 3 },
    expected: false,
  },
  { name: "no lease", thread, lease: undefined, cmd, expected: false },
  { name: "a later lease", thread, lease: { token: 8 }, cmd, expected: false },
  { name: "an earlier lease", thread, lease: { token: 6 }, cmd, expected: false },
];
