import { isUtf8 } from "node:buffer";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { status } from "@grpc/grpc-js";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AddRequestSchema,
  GetRequestSchema,
  MemoryService,
  Role,
  WatchRequestSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { MemoryError } from "../../src/core/errors.js";
import {
  checkBinaryRequest,
  firstInvalidUtf8,
  jsonPathAt,
} from "../../src/transport/request-decoding.js";
import { type AppHarness, startAppHarness } from "../integration/app-harness.js";
import { grpcHealthCheck } from "../transport/clients.js";
import { type RawResult, rawCall, type Wire } from "./raw-rpc.js";

/**
 * Fuzzing the request decoders over real servers: random byte mutations of
 * valid Add, Get and Watch requests, and random JSON, on the gRPC port and on
 * every protocol of the Connect port. Whatever arrives, the answer is a
 * defined status (never INTERNAL or UNKNOWN), an INVALID_ARGUMENT names its
 * field first, and the server keeps serving.
 */

const SERVICE = `/${MemoryService.typeName}`;

// Each request carries a deadline, so a mutation that is still a valid Watch
// (an endless stream) ends with DEADLINE_EXCEEDED instead of hanging; short,
// since many random Watch requests are valid. Unary calls get a roomy one.
const timeoutMsFor = (method: Method): number => (method === "Watch" ? 80 : 5_000);
// Bounds the file's run time (well under a minute on a loaded 2-core machine).
const NUM_RUNS = 500;
const TEST_TIMEOUT_MS = 50_000;

type Method = "Add" | "Get" | "Watch";

const VALID: Record<Method, Uint8Array> = {
  Add: toBinary(
    AddRequestSchema,
    create(AddRequestSchema, {
      threadId: "fuzz",
      requestId: "r-1",
      strategy: { kind: { case: "window", value: { window: 4 } }, maxStored: 50 },
      messages: [
        { role: Role.USER, content: "héllo ✓", metadata: { k: "v" } },
        {
          role: Role.ASSISTANT,
          content: "",
          toolCalls: [{ id: "c1", name: "lookup", arguments: '{"q":1}' }],
        },
        { role: Role.TOOL, content: "42", toolCallId: "c1", createTime: timestampFromMs(1e12) },
      ],
    }),
  ),
  Get: toBinary(GetRequestSchema, create(GetRequestSchema, { threadId: "fuzz", limit: 3 })),
  Watch: toBinary(
    WatchRequestSchema,
    create(WatchRequestSchema, { threadIds: ["fuzz", "ƒ"], eventTypes: [1, 2] }),
  ),
};

/** Where binary goes: [port, wire for unary methods, wire for Watch]. */
const BINARY_WIRES: [port: "grpc" | "http", unary: Wire, stream: Wire][] = [
  ["grpc", "grpc", "grpc"],
  ["http", "grpc", "grpc"],
  ["http", "grpc-web", "grpc-web"],
  ["http", "connect-proto", "connect-stream-proto"],
];

const JSON_WIRES: [unary: Wire, stream: Wire][] = [
  ["connect-json", "connect-stream-json"],
  ["grpc-web-json", "grpc-web-json"],
];

type Mutation =
  | { kind: "flip"; at: number; bit: number }
  | { kind: "set"; at: number; byte: number }
  | { kind: "insert"; at: number; bytes: Uint8Array }
  | { kind: "delete"; at: number; count: number }
  | { kind: "truncate"; at: number };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({
    kind: fc.constant("flip" as const),
    at: fc.nat(),
    bit: fc.integer({ min: 0, max: 7 }),
  }),
  fc.record({
    kind: fc.constant("set" as const),
    at: fc.nat(),
    byte: fc.integer({ min: 0, max: 255 }),
  }),
  fc.record({
    kind: fc.constant("insert" as const),
    at: fc.nat(),
    bytes: fc.uint8Array({ minLength: 1, maxLength: 12 }),
  }),
  fc.record({
    kind: fc.constant("delete" as const),
    at: fc.nat(),
    count: fc.integer({ min: 1, max: 8 }),
  }),
  fc.record({ kind: fc.constant("truncate" as const), at: fc.nat() }),
);

function mutate(bytes: Uint8Array, mutations: readonly Mutation[]): Uint8Array {
  let out = Uint8Array.from(bytes);
  for (const m of mutations) {
    const at = out.length === 0 ? 0 : m.at % (out.length + 1);
    switch (m.kind) {
      case "flip":
        if (at < out.length) out[at] = (out[at] as number) ^ (1 << m.bit);
        break;
      case "set":
        if (at < out.length) out[at] = m.byte;
        break;
      case "insert":
        out = Uint8Array.from([...out.subarray(0, at), ...m.bytes, ...out.subarray(at)]);
        break;
      case "delete":
        out = Uint8Array.from([...out.subarray(0, at), ...out.subarray(at + m.count)]);
        break;
      case "truncate":
        out = out.subarray(0, at);
        break;
    }
  }
  return out;
}

/** Every gRPC code but INTERNAL and UNKNOWN: what a client may get for any input. */
const DEFINED = new Set(
  Array.from({ length: 17 }, (_, code) => code).filter(
    (code) => code !== status.INTERNAL && code !== status.UNKNOWN,
  ),
);

function expectDefined(result: RawResult, what: string): void {
  expect(DEFINED.has(result.code), `${what}: ${result.code} ${result.message}`).toBe(true);
  if (result.code === status.INVALID_ARGUMENT) {
    // The field (or "request") comes first.
    expect(result.message, what).toMatch(/^\S.*?: \S/s);
  }
}

let harness: AppHarness;
let ports: { grpc: number; http: number };

async function stillServing(): Promise<void> {
  await expect(grpcHealthCheck(`127.0.0.1:${ports.grpc}`, "")).resolves.toBe("SERVING");
  for (const [port, wire] of [
    [ports.grpc, "grpc"],
    [ports.http, "connect-proto"],
  ] as const) {
    const result = await rawCall({ port, wire, path: `${SERVICE}/Get`, payload: VALID.Get });
    expect(result.code, result.message).toBe(status.OK);
  }
}

describe("fuzzing request decoding", () => {
  beforeAll(async () => {
    harness = await startAppHarness();
    ports = { grpc: harness.app.grpcPort, http: harness.app.httpPort };
  });
  afterAll(async () => {
    await harness.close();
  });

  it(
    "answers mutated protobuf with a defined status on every transport",
    async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom<Method>("Add", "Get", "Watch"),
          fc.constantFrom(...BINARY_WIRES),
          fc.array(mutation, { minLength: 1, maxLength: 4 }),
          async (method, [port, unary, stream], mutations) => {
            const payload = mutate(VALID[method], mutations);
            const wire = method === "Watch" ? stream : unary;
            const result = await rawCall({
              port: ports[port],
              wire,
              path: `${SERVICE}/${method}`,
              payload,
              timeoutMs: timeoutMsFor(method),
            });
            expectDefined(result, `${method} over ${port}/${wire}`);
          },
        ),
        { numRuns: NUM_RUNS },
      );
      await stillServing();
    },
    TEST_TIMEOUT_MS,
  );

  it(
    "answers random JSON with a defined status",
    async () => {
      const keys = [
        "threadId",
        "thread_id",
        "messages",
        "strategy",
        "requestId",
        "expectedLastSeq",
        "limit",
        "threadIds",
        "eventTypes",
        "resumeToken",
        "role",
        "content",
        "createTime",
        "bogus",
      ];
      const jsonBody = fc.oneof(
        fc.json(),
        fc
          .dictionary(fc.constantFrom(...keys), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 5 })
          .map((value) => JSON.stringify(value)),
      );
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom<Method>("Add", "Get", "Watch"),
          fc.constantFrom(...JSON_WIRES),
          jsonBody,
          fc.array(mutation, { maxLength: 2 }),
          async (method, [unary, stream], text, mutations) => {
            const payload = mutate(new TextEncoder().encode(text), mutations);
            const wire = method === "Watch" ? stream : unary;
            const result = await rawCall({
              port: ports.http,
              wire,
              path: `${SERVICE}/${method}`,
              payload,
              timeoutMs: timeoutMsFor(method),
            });
            expectDefined(result, `${method} over ${wire}: ${text}`);
          },
        ),
        { numRuns: NUM_RUNS },
      );
      await stillServing();
    },
    TEST_TIMEOUT_MS,
  );
});

describe("the strict decoder in-process", () => {
  const SCHEMAS = { Add: AddRequestSchema, Get: GetRequestSchema, Watch: WatchRequestSchema };

  it("accepts only what protobuf-es decodes, and refuses with a field-first INVALID_ARGUMENT", () => {
    fc.assert(
      fc.property(
        fc.constantFrom<Method>("Add", "Get", "Watch"),
        fc.array(mutation, { minLength: 1, maxLength: 4 }),
        (method, mutations) => {
          const bytes = mutate(VALID[method], mutations);
          let refused: unknown;
          try {
            checkBinaryRequest(SCHEMAS[method], bytes);
          } catch (err) {
            refused = err;
          }
          if (refused === undefined) {
            // What the check lets through, protobuf-es decodes: no INTERNAL behind it.
            fromBinary(SCHEMAS[method], bytes);
          } else {
            expect(refused).toBeInstanceOf(MemoryError);
            expect((refused as MemoryError).code).toBe("invalid_argument");
            expect((refused as MemoryError).message).toMatch(/^\S.*?: \S/s);
          }
        },
      ),
      { numRuns: 5_000 },
    );
  });

  it("finds the first invalid UTF-8 byte exactly where the bytes stop being UTF-8", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 40 }), fc.string({ maxLength: 10 }), (raw, text) => {
        const bytes = Uint8Array.from([...new TextEncoder().encode(text), ...raw]);
        const at = firstInvalidUtf8(bytes);
        expect(at === bytes.length).toBe(isUtf8(bytes));
        expect(isUtf8(bytes.subarray(0, at))).toBe(true);
      }),
      { numRuns: 5_000 },
    );
  });

  it.each([
    ['{"a":"x', "a"],
    ['{"messages":[{"role":"ROLE_USER"},{"content":"ab', "messages[1].content"],
    ['{"a":{"b":[1,2,{"c":"', "a.b[2].c"],
    ['{"we ird":"', '["we ird"]'],
    ['{"a":1,"ke', "ke (a key)"],
    // An escaped backslash ends the string; an escaped quote does not.
    ['{"a":"x\\\\","b":"', "b"],
    ['{"a":"\\"", "b":["', "b[0]"],
  ])("names the JSON path at the end of %s", (prefix, path) => {
    expect(jsonPathAt(prefix)).toBe(path);
  });
});
