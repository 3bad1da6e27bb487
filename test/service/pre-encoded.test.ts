import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  GetResponseSchema,
  WatchResponseSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import type { MemoryEvent, StoredMessage } from "../../src/core/types.js";
import { encodeResumeToken, eventToPb } from "../../src/service/convert.js";
import {
  encodeGetResponse,
  encodeWatchResponse,
  setMessages,
  sharedEventToPb,
} from "../../src/service/pre-encoded.js";

const text = fc.string({ unit: "grapheme", maxLength: 300 });
const stored: fc.Arbitrary<StoredMessage> = fc.record(
  {
    role: fc.constantFrom("system", "user", "assistant", "tool") as fc.Arbitrary<
      StoredMessage["role"]
    >,
    content: text,
    name: text,
    toolCalls: fc.array(fc.record({ id: text, name: text, arguments: text }), { maxLength: 3 }),
    toolCallId: text,
    metadata: fc.dictionary(text, text, { maxKeys: 3 }),
    seq: fc.integer({ min: 0, max: 2 ** 40 }),
    createTime: fc.integer({ min: 0, max: 2 ** 42 }),
  },
  { requiredKeys: ["role", "content", "seq", "createTime"] },
);

describe("pre-encoded GetResponse messages", () => {
  it("encodes byte for byte as protobuf-es toBinary does, and decodes back", () => {
    fc.assert(
      fc.property(
        fc.array(stored, { maxLength: 25 }),
        text,
        fc.boolean(),
        (msgs, summary, degraded) => {
          const res = setMessages(
            create(GetResponseSchema, { summary, degraded, degradedReason: degraded ? "r" : "" }),
            msgs,
          );
          const fast = encodeGetResponse(res);
          expect(Buffer.from(fast).equals(Buffer.from(toBinary(GetResponseSchema, res)))).toBe(
            true,
          );
          expect(fromBinary(GetResponseSchema, fast).messages.map((m) => m.content)).toEqual(
            msgs.map((m) => m.content),
          );
        },
      ),
      { numRuns: 200 },
    );
  });

  it("reuses a stored message's wire form across responses", () => {
    const m: StoredMessage = Object.freeze({ role: "user", content: "hi", seq: 1, createTime: 5 });
    const a = setMessages(create(GetResponseSchema), [m]);
    const b = setMessages(create(GetResponseSchema), [m]);
    expect(a.messages[0]).toBe(b.messages[0]);
  });

  it("falls back to toBinary when messages were replaced after the fact", () => {
    const m: StoredMessage = { role: "user", content: "x", seq: 2, createTime: 1 };
    const res = setMessages(create(GetResponseSchema), [m]);
    res.messages = [];
    expect(encodeGetResponse(res)).toEqual(toBinary(GetResponseSchema, res));
  });
});

describe("shared Watch events", () => {
  const event = (cursor: string, summary: string): MemoryEvent => ({
    type: "summary_updated",
    summary,
    summarizedThroughSeq: 7,
    foldedCount: 3,
    cursor,
    threadId: "t",
    time: 1234,
  });

  it("converts an event once for every watcher, with the bytes toBinary gives", () => {
    const cursor = `c-${Math.random()}`;
    const a = sharedEventToPb(event(cursor, "s"));
    const b = sharedEventToPb(event(cursor, "s"));
    expect(b).toBe(a);
    const expected = toBinary(
      WatchResponseSchema,
      eventToPb(event(cursor, "s"), encodeResumeToken(cursor)),
    );
    expect(Buffer.from(encodeWatchResponse(a)).equals(Buffer.from(expected))).toBe(true);
    expect(encodeWatchResponse(a)).toBe(encodeWatchResponse(b));
  });

  it("tells events apart by cursor", () => {
    const a = sharedEventToPb(event(`c-${Math.random()}`, "one"));
    const b = sharedEventToPb(event(`c-${Math.random()}`, "two"));
    expect(a).not.toBe(b);
    expect(fromBinary(WatchResponseSchema, encodeWatchResponse(b)).event).toMatchObject({
      case: "summaryUpdated",
      value: { summary: "two" },
    });
  });
});
