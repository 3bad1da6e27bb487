import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { type Json, loadCases, match, matchError, resolveRefs } from "./suite.js";

/** The rows every runner's matcher is tested against (the Python and Go runners read them too). */
const table = JSON.parse(
  readFileSync(new URL("./matcher-cases.json", import.meta.url), "utf8"),
) as {
  match: { name: string; expected: Json; actual?: Json; matches: boolean; diff?: string }[];
  matchError: {
    name: string;
    expected: { [key: string]: Json };
    code: string;
    message: string;
    matches: boolean;
  }[];
  resolveRefs: {
    name: string;
    saved: { [key: string]: Json };
    value: Json;
    result?: Json;
    error?: string;
  }[];
};

describe("the shared matcher table (matcher-cases.json)", () => {
  it.each(table.match.map((row) => [row.name, row] as const))("match: %s", (_name, row) => {
    const diff = match(row.expected, "actual" in row ? row.actual : undefined);
    if (row.matches) expect(diff).toBeUndefined();
    else {
      expect(diff).toBeDefined();
      expect(diff).toContain(row.diff ?? "");
    }
  });

  it.each(table.matchError.map((row) => [row.name, row] as const))(
    "matchError: %s",
    (_name, row) => {
      const diff = matchError(row.expected, row.code, row.message);
      if (row.matches) expect(diff).toBeUndefined();
      else expect(diff).toBeDefined();
    },
  );

  it.each(table.resolveRefs.map((row) => [row.name, row] as const))(
    "resolveRefs: %s",
    (_name, row) => {
      const saved = new Map(Object.entries(row.saved));
      if (row.error !== undefined) {
        expect(() => resolveRefs(row.value, saved)).toThrow(row.error);
      } else {
        expect(resolveRefs(row.value, saved)).toEqual(row.result);
      }
    },
  );
});

describe("the conformance matching rule", () => {
  it("reads absent fields as defaults and null as unset", () => {
    expect(
      match({ degraded: false, summary: "", seq: 0, last: "0", list: [] }, {}),
    ).toBeUndefined();
    expect(match({ thread: null }, {})).toBeUndefined();
    expect(match({ thread: null }, { thread: {} })).toContain("$.thread");
    expect(match({ degraded: true }, {})).toContain("$.degraded");
  });

  it("requires expected objects to be present, so an empty one means 'set'", () => {
    expect(match({ progress: {} }, { progress: {} })).toBeUndefined();
    expect(match({ progress: {} }, { messagesAdded: {} })).toContain("$.progress");
  });

  it("compares integers by decimal text and arrays by length and element", () => {
    expect(match({ seq: 2 }, { seq: "2" })).toBeUndefined();
    expect(match({ seq: 2 }, { seq: "3" })).toContain("$.seq");
    expect(match([{ a: 1 }], [{ a: 1, b: 2 }])).toBeUndefined();
    expect(match([{ a: 1 }], [{ a: 1 }, { a: 2 }])).toContain("expected 1 elements");
    expect(match(["x"], undefined)).toContain("expected 1 elements");
  });

  it("knows $contains and $nonEmpty", () => {
    expect(match({ $contains: "fold" }, "summary fold failed")).toBeUndefined();
    expect(match({ $contains: "fold" }, "nope")).toBeDefined();
    expect(match({ $nonEmpty: true }, "x")).toBeUndefined();
    expect(match({ $nonEmpty: true }, undefined)).toBeDefined();
    expect(match({ $nonEmpty: true }, {})).toBeDefined();
  });

  it("checks error codes, the leading field and message texts", () => {
    const e = { code: "INVALID_ARGUMENT", field: "messages[0].role", messageContains: ["ROLE_"] };
    expect(
      matchError(e, "INVALID_ARGUMENT", "messages[0].role: must be ROLE_USER"),
    ).toBeUndefined();
    expect(matchError(e, "INVALID_ARGUMENT", "messages[1].role: must be ROLE_USER")).toBeDefined();
    expect(matchError(e, "ABORTED", "messages[0].role: ROLE_")).toBeDefined();
  });

  it("resolves $ref paths into saved values and refuses absent ones", () => {
    const saved = new Map([["p1", { nextPageToken: "t", list: [{ id: "a" }] }]]);
    expect(resolveRefs({ pageToken: { $ref: "p1.nextPageToken" } }, saved)).toEqual({
      pageToken: "t",
    });
    expect(resolveRefs({ id: { $ref: "p1.list.0.id" } }, saved)).toEqual({ id: "a" });
    expect(() => resolveRefs({ x: { $ref: "p1.missing" } }, saved)).toThrow("absent");
  });

  it("loads every case file with unique names", () => {
    expect(loadCases().length).toBeGreaterThan(30);
  });
});
