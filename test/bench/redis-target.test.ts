import { describe, expect, it } from "vitest";
import { PERIODIC_COMMANDS, sentPerCallWithoutTimers } from "../../bench/report.js";

/** The unary bench's Redis target (at most 1 command sent per Add), bench/report.ts. */
describe("the bench's Redis commands per Add", () => {
  it("leaves out what the server sends on its own timers, and nothing else", () => {
    // What MONITOR counted over 1,000 Adds while the incarnation check and the TTL sweep ran once.
    const caught = {
      sentPerCall: 1002 / 1000,
      sentByCommand: new Map([
        ["evalsha", 1],
        ["set", 0.001],
        ["sscan", 0.001],
      ]),
    };
    expect(sentPerCallWithoutTimers(caught)).toBeCloseTo(1, 12);
    // A second command per Add (an EXPIRE_THREAD before the APPEND) still counts.
    const twice = { sentPerCall: 2, sentByCommand: new Map([["evalsha", 2]]) };
    expect(sentPerCallWithoutTimers(twice)).toBe(2);
    expect(sentPerCallWithoutTimers({ sentPerCall: undefined, sentByCommand: new Map() })).toBe(
      undefined,
    );
    expect([...PERIODIC_COMMANDS].sort()).toEqual(["set", "sscan"]);
  });
});
