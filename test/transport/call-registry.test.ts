import { EventEmitter } from "node:events";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { MemoryError } from "../../src/core/errors.js";
import {
  CallRegistry,
  clientStopReason,
  DEADLINE_SLACK_MS,
} from "../../src/transport/call-registry.js";

describe("clientStopReason", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  const at = (now: number): void => {
    vi.useFakeTimers({ now, toFake: ["Date"] });
  };

  it("is a plain cancel when the client set no deadline", () => {
    at(10_000);
    expect(clientStopReason(undefined, 0).code).toBe("cancelled");
  });

  it("counts a cancel in the last quarter of the call's time as its deadline", () => {
    // Begun at 0 with 2,000 ms to go: the last quarter starts at 1,500.
    at(1_499);
    expect(clientStopReason(2_000, 0).code).toBe("cancelled");
    at(1_500);
    expect(clientStopReason(2_000, 0).code).toBe("deadline_exceeded");
    at(2_500);
    expect(clientStopReason(2_000, 0).code).toBe("deadline_exceeded");
  });

  it("keeps at least DEADLINE_SLACK_MS of slack on short calls", () => {
    at(100 - DEADLINE_SLACK_MS - 1);
    expect(clientStopReason(100, 0).code).toBe("cancelled");
    at(100 - DEADLINE_SLACK_MS);
    expect(clientStopReason(100, 0).code).toBe("deadline_exceeded");
  });

  it("is measured from when the registry began the call", () => {
    at(5_000);
    const calls = new CallRegistry();
    const call = calls.begin("unary", 9_000);
    expect(call.begunAt).toBe(5_000);
    call.end();
  });
});

describe("CallRegistry cancel source", () => {
  class FakeGrpcCall extends EventEmitter {
    cancelled = false;
    cancel(): void {
      this.cancelled = true;
      this.emit("cancelled");
    }
  }

  it("listens for the client's cancel only once the signal is read", () => {
    const calls = new CallRegistry();
    const grpcCall = new FakeGrpcCall();
    const call = calls.begin("unary", undefined, grpcCall);
    expect(grpcCall.listenerCount("cancelled")).toBe(0);
    const { signal } = call;
    expect(grpcCall.listenerCount("cancelled")).toBe(1);
    expect(signal.aborted).toBe(false);
    grpcCall.cancel();
    expect(signal.aborted).toBe(true);
    expect((signal.reason as MemoryError).code).toBe("cancelled");
    call.end();
    expect(grpcCall.listenerCount("cancelled")).toBe(0);
    expect(calls.size).toBe(0);
  });

  it("gives a signal read after the client's cancel already aborted", () => {
    const calls = new CallRegistry();
    const grpcCall = new FakeGrpcCall();
    const call = calls.begin("unary", undefined, grpcCall);
    grpcCall.cancel();
    expect(call.signal.aborted).toBe(true);
    expect((call.signal.reason as MemoryError).code).toBe("cancelled");
    expect(grpcCall.listenerCount("cancelled")).toBe(0);
    call.end();
  });

  it("keeps the first reason: shutdown before the cancel", () => {
    const calls = new CallRegistry();
    const grpcCall = new FakeGrpcCall();
    const call = calls.begin("unary", undefined, grpcCall);
    calls.abortAll();
    grpcCall.cancel();
    expect((call.signal.reason as MemoryError).code).toBe("unavailable");
    call.end();
  });
});
