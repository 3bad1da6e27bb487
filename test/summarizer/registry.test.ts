import { describe, expect, it } from "vitest";
import { MemoryError } from "../../src/core/errors.js";
import { createExtractiveSummarizer } from "../../src/summarizer/extractive.js";
import { createSummarizerRegistry } from "../../src/summarizer/registry.js";

const extractive = createExtractiveSummarizer();
const short = createExtractiveSummarizer({ name: "short", maxChars: 200 });

describe("summarizer registry", () => {
  it("finds summarisers by name and knows its default", () => {
    const registry = createSummarizerRegistry([short, extractive], "extractive");
    expect(registry.defaultName).toBe("extractive");
    expect(registry.get("extractive")).toBe(extractive);
    expect(registry.get("short")).toBe(short);
    expect(registry.has("short")).toBe(true);
    expect(registry.has("openai")).toBe(false);
    expect(registry.has("")).toBe(false);
    expect(registry.names()).toEqual(["extractive", "short"]);
  });

  it("hands out a copy of its names", () => {
    const registry = createSummarizerRegistry([extractive], "extractive");
    registry.names().push("sneaky");
    expect(registry.names()).toEqual(["extractive"]);
  });

  it("rejects an unknown name as invalid_argument on strategy.summary.model", () => {
    const registry = createSummarizerRegistry([short, extractive], "extractive");
    let caught: unknown;
    try {
      registry.get("gpt-9");
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(MemoryError);
    expect(caught).toMatchObject({ code: "invalid_argument", field: "strategy.summary.model" });
    expect((caught as MemoryError).message).toBe(
      'strategy.summary.model: unknown summarizer "gpt-9"; configured: extractive, short',
    );
  });

  it("quotes a long unknown name only in part", () => {
    const registry = createSummarizerRegistry([extractive], "extractive");
    let message = "";
    try {
      registry.get("x".repeat(10_000));
    } catch (err) {
      message = err instanceof Error ? err.message : "";
    }
    expect(message).toContain(`"${"x".repeat(64)}…"`);
    expect(message.length).toBeLessThan(200);
  });

  it("refuses a default that is not configured", () => {
    expect(() => createSummarizerRegistry([short], "extractive")).toThrow(
      /default summarizer "extractive" is not configured \(configured: short\)/,
    );
    expect(() => createSummarizerRegistry([], "extractive")).toThrow(/configured: none/);
  });

  it("refuses duplicate names", () => {
    const twin = createExtractiveSummarizer({ maxChars: 100 });
    expect(() => createSummarizerRegistry([extractive, twin], "extractive")).toThrow(
      /duplicate summarizer name "extractive"/,
    );
  });
});
