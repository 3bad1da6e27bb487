import { describe, expect, it } from "vitest";
import { decideAppend, keepsSummary, trimCount } from "../../src/core/append.js";
import { MemoryError } from "../../src/core/errors.js";
import { mayCommitSummary, mayTakeLease, nextLeaseToken } from "../../src/core/fold-commit.js";
import { forkTrimCount } from "../../src/core/fork.js";
import { decideReplay } from "../../src/core/idempotency.js";
import { cutLineage, raiseFloor, rangesFor } from "../../src/core/lineage.js";
import { checkQuotas } from "../../src/core/quota.js";
import { recallSize } from "../../src/core/recall.js";
import { decideRewind, forgetRequest } from "../../src/core/rewind.js";
import { isExpired, ttlAfterAdd } from "../../src/core/ttl.js";
import type { Strategy, ThreadState } from "../../src/core/types.js";
import { APPEND_DECISION_CASES, KEEPS_SUMMARY_CASES } from "./cases/append.js";
import { FOLD_COMMIT_CASES } from "./cases/fold-commit.js";
import { LEASE_TAKE_CASES } from "./cases/lease-take.js";
import { CUT_LINEAGE_CASES, RAISE_FLOOR_CASES, RANGES_FOR_CASES } from "./cases/lineage.js";
import { QUOTA_CASES } from "./cases/quota.js";
import { RECALL_SIZE_CASES } from "./cases/recall-size.js";
import { REPLAY_CASES } from "./cases/replay.js";
import { FORGET_REQUEST_CASES, REWIND_CASES } from "./cases/rewind.js";
import { TRIM_COUNT_CASES } from "./cases/trim-count.js";
import { IS_EXPIRED_CASES, TTL_AFTER_ADD_CASES } from "./cases/ttl.js";

/**
 * The decision case tables (test/core/cases/) against the core functions.
 * The same tables run against the Redis store's Lua, which makes these
 * decisions inside its scripts (test/store/redis-lua-decisions.test.ts).
 */

/** The refusal a decision threw, as its error code, or what it returned. */
function outcome<T>(decide: () => T): T | { refused: string } {
  try {
    return decide();
  } catch (err) {
    if (err instanceof MemoryError) return { refused: err.code };
    throw err;
  }
}

function strategyOf(kind: "buffer" | "window" | "summary", maxStored: number): Strategy {
  const base = { excludeSystem: false, maxStored };
  if (kind === "buffer") return { ...base, kind, maxMessages: 0 };
  if (kind === "window") return { ...base, kind, window: 20 };
  return { ...base, kind, window: 2, summarizeEvery: 2, model: "extractive" };
}

function threadOf(t: { lastSeq: number; summarizedThroughSeq: number }): ThreadState {
  return {
    threadId: "t",
    incarnation: "i",
    strategy: strategyOf("buffer", 1000),
    lastSeq: t.lastSeq,
    summarizedThroughSeq: t.summarizedThroughSeq,
    summary: t.summarizedThroughSeq > 0 ? "s" : "",
    summaryTime: t.summarizedThroughSeq > 0 ? 3 : 0,
    createTime: 1,
    updateTime: 1,
  };
}

describe("decision case tables, core", () => {
  it.each(TRIM_COUNT_CASES.map((c) => [c.name, c] as const))("trimCount: %s", (_n, c) => {
    const messages = c.roles.map((role, i) => ({ seq: c.firstSeq + i, role }));
    expect(trimCount(strategyOf(c.kind, c.maxStored), messages, c.summarizedThroughSeq)).toBe(
      c.expected,
    );
  });

  it.each(TRIM_COUNT_CASES.map((c) => [c.name, c] as const))("forkTrimCount: %s", (_n, c) => {
    // The same count from seqs alone: what a store with frozen segments trims by.
    const atSeq = c.firstSeq + c.roles.length - 1;
    const roleAt = (seq: number) => c.roles[seq - c.firstSeq];
    expect(
      forkTrimCount(
        strategyOf(c.kind, c.maxStored),
        c.firstSeq,
        atSeq,
        c.summarizedThroughSeq,
        roleAt,
      ),
    ).toBe(c.expected);
  });

  it.each(RAISE_FLOOR_CASES.map((c) => [c.name, c] as const))("raiseFloor: %s", (_n, c) => {
    expect(raiseFloor(c.lineage, c.newFloor)).toEqual(c.expected);
  });

  it.each(RANGES_FOR_CASES.map((c) => [c.name, c] as const))("rangesFor: %s", (_n, c) => {
    expect(rangesFor(c.lineage, c.lastSeq, c.from, c.to)).toEqual(c.expected);
  });

  it.each(CUT_LINEAGE_CASES.map((c) => [c.name, c] as const))("cutLineage: %s", (_n, c) => {
    expect(cutLineage(c.lineage, c.lastSeq, c.toSeq)).toEqual(c.expected);
  });

  it.each(REPLAY_CASES.map((c) => [c.name, c] as const))("decideReplay: %s", (_n, c) => {
    const lim = { idempotencyRetentionMs: c.retentionMs };
    const got = outcome(() => decideReplay(c.seen, c, lim));
    expect(got).toEqual(c.expected === "reused" ? { refused: "invalid_argument" } : c.expected);
  });

  it.each(QUOTA_CASES.map((c) => [c.name, c] as const))("checkQuotas: %s", (_n, c) => {
    let got = "allowed";
    try {
      checkQuotas(c.limits, c.usage, c.delta);
    } catch (err) {
      if (!(err instanceof MemoryError) || err.code !== "resource_exhausted") throw err;
      got = /quota (\w+)/.exec(err.message)?.[1] ?? err.message;
    }
    expect(got).toBe(c.expected);
  });

  it.each(FOLD_COMMIT_CASES.map((c) => [c.name, c] as const))("mayCommitSummary: %s", (_n, c) => {
    expect(mayCommitSummary(c.thread, c.lease, c.cmd)).toBe(c.expected);
  });

  it.each(LEASE_TAKE_CASES.map((c) => [c.name, c] as const))("lease take: %s", (_n, c) => {
    const taken = mayTakeLease(c.held, c.now) ? nextLeaseToken(c.lastToken) : undefined;
    expect(taken).toBe(c.expected);
  });

  it.each(REWIND_CASES.map((c) => [c.name, c] as const))("decideRewind: %s", (_n, c) => {
    const thread = c.thread === undefined ? undefined : threadOf(c.thread);
    const got = outcome(() => decideRewind(thread, c.oldestStoredSeq, { ...c, now: 50 }));
    if (typeof got === "object" && "thread" in got) {
      expect({ dropAfterSeq: got.dropAfterSeq, summaryDropped: got.summaryDropped }).toEqual(
        c.expected,
      );
      expect(got.thread.lastSeq).toBe(c.toSeq);
    } else {
      expect(got).toEqual(c.expected);
    }
  });

  it.each(FORGET_REQUEST_CASES.map((c) => [c.name, c] as const))("forgetRequest: %s", (_n, c) => {
    expect(forgetRequest(c.recordedLastSeq, c.toSeq)).toBe(c.expected);
  });

  it.each(APPEND_DECISION_CASES.map((c) => [c.name, c] as const))("decideAppend: %s", (_n, c) => {
    const thread =
      c.thread === undefined
        ? undefined
        : {
            ...threadOf({ lastSeq: c.thread.lastSeq, summarizedThroughSeq: 0 }),
            strategy: c.thread.strategy,
          };
    const got = outcome(() => decideAppend(thread, c));
    const whose =
      typeof got === "object" && "refused" in got
        ? got
        : got === thread?.strategy
          ? "thread"
          : got === c.strategy
            ? "request"
            : got === c.defaultStrategy
              ? "default"
              : "another strategy";
    expect(whose).toEqual(c.expected);
  });

  it.each(KEEPS_SUMMARY_CASES.map((c) => [c.name, c] as const))("keepsSummary: %s", (_n, c) => {
    expect(keepsSummary(c.from, c.to)).toBe(c.expected);
  });

  it.each(RECALL_SIZE_CASES.map((c) => [c.name, c] as const))("recallSize: %s", (_n, c) => {
    expect(recallSize(c.strategy, c.limit)).toBe(c.expected);
  });

  it.each(TTL_AFTER_ADD_CASES.map((c) => [c.name, c] as const))("ttlAfterAdd: %s", (_n, c) => {
    expect(ttlAfterAdd(c.requested, c.current, c.created, c.defaultTtlMs)).toBe(c.expected);
  });

  it.each(IS_EXPIRED_CASES.map((c) => [c.name, c] as const))("isExpired: %s", (_n, c) => {
    expect(isExpired({ expireTime: c.expireTime }, c.now)).toBe(c.expected);
  });
});
