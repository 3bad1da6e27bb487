import { describe, expect, it } from "vitest";
import { appendDelta, bytesOf, importDelta, removalDelta } from "../../src/core/usage.js";

const m = (content: string) => ({ role: "user" as const, content });

describe("usage deltas", () => {
  it("counts an Add after its own trim", () => {
    expect(appendDelta(true, [m("ab"), m("é")], { count: 0, bytes: 0 })).toEqual({
      threads: 1,
      messages: 2,
      bytes: 4,
    });
    expect(appendDelta(false, [m("abc")], { count: 2, bytes: 5 })).toEqual({
      threads: 0,
      messages: -1,
      bytes: -2,
    });
  });

  it("counts an import, and nothing for a thread that exists", () => {
    expect(importDelta(false, [m("x"), m("")])).toEqual({ threads: 1, messages: 2, bytes: 1 });
    expect(importDelta(true, [m("x")])).toBeUndefined();
  });

  it("gives a removed thread's room back", () => {
    expect(removalDelta({ messages: 3, bytes: 9 })).toEqual({
      threads: -1,
      messages: -3,
      bytes: -9,
    });
    expect(bytesOf([])).toBe(0);
  });
});
