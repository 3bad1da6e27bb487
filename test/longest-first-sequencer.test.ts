import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import type { TestSpecification } from "vitest/node";
import LongestFirstSequencer, {
  LONGEST_FILES,
  longestRank,
} from "./support/longest-first-sequencer.js";

const root = resolve(import.meta.dirname, "..");

describe("LongestFirstSequencer", () => {
  it("names only test files that exist", () => {
    for (const f of LONGEST_FILES) expect(existsSync(resolve(root, f)), f).toBe(true);
  });

  it("ranks the listed files in list order and every other file after them", () => {
    expect(longestRank(resolve(root, "test/store/contract.test.ts"))).toBe(0);
    expect(longestRank(resolve(root, "test/conformance/conformance.test.ts"))).toBe(1);
    expect(longestRank("test/integration/command.test.ts")).toBe(6);
    // Only whole path segments match: a file whose name merely ends the same is another file.
    expect(longestRank(resolve(root, "test/store/xcontract.test.ts"))).toBe(LONGEST_FILES.length);
  });

  it("moves the listed files to the front and keeps the order of the rest", async () => {
    const spec = (path: string): TestSpecification =>
      ({ moduleId: resolve(root, path) }) as TestSpecification;
    const files = [
      spec("test/a.test.ts"),
      spec("test/integration/command.test.ts"),
      spec("test/b.test.ts"),
      spec("test/store/contract.test.ts"),
      spec("test/c.test.ts"),
    ];
    // The base order is vitest's; here it is taken as given, to see what the sequencer adds.
    const sequencer = Object.create(LongestFirstSequencer.prototype) as LongestFirstSequencer;
    const base = Object.getPrototypeOf(LongestFirstSequencer.prototype) as {
      sort(files: TestSpecification[]): Promise<TestSpecification[]>;
    };
    const original = base.sort;
    base.sort = async (given) => [...given];
    try {
      const sorted = await sequencer.sort(files);
      expect(sorted.map((f) => f.moduleId.slice(root.length + 1))).toEqual([
        "test/store/contract.test.ts",
        "test/integration/command.test.ts",
        "test/a.test.ts",
        "test/b.test.ts",
        "test/c.test.ts",
      ]);
    } finally {
      base.sort = original;
    }
  });
});
