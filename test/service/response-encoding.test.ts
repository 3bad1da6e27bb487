import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { DurationSchema, TimestampSchema } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  type AddResponse,
  AddResponseSchema,
  type GetResponse,
  GetResponseSchema,
  type Thread,
  ThreadSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import type { StoredMessage, Strategy } from "../../src/core/types.js";
import { strategyToPb, threadToPb } from "../../src/service/convert.js";
import { encodeGetResponse, setMessages } from "../../src/service/pre-encoded.js";
import { encodeAddResponse, encodeGetResponseTail } from "../../src/service/response-encoding.js";

// "binary" strings reach every code point, lone surrogates included, which
// both encoders must turn into U+FFFD alike.
const text = fc.oneof(
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.string({ maxLength: 300 }),
  fc.constantFrom("", "\ud800", "a\udc00b", "ünï 😀"),
);
const seq = fc.oneof(
  fc.constant(0),
  fc.integer({ min: 1, max: 300 }),
  fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
);
const ms = fc.integer({ min: 0, max: 2 ** 45 });
const tokenOptions = fc.record(
  {
    maxTokens: fc.integer({ min: 1, max: 10_000_000 }),
    tokenEncoding: fc.constantFrom("o200k_base", "cl100k_base"),
  },
  { requiredKeys: [] },
);
const strategy: fc.Arbitrary<Strategy> = fc.oneof(
  fc.record({
    kind: fc.constant("buffer" as const),
    maxMessages: fc.nat(1000),
    excludeSystem: fc.boolean(),
    maxStored: fc.nat(100_000),
  }),
  fc
    .tuple(
      fc.record({
        kind: fc.constant("window" as const),
        window: fc.nat(1000),
        excludeSystem: fc.boolean(),
        maxStored: fc.nat(100_000),
      }),
      tokenOptions,
    )
    .map(([s, t]) => ({ ...s, ...t })),
  fc
    .tuple(
      fc.record({
        kind: fc.constant("summary" as const),
        window: fc.nat(1000),
        summarizeEvery: fc.nat(1000),
        model: text,
        excludeSystem: fc.boolean(),
        maxStored: fc.nat(100_000),
        summaryPlacement: fc.constantFrom("system", "user", "none"),
      }),
      tokenOptions,
    )
    .map(([s, t]) => ({ ...s, ...t })),
) as fc.Arbitrary<Strategy>;

const threadState = fc
  .record(
    {
      threadId: text,
      strategy,
      lastSeq: seq,
      summarizedThroughSeq: seq,
      createTime: ms,
      updateTime: ms,
      labels: fc.dictionary(text, text, { maxKeys: 4 }),
      ttlMs: fc.integer({ min: 1, max: 10 * 365 * 24 * 3600 * 1000 }),
      expireTime: ms,
      // A fork's origin (Thread.parent = 23, a two-byte tag like labels'), with an empty id too.
      parent: fc.record({ threadId: text, atSeq: seq, forkTime: ms, parentCreateTime: ms }),
    },
    {
      requiredKeys: [
        "threadId",
        "strategy",
        "lastSeq",
        "summarizedThroughSeq",
        "createTime",
        "updateTime",
      ],
    },
  )
  .map((t) => ({ ...t, incarnation: "i", summary: "", summaryTime: 0 }));

const thread: fc.Arbitrary<Thread> = threadState.map((t) =>
  threadToPb(t as Parameters<typeof threadToPb>[0]),
);

function same(fast: Uint8Array, slow: Uint8Array): void {
  expect(Buffer.from(fast).toString("hex")).toBe(Buffer.from(slow).toString("hex"));
}

describe("hand-written AddResponse encoding", () => {
  it("writes the bytes toBinary writes, which decode back", () => {
    fc.assert(
      fc.property(fc.option(thread, { nil: undefined }), seq, seq, (t, first, last) => {
        const res = create(AddResponseSchema, {
          ...(t === undefined ? {} : { thread: t }),
          firstSeq: BigInt(first),
          lastSeq: BigInt(last),
        });
        const fast = encodeAddResponse(res);
        same(fast, toBinary(AddResponseSchema, res));
        expect(fromBinary(AddResponseSchema, fast).lastSeq).toBe(BigInt(last));
      }),
      { numRuns: 500 },
    );
  });

  it("falls back to toBinary for values it does not take: past 2^53, negative times, unknown fields", () => {
    const t = create(ThreadSchema, {
      threadId: "t",
      strategy: strategyToPb({
        kind: "buffer",
        maxMessages: 0,
        excludeSystem: false,
        maxStored: 5,
      }),
      lastSeq: 2n ** 60n,
      createTime: create(TimestampSchema, { seconds: -5n, nanos: 0 }),
      ttl: create(DurationSchema, { seconds: 1n, nanos: -1 }),
    });
    const cases: AddResponse[] = [
      create(AddResponseSchema, { thread: t, firstSeq: 1n, lastSeq: 1n }),
      create(AddResponseSchema, { firstSeq: 2n ** 64n - 1n }),
      {
        ...create(AddResponseSchema, { lastSeq: 3n }),
        $unknown: [{ no: 99, wireType: 0, data: new Uint8Array([1]) }],
      },
    ];
    for (const res of cases) same(encodeAddResponse(res), toBinary(AddResponseSchema, res));
  });
});

describe("hand-written GetResponse encoding", () => {
  const message: StoredMessage = { role: "user", content: "hi", seq: 3, createTime: 9 };

  it("writes the fields after messages as toBinary does, whole responses included", () => {
    fc.assert(
      fc.property(
        fc.record(
          {
            summary: text,
            thread,
            degraded: fc.boolean(),
            degradedReason: text,
            tokens: fc.nat(2 ** 32 - 1),
            maxTokens: fc.nat(2 ** 32 - 1),
            overBudget: fc.boolean(),
            clearedToolResults: fc.nat(2 ** 32 - 1),
            clearedToolTokens: fc.nat(2 ** 32 - 1),
          },
          { requiredKeys: [] },
        ),
        fc.array(fc.constant(message), { maxLength: 3 }),
        (fields, messages) => {
          const tail = create(GetResponseSchema, fields);
          const fastTail = encodeGetResponseTail(tail);
          expect(fastTail).toBeDefined();
          same(fastTail as Uint8Array, toBinary(GetResponseSchema, tail));
          const whole: GetResponse = setMessages(create(GetResponseSchema, fields), messages);
          same(encodeGetResponse(whole), toBinary(GetResponseSchema, whole));
        },
      ),
      { numRuns: 500 },
    );
  });

  it("declines what it does not take, and encodeGetResponse then uses toBinary", () => {
    const res = setMessages(
      create(GetResponseSchema, {
        thread: create(ThreadSchema, { threadId: "t", lastSeq: 2n ** 54n }),
        tokens: 4,
      }),
      [message],
    );
    expect(encodeGetResponseTail(res)).toBeUndefined();
    same(encodeGetResponse(res), toBinary(GetResponseSchema, res));
  });
});
