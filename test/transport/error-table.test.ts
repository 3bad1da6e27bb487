import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import { status } from "@grpc/grpc-js";
import { describe, expect, it } from "vitest";
import { type ErrorCode, invalidArgument, MemoryError } from "../../src/core/errors.js";
import {
  cancelledByClient,
  deadlineExceeded,
  serverShuttingDown,
} from "../../src/transport/call-registry.js";
import {
  errorCodeTable,
  INTERNAL_ERROR_MESSAGE,
  toClientError,
  toConnectError,
  toGrpcStatus,
} from "../../src/transport/error-table.js";
import { capturingLogger } from "./harness.js";

const expected: [ErrorCode, status, Code][] = [
  ["invalid_argument", status.INVALID_ARGUMENT, Code.InvalidArgument],
  ["not_found", status.NOT_FOUND, Code.NotFound],
  ["already_exists", status.ALREADY_EXISTS, Code.AlreadyExists],
  ["failed_precondition", status.FAILED_PRECONDITION, Code.FailedPrecondition],
  ["aborted", status.ABORTED, Code.Aborted],
  ["out_of_range", status.OUT_OF_RANGE, Code.OutOfRange],
  ["resource_exhausted", status.RESOURCE_EXHAUSTED, Code.ResourceExhausted],
  ["unauthenticated", status.UNAUTHENTICATED, Code.Unauthenticated],
  ["unavailable", status.UNAVAILABLE, Code.Unavailable],
  ["deadline_exceeded", status.DEADLINE_EXCEEDED, Code.DeadlineExceeded],
  ["cancelled", status.CANCELLED, Code.Canceled],
  ["internal", status.INTERNAL, Code.Internal],
];

function scope(signal?: AbortSignal) {
  const { logger, entries } = capturingLogger();
  return {
    entries,
    scope: {
      method: "windlass.memory.v1.MemoryService/Get",
      logger,
      ...(signal ? { signal } : {}),
    },
  };
}

describe("errorCodeTable", () => {
  it("maps every domain code to one gRPC and one Connect code", () => {
    expect(Object.keys(errorCodeTable).sort()).toEqual(expected.map(([c]) => c).sort());
    for (const [code, grpc, connect] of expected) {
      expect(errorCodeTable[code]).toEqual({ grpc, connect });
    }
  });
});

describe("toClientError", () => {
  it.each(expected.filter(([c]) => c !== "internal"))("keeps a MemoryError %s", (code) => {
    const { scope: s, entries } = scope();
    expect(toClientError(new MemoryError(code, "what went wrong"), s)).toEqual({
      code,
      message: "what went wrong",
    });
    expect(entries).toEqual([]);
  });

  it("names the field of an invalid argument", () => {
    const { scope: s } = scope();
    const err = toClientError(invalidArgument("messages[2].role", "unknown role 9"), s);
    expect(err).toEqual({ code: "invalid_argument", message: "messages[2].role: unknown role 9" });
    const bare = new MemoryError("invalid_argument", "must be > 0", { field: "strategy.window" });
    expect(toClientError(bare, s).message).toBe("strategy.window: must be > 0");
  });

  it("hides anything else behind INTERNAL and logs the cause", () => {
    const { scope: s, entries } = scope();
    const secret = new Error("connect ECONNREFUSED 10.1.2.3:6379 password=hunter2");
    const err = toClientError(secret, s);
    expect(err).toEqual({ code: "internal", message: INTERNAL_ERROR_MESSAGE });
    expect(entries).toHaveLength(1);
    expect(entries[0]?.level).toBe("error");
    expect(entries[0]?.fields.err).toBe(secret);
    expect(toClientError("a string", s).code).toBe("internal");
    expect(toClientError(undefined, s).code).toBe("internal");
  });

  it("hides the message of a domain internal error too", () => {
    const { scope: s } = scope();
    const err = toClientError(new MemoryError("internal", "row 17 of table x is corrupt"), s);
    expect(err).toEqual({ code: "internal", message: INTERNAL_ERROR_MESSAGE });
  });

  it.each([
    ["the client cancels", cancelledByClient(), "cancelled"],
    ["the deadline passes", deadlineExceeded(), "deadline_exceeded"],
    ["the server shuts down", serverShuttingDown(), "unavailable"],
  ] as const)("maps an abort error by the signal's reason when %s", async (_, reason, code) => {
    const controller = new AbortController();
    controller.abort(reason);
    const { scope: s, entries } = scope(controller.signal);
    // The reason itself, a DOMException AbortError, and what timers/promises throws.
    expect(toClientError(reason, s).code).toBe(code);
    expect(toClientError(new DOMException("aborted", "AbortError"), s).code).toBe(code);
    const fromTimer = await sleep(10, undefined, { signal: controller.signal }).catch((e) => e);
    expect(toClientError(fromTimer, s).code).toBe(code);
    expect(entries).toEqual([]);
  });

  it("treats an AbortError as internal when the call was not aborted", () => {
    const { scope: s } = scope(new AbortController().signal);
    expect(toClientError(new DOMException("aborted", "AbortError"), s).code).toBe("internal");
  });
});

describe("wire errors", () => {
  it("builds a grpc status and a ConnectError from the table", () => {
    const err = { code: "failed_precondition", message: "strategy differs" } as const;
    expect(toGrpcStatus(err)).toEqual({
      code: status.FAILED_PRECONDITION,
      details: "strategy differs",
    });
    const connectError = toConnectError(err);
    expect(connectError).toBeInstanceOf(ConnectError);
    expect(connectError.code).toBe(Code.FailedPrecondition);
    expect(connectError.rawMessage).toBe("strategy differs");
    expect(connectError.cause).toBeUndefined();
  });
});
