import { describe, expect, it } from "vitest";
import { MemoryError } from "../../src/core/errors.js";
import { decideReplay, requestsToKeep } from "../../src/core/idempotency.js";

const lim = { idempotencyRetentionMs: 1000, idempotencyMaxPerThread: 3 };
const add = (over: Partial<{ requestId: string; requestHash: string; now: number }> = {}) => ({
  requestId: "r",
  requestHash: "h",
  now: 5000,
  ...over,
});

describe("decideReplay", () => {
  it("runs an Add without a request id, or one never seen, as new", () => {
    expect(decideReplay({ hash: "h", time: 4999 }, add({ requestId: "" }), lim)).toBe("new");
    expect(decideReplay(undefined, add(), lim)).toBe("new");
  });

  it("replays a retry within retention and forgets one past it", () => {
    expect(decideReplay({ hash: "h", time: 4001 }, add(), lim)).toBe("replay");
    expect(decideReplay({ hash: "h", time: 4000 }, add(), lim)).toBe("new");
  });

  it("refuses a request id reused for another payload, naming the field", () => {
    let caught: unknown;
    try {
      decideReplay({ hash: "other", time: 4999 }, add(), lim);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(MemoryError);
    expect((caught as MemoryError).field).toBe("request_id");
    // Past retention the id is free again, whatever the payload.
    expect(decideReplay({ hash: "other", time: 3000 }, add(), lim)).toBe("new");
  });
});

describe("requestsToKeep", () => {
  it("drops what retention ended and keeps at most the per-thread cap, never the newest", () => {
    expect(requestsToKeep(5000, lim)).toEqual({ dropThrough: 4000, keepNewest: 3 });
    expect(requestsToKeep(5000, { ...lim, idempotencyMaxPerThread: 0 }).keepNewest).toBe(1);
  });
});
