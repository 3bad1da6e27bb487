import { readFileSync } from "node:fs";
import { expect, it } from "vitest";
import { loadCases } from "../conformance/suite.js";

/** The README counts the conformance cases; the count comes from the suite itself. */
it("gives the number of conformance cases the suite has", () => {
  const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
  const said = /\(`test\/conformance\/`,\s+(\d+)\s+cases\s+in\s+`cases\/\*\.json`,/.exec(readme);
  expect(said, "the README's sentence naming the count").not.toBeNull();
  expect(Number(said?.[1])).toBe(loadCases().length);
});
