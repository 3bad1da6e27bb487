import { create, type Message } from "@bufbuild/protobuf";
import {
  AddResponseSchema,
  ClearResponseSchema,
  ForkResponseSchema,
  GetResponseSchema,
  ListThreadsResponseSchema,
  RewindResponseSchema,
  type WatchResponse,
  WatchResponseSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import type { CallContext, MemoryServiceCore } from "../../src/service/context.js";

/**
 * A stand-in MemoryServiceCore for transport tests: it records every call
 * (request, namespace, signal) and answers with fixed replies unless a test
 * scripts a method. The real service is tested on its own; here only the
 * wire matters.
 */
export type CoreMethod = keyof MemoryServiceCore;

export interface RecordedCall {
  readonly method: CoreMethod;
  readonly request: Message;
  readonly ctx: CallContext;
}

export interface ScriptedCore extends MemoryServiceCore {
  /** Every call so far, oldest first. */
  readonly calls: readonly RecordedCall[];
  /** Resolves with the `index`-th call of `method` (0: the first), as soon as it is made. */
  callOf(method: CoreMethod, index?: number): Promise<RecordedCall>;
}

/** Creates a ScriptedCore; methods in `script` replace the fixed replies. */
export function scriptedCore(script: Partial<MemoryServiceCore> = {}): ScriptedCore {
  const calls: RecordedCall[] = [];
  const waiters: { method: CoreMethod; index: number; resolve: (call: RecordedCall) => void }[] =
    [];
  const record = (method: CoreMethod, request: Message, ctx: CallContext): void => {
    const call = { method, request, ctx };
    calls.push(call);
    const index = calls.filter((c) => c.method === method).length - 1;
    for (const waiter of waiters.filter((w) => w.method === method && w.index === index)) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve(call);
    }
  };
  return {
    calls,
    callOf(method, index = 0) {
      const made = calls.filter((c) => c.method === method)[index];
      if (made !== undefined) return Promise.resolve(made);
      return new Promise((resolve) => waiters.push({ method, index, resolve }));
    },
    async add(req, ctx) {
      record("add", req, ctx);
      if (script.add) return script.add(req, ctx);
      const lastSeq = BigInt(req.messages.length);
      return create(AddResponseSchema, {
        thread: { threadId: req.threadId === "" ? "default" : req.threadId, lastSeq },
        firstSeq: lastSeq === 0n ? 0n : 1n,
        lastSeq,
      });
    },
    async get(req, ctx) {
      record("get", req, ctx);
      if (script.get) return script.get(req, ctx);
      return create(GetResponseSchema, { summary: `summary of ${req.threadId}` });
    },
    async clear(req, ctx) {
      record("clear", req, ctx);
      if (script.clear) return script.clear(req, ctx);
      return create(ClearResponseSchema, { clearedThreads: req.all ? 2 : 1 });
    },
    async listThreads(req, ctx) {
      record("listThreads", req, ctx);
      if (script.listThreads) return script.listThreads(req, ctx);
      return create(ListThreadsResponseSchema, { threadIds: ["a", "b"] });
    },
    async rewind(req, ctx) {
      record("rewind", req, ctx);
      if (script.rewind) return script.rewind(req, ctx);
      return create(RewindResponseSchema, {
        thread: { threadId: req.threadId === "" ? "default" : req.threadId, lastSeq: req.toSeq },
        removedCount: 1,
      });
    },
    async fork(req, ctx) {
      record("fork", req, ctx);
      if (script.fork) return script.fork(req, ctx);
      return create(ForkResponseSchema, {
        thread: { threadId: req.newThreadId, lastSeq: req.atSeq ?? 0n },
        sharedCount: 1,
      });
    },
    watch(req, ctx) {
      record("watch", req, ctx);
      if (script.watch) return script.watch(req, ctx);
      return oneEventThenWait(ctx.signal);
    },
  };
}

/** A progress event with the given resume token. */
export function progressEvent(resumeToken: string, threadId = "t"): WatchResponse {
  return create(WatchResponseSchema, {
    resumeToken,
    threadId,
    event: { case: "progress", value: {} },
  });
}

/** Resolves when the signal aborts (at once if it has). */
export function aborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) =>
    signal.addEventListener("abort", () => resolve(), { once: true }),
  );
}

/** What the real core does: events, then wait; return when the signal aborts. */
async function* oneEventThenWait(signal: AbortSignal): AsyncGenerator<WatchResponse> {
  yield progressEvent("1");
  await aborted(signal);
}
