import fc from "fast-check";
import { ErrorReply } from "redis";
import { describe, expect, it } from "vitest";
import { CommandWriter, RespProtocolError, RespReader } from "../../src/store/redis/resp.js";

/**
 * The RESP2 reader and writer of the single-node connection, on bytes
 * alone (the connection against a real redis-server is
 * redis-resp-connection.test.ts): every reply type, replies cut anywhere,
 * and linear work on a large reply read in small chunks.
 */

function readAll(chunks: readonly Buffer[]): unknown[] {
  const replies: unknown[] = [];
  const reader = new RespReader((r) => replies.push(r));
  for (const c of chunks) reader.push(c);
  return replies;
}

const WIRE = Buffer.from(
  "+OK\r\n" +
    ":42\r\n" +
    ":-7\r\n" +
    "$4\r\nhé!\r\n" +
    "$0\r\n\r\n" +
    "$-1\r\n" +
    "*-1\r\n" +
    "*0\r\n" +
    "*3\r\n$1\r\na\r\n*2\r\n:1\r\n$-1\r\n-ERR inner\r\n" +
    "-NOSCRIPT No matching script\r\n" +
    "$4\r\na\r\nb\r\n",
  "utf8",
);

const EXPECTED = [
  "OK",
  42,
  -7,
  "hé!",
  "",
  null,
  null,
  [],
  ["a", [1, null], new ErrorReply("ERR inner")],
  new ErrorReply("NOSCRIPT No matching script"),
  "a\r\nb",
];

describe("RespReader", () => {
  it("reads every RESP2 reply type as node-redis gives it", () => {
    const replies = readAll([WIRE]);
    expect(replies).toEqual(EXPECTED);
    expect(replies[9]).toBeInstanceOf(ErrorReply);
    expect((replies[8] as unknown[])[2]).toBeInstanceOf(ErrorReply);
  });

  it("reads the same replies however the bytes are cut", () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 1, max: WIRE.length - 1 }), { maxLength: 12 }),
        (cuts) => {
          const at = [0, ...cuts.sort((a, b) => a - b), WIRE.length];
          const chunks = at.slice(1).map((end, i) => WIRE.subarray(at[i], end));
          expect(readAll(chunks)).toEqual(EXPECTED);
        },
      ),
      { numRuns: 500 },
    );
    // And byte by byte.
    expect(readAll([...WIRE].map((b) => Buffer.from([b])))).toEqual(EXPECTED);
  });

  it("reads what CommandWriter writes (a command is an array of bulk strings)", () => {
    fc.assert(
      fc.property(
        fc.array(fc.array(fc.string({ unit: "grapheme" }), { minLength: 1, maxLength: 8 }), {
          minLength: 1,
          maxLength: 4,
        }),
        (commands) => {
          const writer = new CommandWriter();
          for (const args of commands) writer.write(args);
          expect(readAll([writer.take()])).toEqual(commands);
          expect(writer.empty).toBe(true);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("writes each argument's UTF-8 bytes and their count, short or long, ASCII or not", () => {
    // The string form, byte for byte: lone surrogates become U+FFFD as Buffer makes them.
    const asText = (args: readonly string[]): Buffer =>
      Buffer.from(
        `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a, "utf8")}\r\n${a}\r\n`).join("")}`,
        "utf8",
      );
    const unit = fc.oneof(
      fc.string({ unit: "binary", maxLength: 300 }),
      fc.string({ maxLength: 600 }),
      fc.string({
        unit: fc.constantFrom("a", "é", "€", "\ud83d\ude00", "\ud800", "\udc00"),
        maxLength: 400,
      }),
    );
    fc.assert(
      fc.property(fc.array(unit, { minLength: 1, maxLength: 6 }), (args) => {
        const writer = new CommandWriter();
        writer.write(args);
        expect(writer.take().equals(asText(args))).toBe(true);
      }),
      { numRuns: 500 },
    );
  });

  it("grows for a large batch, gives it out whole, and keeps no more than 64 KiB afterwards", () => {
    const writer = new CommandWriter();
    const big = "x".repeat(300_000);
    writer.write(["SET", "k", big]);
    writer.write(["SET", "k2", "v"]);
    expect(writer.capacity).toBeGreaterThanOrEqual(300_000);
    const out = writer.take();
    expect(readAll([out])).toEqual([
      ["SET", "k", big],
      ["SET", "k2", "v"],
    ]);
    expect(writer.capacity).toBeLessThanOrEqual(64 * 1024);
    // What was taken is its own copy: the next commands do not overwrite it.
    writer.write(["PING"]);
    expect(readAll([out])[1]).toEqual(["SET", "k2", "v"]);
    writer.clear();
    expect(writer.empty).toBe(true);
  });

  it("holds only the element not yet complete", () => {
    const replies: unknown[] = [];
    const reader = new RespReader((r) => replies.push(r));
    reader.push(Buffer.from("*3\r\n$3\r\nabc\r\n$3\r\nde"));
    // "abc" is parsed and kept in the array; only the partial element is held.
    expect(reader.buffered).toBe("$3\r\nde".length);
    reader.push(Buffer.from("f\r\n:9\r\n"));
    expect(replies).toEqual([["abc", "def", 9]]);
    expect(reader.buffered).toBe(0);
  });

  it("reads a 32 MiB reply in 4 KiB chunks in linear time", () => {
    const entry = "x".repeat(1000);
    const count = 32 * 1024;
    const wire = Buffer.from(
      `*${count}\r\n${`$${entry.length}\r\n${entry}\r\n`.repeat(count)}$${4 * 1024 * 1024}\r\n${"y".repeat(4 * 1024 * 1024)}\r\n`,
    );
    const replies: unknown[] = [];
    const reader = new RespReader((r) => replies.push(r));
    const started = performance.now();
    for (let at = 0; at < wire.length; at += 4096) reader.push(wire.subarray(at, at + 4096));
    const ms = performance.now() - started;
    expect(replies).toHaveLength(2);
    expect((replies[0] as string[]).length).toBe(count);
    expect((replies[1] as string).length).toBe(4 * 1024 * 1024);
    // Parsing again from the start at every chunk would take minutes (9,000 chunks).
    expect(ms).toBeLessThan(5000);
  });

  it("refuses bytes that are not RESP2", () => {
    expect(() => readAll([Buffer.from("?what\r\n")])).toThrow(RespProtocolError);
    expect(() => readAll([Buffer.from(":12a\r\n")])).toThrow(RespProtocolError);
    expect(() => readAll([Buffer.from("$\r\n")])).toThrow(RespProtocolError);
    // A bulk string longer than its length says.
    expect(() => readAll([Buffer.from("$2\r\nabc\r\n")])).toThrow(RespProtocolError);
    // A line with no end past the bound.
    expect(() => readAll([Buffer.from(`+${"a".repeat(70_000)}`)])).toThrow(RespProtocolError);
  });
});

describe("CommandWriter", () => {
  it("counts lengths in UTF-8 bytes", () => {
    const writer = new CommandWriter();
    writer.write(["SET", "k", "é🙂"]);
    expect(writer.take().toString("utf8")).toBe("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$6\r\né🙂\r\n");
  });
});
