import { describe, expect, it } from "vitest";
import { codeBlocks, parseMarker, retarget } from "./code-blocks.js";

describe("README code blocks", () => {
  it("reads each fence with its language, line and the marker before it", () => {
    const md = [
      "text",
      "<!-- example: run -->",
      "```sh",
      "echo hi",
      "```",
      "",
      "```python",
      "print(1)",
      "print(2)",
      "```",
      "<!-- example: not run (installs) -->",
      "```sh",
      "npm ci",
      "```",
    ].join("\n");
    expect(codeBlocks(md)).toEqual([
      { lang: "sh", code: "echo hi\n", line: 3, action: { kind: "run" } },
      { lang: "python", code: "print(1)\nprint(2)\n", line: 7, action: undefined },
      { lang: "sh", code: "npm ci\n", line: 12, action: { kind: "not-run", reason: "installs" } },
    ]);
  });

  it("refuses a malformed marker or an unclosed fence", () => {
    expect(() => parseMarker("<!-- example: maybe -->")).toThrow(/run/);
    expect(() => parseMarker("<!-- example: not run () -->")).toThrow(/reason/);
    expect(() => parseMarker("<!-- example: run")).toThrow(/unterminated/);
    expect(parseMarker("<!-- other comment -->")).toBeUndefined();
    expect(parseMarker("<!-- example: stream -->")).toEqual({ kind: "stream" });
    expect(() => codeBlocks("```sh\necho\n")).toThrow(/unclosed/);
  });

  it("points the default addresses at the test's server", () => {
    expect(
      retarget("a 127.0.0.1:50051 b http://127.0.0.1:8080/x", "127.0.0.1:1", "127.0.0.1:2"),
    ).toBe("a 127.0.0.1:1 b http://127.0.0.1:2/x");
  });
});
