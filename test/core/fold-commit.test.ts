import { describe, expect, it } from "vitest";
import { mayCommitSummary, mayTakeLease, nextLeaseToken } from "../../src/core/fold-commit.js";

describe("fold leases", () => {
  it("may be taken when free or run out, never while held", () => {
    expect(mayTakeLease(undefined, 10)).toBe(true);
    expect(mayTakeLease({ token: 1, expiresAt: 11 }, 10)).toBe(false);
    expect(mayTakeLease({ token: 1, expiresAt: 10 }, 10)).toBe(true);
  });

  it("fence with a token above every earlier one", () => {
    expect(nextLeaseToken(undefined)).toBe(1);
    expect(nextLeaseToken(41)).toBe(42);
  });
});

describe("mayCommitSummary", () => {
  const thread = { incarnation: "i1", summarizedThroughSeq: 4 };
  const cmd = { incarnation: "i1", leaseToken: 7, fromSeq: 4, throughSeq: 6 };
  const lease = { token: 7 };

  it("lets the fold that holds the lease on the same incarnation commit", () => {
    expect(mayCommitSummary(thread, lease, cmd)).toBe(true);
  });

  it("refuses every stale fold", () => {
    expect(mayCommitSummary(undefined, lease, cmd)).toBe(false);
    expect(mayCommitSummary({ ...thread, incarnation: "i2" }, lease, cmd)).toBe(false);
    expect(mayCommitSummary({ ...thread, summarizedThroughSeq: 5 }, lease, cmd)).toBe(false);
    expect(mayCommitSummary(thread, lease, { ...cmd, throughSeq: 4 })).toBe(false);
    expect(mayCommitSummary(thread, undefined, cmd)).toBe(false);
    expect(mayCommitSummary(thread, { token: 8 }, cmd)).toBe(false);
  });
});
