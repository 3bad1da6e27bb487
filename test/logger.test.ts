import { describe, expect, it } from "vitest";
import { createJsonLogger, REDACTED } from "../src/logger.js";

function capture(level: Parameters<typeof createJsonLogger>[0] = "info") {
  const lines: string[] = [];
  const logger = createJsonLogger(level, (line) => {
    lines.push(line);
  });
  return {
    logger,
    entries: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>),
    lines,
  };
}

describe("JSON logs (pino)", () => {
  it("writes one JSON object per line with level, ISO time, msg and the fields", () => {
    const { logger, entries, lines } = capture();
    logger.info("servers listening", { grpcPort: 50051, seq: 7n });
    expect(lines).toHaveLength(1);
    expect(lines[0]?.endsWith("\n")).toBe(true);
    const [e] = entries();
    expect(e).toMatchObject({ level: "info", msg: "servers listening", grpcPort: 50051, seq: "7" });
    expect(new Date(String(e?.time)).toISOString()).toBe(e?.time);
  });

  it("drops lines below the level", () => {
    const { logger, entries } = capture("warn");
    logger.debug("d");
    logger.info("i");
    logger.warn("w");
    logger.error("e");
    expect(entries().map((e) => e.level)).toEqual(["warn", "error"]);
  });

  it("describes errors with name, message, stack and cause under any key", () => {
    const { logger, entries } = capture();
    const err = new TypeError("outer", { cause: new Error("inner") });
    logger.error("call failed", { err, failure: new RangeError("r") });
    const [e] = entries();
    expect(e?.err).toMatchObject({
      name: "TypeError",
      message: "outer",
      cause: { name: "Error", message: "inner" },
    });
    expect(JSON.stringify(e?.err)).toContain("TypeError: outer\\n    at ");
    expect(e?.failure).toMatchObject({ name: "RangeError", message: "r" });
  });

  it("redacts authorization headers and API keys", () => {
    const { logger, lines, entries } = capture();
    logger.warn("upstream refused", {
      authorization: "Bearer tok-top",
      headers: { authorization: "Bearer tok-nested", "x-api-key": "key-nested", accept: "*/*" },
      request: { Authorization: "Basic dXNlcjpwYXNz" },
      apiKey: "sk-live-123",
      openai: { api_key: "sk-live-456" },
      token: "tok-plain",
    });
    const text = lines.join("");
    for (const secret of [
      "tok-top",
      "tok-nested",
      "key-nested",
      "dXNlcjpwYXNz",
      "sk-live",
      "tok-plain",
    ]) {
      expect(text).not.toContain(secret);
    }
    const [e] = entries();
    expect(e).toMatchObject({
      authorization: REDACTED,
      headers: { authorization: REDACTED, "x-api-key": REDACTED, accept: "*/*" },
      request: { Authorization: REDACTED },
      apiKey: REDACTED,
      openai: { api_key: REDACTED },
      token: REDACTED,
    });
  });

  it("survives cycles", () => {
    const { logger, entries } = capture();
    const loop: Record<string, unknown> = { name: "a" };
    loop.self = loop;
    logger.info("loop", { loop });
    expect(entries()[0]?.loop).toMatchObject({ name: "a" });
  });
});
