import { describe, expect, it } from "vitest";
import { type ImportedThread, importedState } from "../../src/core/import.js";

const given: ImportedThread = {
  threadId: "t",
  strategy: { kind: "buffer", maxMessages: 0, excludeSystem: false, maxStored: 10 },
  lastSeq: 7,
  summarizedThroughSeq: 5,
  summary: "earlier",
  summaryTime: 400,
  createTime: 100,
  updateTime: 500,
};

describe("importedState", () => {
  it("writes the thread as given under the new incarnation", () => {
    expect(importedState(given, "inc")).toEqual({ ...given, incarnation: "inc" });
  });

  it("copies the labels, so a change to the snapshot's object changes nothing", () => {
    const labels = { user: "u1" };
    const state = importedState({ ...given, labels }, "inc");
    labels.user = "u2";
    expect(state.labels).toEqual({ user: "u1" });
  });

  it("keeps retention only when both the ttl and the expire time are given", () => {
    expect(importedState({ ...given, ttlMs: 60_000, expireTime: 900 }, "i")).toMatchObject({
      ttlMs: 60_000,
      expireTime: 900,
    });
    for (const half of [{ ttlMs: 60_000 }, { expireTime: 900 }]) {
      const state = importedState({ ...given, ...half }, "i");
      expect(state.ttlMs).toBeUndefined();
      expect(state.expireTime).toBeUndefined();
    }
  });
});
