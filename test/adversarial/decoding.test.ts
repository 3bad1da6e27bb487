import { gzipSync } from "node:zlib";
import { create, toBinary } from "@bufbuild/protobuf";
import { status } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AddRequestSchema,
  MemoryService,
  Role,
  WatchRequestSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { type AppHarness, startAppHarness } from "../integration/app-harness.js";
import { grpcHealthCheck } from "../transport/clients.js";
import { type RawResult, rawCall, type Wire } from "./raw-rpc.js";

/**
 * Attacks on request decoding, over real servers and every transport: bytes
 * that are not a valid request must be INVALID_ARGUMENT naming the field
 * (never INTERNAL), store nothing, and leave the server serving; without a
 * good token they must be UNAUTHENTICATED, decided before the body is read.
 */

const SERVICE = `/${MemoryService.typeName}`;
const ADD = `${SERVICE}/Add`;
const LIST = `${SERVICE}/ListThreads`;
const WATCH = `${SERVICE}/Watch`;

type Port = "grpc" | "http";

/** Every way to send protobuf binary: [name, which port, wire]. */
const BINARY_TRANSPORTS: [string, Port, Wire][] = [
  ["gRPC on the grpc-js port", "grpc", "grpc"],
  ["gRPC over h2c on the Connect port", "http", "grpc"],
  ["gRPC over HTTP/1.1 on the Connect port", "http", "grpc-http1"],
  ["gRPC-Web binary", "http", "grpc-web"],
  ["Connect binary over HTTP/1.1", "http", "connect-proto"],
  ["Connect binary over h2c", "http", "connect-proto-h2"],
];

const JSON_TRANSPORTS: [string, Wire][] = [
  ["Connect JSON", "connect-json"],
  ["gRPC-Web JSON", "grpc-web-json"],
];

const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);

function validAdd(threadId = "victim"): Uint8Array {
  return toBinary(
    AddRequestSchema,
    create(AddRequestSchema, {
      threadId,
      messages: [{ role: Role.USER, content: "hello" }],
    }),
  );
}

/** `bytes` with the first occurrence of `find` replaced by `replace` (same length). */
function patch(bytes: Uint8Array, find: string, replace: number[]): Uint8Array {
  const needle = Buffer.from(find, "utf8");
  const at = Buffer.from(bytes).indexOf(needle);
  if (at === -1 || needle.length !== replace.length) throw new Error(`cannot patch ${find}`);
  const out = Uint8Array.from(bytes);
  out.set(replace, at);
  return out;
}

function addWithCreateTime(seconds: bigint, nanos: number): Uint8Array {
  return toBinary(
    AddRequestSchema,
    create(AddRequestSchema, {
      threadId: "victim",
      messages: [{ role: Role.USER, content: "hello", createTime: { seconds, nanos } }],
    }),
  );
}

/** Binary attacks on Add: [name, body, field named first in the message, what is said]. */
const BINARY_ATTACKS: [string, Uint8Array, string, RegExp][] = [
  [
    "a timestamp past year 9999",
    addWithCreateTime(253_402_300_800n, 0),
    "messages[0].create_time",
    /invalid timestamp: seconds out of range/,
  ],
  [
    "a timestamp with negative nanos",
    addWithCreateTime(0n, -1),
    "messages[0].create_time",
    /invalid timestamp: nanos out of range/,
  ],
  [
    "a truncated message",
    validAdd().subarray(0, validAdd().length - 3),
    "messages[0]",
    /runs past the end/,
  ],
  [
    "invalid UTF-8 in a nested string field",
    patch(validAdd(), "hello", [0x68, 0xc3, 0x28, 0xff, 0xfe]),
    "messages[0].content",
    /invalid UTF-8/,
  ],
  [
    "invalid UTF-8 in a top-level string field",
    patch(validAdd(), "victim", [0x76, 0xed, 0xa0, 0x80, 0x6d, 0x21]),
    "thread_id",
    /invalid UTF-8/,
  ],
  [
    "a varint longer than 64 bits",
    Uint8Array.from([0x30, ...new Array(10).fill(0xff), 0x01]),
    "expected_last_seq",
    /varint overflows/,
  ],
  ["a varint cut short", Uint8Array.from([0x30, 0xff, 0xff]), "expected_last_seq", /truncated/],
  [
    "a string field sent as a varint (wrong wire type)",
    Uint8Array.from([0x08, 0x01]),
    "thread_id",
    /wrong wire type/,
  ],
  [
    "a message field sent as a 32-bit value (wrong wire type)",
    Uint8Array.from([0x15, 1, 2, 3, 4]),
    "messages[0]",
    /wrong wire type/,
  ],
  [
    "a length prefix far past the end",
    Uint8Array.from([0x0a, 0xff, 0xff, 0xff, 0x0f, 0x61]),
    "thread_id",
    /runs past the end/,
  ],
  ["an invalid wire type", Uint8Array.from([0x0f, 0x00]), "thread_id", /invalid \(7\)/],
  ["an invalid wire type on an unknown field", Uint8Array.from([0x7f]), "#15", /invalid wire type/],
  ["field number 0", Uint8Array.from([0x00, 0x01]), "request", /field number 0/],
  [
    "unknown groups nested 10,000 deep",
    Uint8Array.from(new Array(10_000).fill(0x7b)),
    "#15",
    /nested too deeply/,
  ],
];

/** JSON attacks on Add: [name, body, field named, what is said]. */
const JSON_ATTACKS: [string, Uint8Array, string, RegExp][] = [
  ["garbage", utf8("{not json"), "request", /not valid JSON/],
  [
    "arrays nested 100,000 deep in a message list",
    utf8(`{"messages":${"[".repeat(100_000)}${"]".repeat(100_000)}}`),
    "messages[0]",
    /must be a JSON object/,
  ],
  ["an array for the request", utf8("[]"), "request", /must be a JSON object/],
  ["an unknown field (a typo)", utf8('{"threadID":"victim"}'), "threadID", /unknown field/],
  [
    "an unknown nested field",
    utf8('{"threadId":"victim","messages":[{"role":"ROLE_USER","contents":"x"}]}'),
    "messages[0].contents",
    /unknown field/,
  ],
  [
    "invalid UTF-8 in a string",
    Uint8Array.from([
      ...utf8('{"threadId":"victim","messages":[{"role":"ROLE_USER","content":"a'),
      0xff,
      ...utf8('"}]}'),
    ]),
    "messages[0].content",
    /invalid UTF-8/,
  ],
  [
    "a bad timestamp",
    utf8(
      '{"threadId":"victim","messages":[{"role":"ROLE_USER","content":"x","createTime":"yesterday"}]}',
    ),
    "messages[0].create_time",
    /invalid timestamp/,
  ],
  [
    "a timestamp out of range",
    utf8(
      '{"threadId":"victim","messages":[{"role":"ROLE_USER","content":"x","createTime":"10000-01-01T00:00:00Z"}]}',
    ),
    "messages[0].create_time",
    /invalid timestamp/,
  ],
  [
    "an unknown enum name",
    utf8('{"threadId":"victim","messages":[{"role":"ROLE_KING","content":"x"}]}'),
    "messages[0].role",
    /invalid value/,
  ],
  [
    "a number out of range",
    utf8('{"threadId":"victim","expectedLastSeq":"-1"}'),
    "expected_last_seq",
    /invalid value/,
  ],
  // Field paths are the proto's snake_case names whichever JSON spelling was sent.
  [
    "an unknown enum name in a camelCase key",
    utf8('{"threadId":"victim","strategy":{"summary":{"summaryPlacement":"ON_TOP"}}}'),
    "strategy.summary.summary_placement",
    /invalid value/,
  ],
  [
    "an unknown enum name in a snake_case key",
    utf8('{"thread_id":"victim","strategy":{"summary":{"summary_placement":"ON_TOP"}}}'),
    "strategy.summary.summary_placement",
    /invalid value/,
  ],
  [
    "invalid UTF-8 under a camelCase key",
    Uint8Array.from([
      ...utf8('{"messages":[{"role":"ROLE_TOOL","toolCallId":"a'),
      0xff,
      ...utf8('"}]}'),
    ]),
    "messages[0].tool_call_id",
    /invalid UTF-8/,
  ],
  [
    "invalid UTF-8 in a label",
    Uint8Array.from([...utf8('{"labels":{"user id":"a'), 0xff, ...utf8('"}}')]),
    'labels["user id"]',
    /invalid UTF-8/,
  ],
  [
    "two members of a oneof",
    utf8('{"threadId":"victim","strategy":{"window":{},"buffer":{}}}'),
    "strategy",
    /oneof/,
  ],
];

let harness: AppHarness;
let ports: Record<Port, number>;

async function listThreads(port: number): Promise<string[]> {
  const res = await fetch(`http://127.0.0.1:${port}${LIST}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: "{}",
  });
  expect(res.status).toBe(200);
  const json = (await res.json()) as { threadIds?: string[] };
  return json.threadIds ?? [];
}

function expectRefused(result: RawResult, field: string, said: RegExp): void {
  expect(result.code, result.message).toBe(status.INVALID_ARGUMENT);
  expect(result.message.startsWith(`${field}: `), result.message).toBe(true);
  expect(result.message).toMatch(said);
}

describe("undecodable requests", () => {
  beforeAll(async () => {
    harness = await startAppHarness();
    ports = { grpc: harness.app.grpcPort, http: harness.app.httpPort };
  });
  afterAll(async () => {
    await harness.close();
  });

  describe.each(BINARY_TRANSPORTS)("protobuf binary, %s", (_name, port, wire) => {
    it.each(BINARY_ATTACKS)(
      "refuses %s with INVALID_ARGUMENT naming the field",
      async (_attack, payload, field, said) => {
        const result = await rawCall({ port: ports[port], wire, path: ADD, payload });
        expectRefused(result, field, said);
      },
    );

    it("refuses a bad Watch request before any event, naming the field", async () => {
      const valid = toBinary(WatchRequestSchema, create(WatchRequestSchema, { threadIds: ["w"] }));
      const payload = patch(valid, "w", [0xff]);
      const streaming = wire === "connect-proto" || wire === "connect-proto-h2";
      const result = await rawCall({
        port: ports[port],
        wire: streaming ? "connect-stream-proto" : wire,
        path: WATCH,
        payload,
      });
      expectRefused(result, "thread_ids[0]", /invalid UTF-8/);
    });

    it("still serves a valid request afterwards", async () => {
      const result = await rawCall({
        port: ports[port],
        wire,
        path: ADD,
        payload: validAdd(`${port}-${wire}`),
      });
      expect(result.code, result.message).toBe(status.OK);
    });
  });

  describe.each(JSON_TRANSPORTS)("JSON, %s", (_name, wire) => {
    it.each(JSON_ATTACKS)(
      "refuses %s with INVALID_ARGUMENT naming the field",
      async (_attack, payload, field, said) => {
        const result = await rawCall({ port: ports.http, wire, path: ADD, payload });
        expectRefused(result, field, said);
      },
    );

    it("refuses invalid UTF-8 in a Watch request's key", async () => {
      const payload = Uint8Array.from([...utf8('{"thread'), 0xc0, 0xaf, ...utf8('Ids":["w"]}')]);
      const result = await rawCall({
        port: ports.http,
        wire: wire === "connect-json" ? "connect-stream-json" : wire,
        path: WATCH,
        payload,
      });
      expectRefused(result, "thread (a key)", /invalid UTF-8/);
    });
  });

  describe("compressed messages", () => {
    const badUtf8 = patch(validAdd(), "hello", [0x68, 0xc3, 0x28, 0xff, 0xfe]);

    it.each(BINARY_TRANSPORTS)(
      "checks a gzip message after decompressing it: %s",
      async (_name, port, wire) => {
        const connectUnary = wire === "connect-proto" || wire === "connect-proto-h2";
        const result = await rawCall({
          port: ports[port],
          wire,
          path: ADD,
          payload: gzipSync(badUtf8),
          ...(connectUnary
            ? { headers: { "content-encoding": "gzip" } }
            : { headers: { "grpc-encoding": "gzip" }, envelopeFlags: 1 }),
        });
        expectRefused(result, "messages[0].content", /invalid UTF-8/);
      },
    );

    it.each(BINARY_TRANSPORTS.filter(([, , wire]) => wire.startsWith("grpc")))(
      "refuses a message flagged compressed with no compression named: %s",
      async (_name, port, wire) => {
        const result = await rawCall({
          port: ports[port],
          wire,
          path: ADD,
          payload: gzipSync(validAdd()),
          envelopeFlags: 1,
        });
        // grpc-js ignores the flag and decodes the gzip bytes as protobuf; the
        // Connect port refuses the flag itself (connect-es alone would say INTERNAL).
        expect(result.code, result.message).toBe(status.INVALID_ARGUMENT);
        if (port === "http") expect(result.message).toMatch(/^request: .*names no compression/);
      },
    );

    it("refuses gzip that does not decompress on the Connect port", async () => {
      for (const wire of ["grpc", "grpc-web"] as const) {
        const result = await rawCall({
          port: ports.http,
          wire,
          path: ADD,
          payload: Uint8Array.from([1, 2, 3]),
          headers: { "grpc-encoding": "gzip" },
          envelopeFlags: 1,
        });
        expect(result.code, `${wire}: ${result.message}`).toBe(status.INVALID_ARGUMENT);
      }
    });
  });

  it("accepts a JSON body that starts with a byte-order mark, as before", async () => {
    const result = await rawCall({
      port: ports.http,
      wire: "connect-json",
      path: `${SERVICE}/Get`,
      payload: Uint8Array.from([0xef, 0xbb, 0xbf, ...utf8('{"threadId":"nobody"}')]),
    });
    expect(result.code, result.message).toBe(status.OK);
  });

  it("stored nothing from any refused request, and the server still serves", async () => {
    const threads = await listThreads(ports.http);
    // Only the valid requests sent after the attacks created threads.
    expect(threads.sort()).toEqual(
      BINARY_TRANSPORTS.map(([, port, wire]) => `${port}-${wire}`).sort(),
    );
    await expect(grpcHealthCheck(`127.0.0.1:${ports.grpc}`, "")).resolves.toBe("SERVING");
    await expect(grpcHealthCheck(`127.0.0.1:${ports.grpc}`, MemoryService.typeName)).resolves.toBe(
      "SERVING",
    );
  });
});

describe("unknown JSON fields with --json-ignore-unknown-fields true", () => {
  let relaxed: AppHarness;
  beforeAll(async () => {
    relaxed = await startAppHarness(["--json-ignore-unknown-fields", "true"]);
  });
  afterAll(async () => {
    await relaxed.close();
  });

  it("drops unknown keys and keeps the rest, but still refuses every other fault", async () => {
    const port = relaxed.app.httpPort;
    const ok = await rawCall({
      port,
      wire: "connect-json",
      path: ADD,
      payload: utf8('{"threadId":"kept","typo":1,"messages":[{"role":"ROLE_USER","content":"x"}]}'),
    });
    expect(ok.code, ok.message).toBe(status.OK);
    expect(await listThreads(port)).toEqual(["kept"]);
    const bad = await rawCall({
      port,
      wire: "connect-json",
      path: ADD,
      payload: utf8('{"threadId":"x","messages":[{"role":"ROLE_USER","createTime":"soon"}]}'),
    });
    expectRefused(bad, "messages[0].create_time", /invalid timestamp/);
  });
});

describe("authentication comes before decoding", () => {
  let secured: AppHarness;
  const token = "s3cret-token";
  beforeAll(async () => {
    secured = await startAppHarness([], { WINDLASS_AUTH_TOKENS: `${token}=team-a` });
  });
  afterAll(async () => {
    await secured.close();
  });

  const garbage = Uint8Array.from([0x0a, 0xff, 0xff, 0xff, 0x0f, 0xff, 0xfe]);

  it.each(BINARY_TRANSPORTS)(
    "answers unauthenticated garbage with UNAUTHENTICATED: %s",
    async (_name, port, wire) => {
      const p = port === "grpc" ? secured.app.grpcPort : secured.app.httpPort;
      const noToken = await rawCall({ port: p, wire, path: ADD, payload: garbage });
      expect(noToken.code, noToken.message).toBe(status.UNAUTHENTICATED);
      const badToken = await rawCall({ port: p, wire, path: ADD, payload: garbage, token: "nope" });
      expect(badToken.code, badToken.message).toBe(status.UNAUTHENTICATED);
      const withToken = await rawCall({ port: p, wire, path: ADD, payload: garbage, token });
      expectRefused(withToken, "thread_id", /runs past the end/);
    },
  );

  it.each(BINARY_TRANSPORTS.filter(([, , wire]) => wire.startsWith("grpc")))(
    "answers unauthenticated gzip that does not decompress with UNAUTHENTICATED: %s",
    async (_name, port, wire) => {
      // The body is never read: on the grpc-js port it would otherwise be
      // grpc-js' own INTERNAL "Failed to decompress message".
      const result = await rawCall({
        port: port === "grpc" ? secured.app.grpcPort : secured.app.httpPort,
        wire,
        path: ADD,
        payload: Uint8Array.from([1, 2, 3]),
        headers: { "grpc-encoding": "gzip" },
        envelopeFlags: 1,
      });
      expect(result.code, result.message).toBe(status.UNAUTHENTICATED);
    },
  );

  it.each(JSON_TRANSPORTS)(
    "answers unauthenticated garbage JSON with UNAUTHENTICATED: %s",
    async (_name, wire) => {
      const port = secured.app.httpPort;
      const noToken = await rawCall({ port, wire, path: ADD, payload: utf8("{garbage") });
      expect(noToken.code, noToken.message).toBe(status.UNAUTHENTICATED);
      const withToken = await rawCall({ port, wire, path: ADD, payload: utf8("{garbage"), token });
      expectRefused(withToken, "request", /not valid JSON/);
    },
  );

  it("answers an unauthenticated Watch with UNAUTHENTICATED on the streaming protocols", async () => {
    for (const wire of ["connect-stream-proto", "connect-stream-json"] as const) {
      const result = await rawCall({
        port: secured.app.httpPort,
        wire,
        path: WATCH,
        payload: garbage,
      });
      expect(result.code, `${wire}: ${result.message}`).toBe(status.UNAUTHENTICATED);
    }
  });
});
