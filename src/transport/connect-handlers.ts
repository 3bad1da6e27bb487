import * as http2 from "node:http2";
import { type DescMessage, type Message, toJsonString } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { Code, ConnectError, createContextKey } from "@connectrpc/connect";
import type { MemoryService } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import type { CallContext } from "../service/context.js";
import { endRpcSpan, startRpcSpan, withSpan } from "../tracing.js";
import { AbortableIterator, releaseIterator } from "./abortable-next.js";
import {
  type ActiveCall,
  admitCall,
  type CallKind,
  type CallRegistry,
  clientStopReason,
  deadlineExceeded,
  watchStalled,
} from "./call-registry.js";
import type { HttpRequest } from "./cleartext-http-listener.js";
import { type ErrorScope, toClientError, toConnectError } from "./error-table.js";
import { responseSerializer } from "./grpc-service-definition.js";
import { DEFAULT_MAX_MESSAGE_BYTES, messageTooLarge } from "./limits.js";
import { recordRpc } from "./rpc-metrics.js";
import type { HandlerDeps as Deps, ServerOptions } from "./server-options.js";

/**
 * The Connect server's handlers: one thin handler per RPC over the core,
 * the request gate (auth, rate limit, before the body is read), call
 * registration and the response-size check. connect-server.ts wires them
 * into the HTTP listener.
 */

/** One thin handler per RPC: authenticate, call the core, map errors through the table. */
export function memoryServiceImpl(options: ServerOptions): ServiceImpl<typeof MemoryService> {
  const { core } = options;
  return {
    add: (req, hctx) => unary(options, hctx, (ctx) => core.add(req, ctx)),
    get: (req, hctx) => unary(options, hctx, (ctx) => core.get(req, ctx)),
    clear: (req, hctx) => unary(options, hctx, (ctx) => core.clear(req, ctx)),
    listThreads: (req, hctx) => unary(options, hctx, (ctx) => core.listThreads(req, ctx)),
    rewind: (req, hctx) => unary(options, hctx, (ctx) => core.rewind(req, ctx)),
    fork: (req, hctx) => unary(options, hctx, (ctx) => core.fork(req, ctx)),
    watch: (req, hctx) => serverStreaming(options, hctx, (ctx) => core.watch(req, ctx)),
  };
}

async function unary<O>(
  deps: Deps,
  hctx: HandlerContext,
  invoke: (ctx: CallContext) => Promise<O>,
): Promise<O> {
  const startedAt = performance.now();
  const active = beginConnectCall(deps.calls, "unary", hctx);
  const span = startRpcSpan("connect", hctx.service.typeName, hctx.method.name, hctx.requestHeader);
  try {
    const response = await withSpan(span, () => invoke(callContext(deps, hctx, active)));
    checkResponseSize(deps, hctx, response as Message);
    recordRpc(deps.metrics, "connect", hctx.method.name, "ok", startedAt);
    endRpcSpan(span, "ok");
    return response;
  } catch (err) {
    const clientError = toClientError(err, errorScope(deps, hctx, active));
    recordRpc(deps.metrics, "connect", hctx.method.name, clientError.code, startedAt);
    endRpcSpan(span, clientError.code);
    throw toConnectError(clientError);
  } finally {
    active.end();
  }
}

const encoders = new Map<DescMessage, (message: Message) => Buffer>();

/**
 * Refuses a response over --max-message-bytes in words naming the flag, before
 * connect-es serializes it and refuses it in its own ("larger than configured
 * writeMaxBytes"). The binary size is cheap (the hand-written encoders of the
 * gRPC port); a JSON response is never smaller than its binary form, and its
 * exact size is computed only when it could be near the limit. One further
 * from it that still exceeds it is left to connect-es's own check.
 */
function checkResponseSize(deps: Deps, hctx: HandlerContext, response: Message): void {
  const limit = deps.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const output = hctx.method.output;
  let encode = encoders.get(output);
  if (encode === undefined) {
    encode = responseSerializer(hctx.method);
    encoders.set(output, encode);
  }
  const binary = encode(response).byteLength;
  if (!/json/i.test(hctx.requestHeader.get("content-type") ?? "")) {
    if (binary > limit) throw messageTooLarge("response", binary, limit);
    return;
  }
  // JSON is larger still, by how much not worth computing.
  if (binary > limit) throw messageTooLarge("response", undefined, limit);
  if (binary * 16 > limit) {
    const size = Buffer.byteLength(toJsonString(output, response));
    if (size > limit) throw messageTooLarge("response", size, limit);
  }
}

/**
 * Relays the core's events. connect-node pulls the next event only after the
 * previous one is written, so a slow client holds back the core instead of
 * filling memory. When the call's signal aborts, the stream ends with the
 * abort reason (CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE), never with OK or
 * INTERNAL, whether the core throws, returns, or does not react.
 *
 * A write the client does not take within `watchStallTimeoutMs` ends the
 * stream with RESOURCE_EXHAUSTED: no status can pass the unread bytes, so
 * the HTTP/2 stream is reset with ENHANCE_YOUR_CALM (which gRPC and Connect
 * clients read as RESOURCE_EXHAUSTED) and an HTTP/1.1 connection is reset;
 * either way the bytes queued for it are dropped.
 */
async function* serverStreaming<O>(
  deps: Deps,
  hctx: HandlerContext,
  open: (ctx: CallContext) => AsyncIterable<O>,
): AsyncGenerator<O> {
  const active = beginConnectCall(deps.calls, "stream", hctx);
  const { signal } = active;
  const span = startRpcSpan("connect", hctx.service.typeName, hctx.method.name, hctx.requestHeader);
  let events: AsyncIterator<O> | undefined;
  let pulls: AbortableIterator<O> | undefined;
  let writing = false;
  let stalled = false;
  const release = (): void => {
    pulls?.close();
    releaseIterator(events, (err) =>
      deps.logger.warn("watch iterator failed while closing", { method: methodName(hctx), err }),
    );
  };
  // connect-node may never resume a generator whose write cannot finish:
  // everything the call holds is let go here, not in `finally`.
  const onStall = (): void => {
    stalled = true;
    recordRpc(deps.metrics, "connect", hctx.method.name, "resource_exhausted", undefined);
    active.abort(watchStalled(deps.watchStallTimeoutMs));
    resetStalledRequest(hctx.values.get(rawRequestKey));
    release();
    active.end();
    // The finally below may never run (see above): the span ends here.
    endRpcSpan(span, "resource_exhausted");
  };
  // connect-node may also end the generator with return(): no code seen, the client left.
  let code = "cancelled";
  try {
    const opened = open(callContext(deps, hctx, active))[Symbol.asyncIterator]();
    events = opened;
    pulls = new AbortableIterator(opened, signal);
    const pull = pulls;
    for (;;) {
      // The core's generator runs its steps in the RPC's span (its store calls are children).
      const next = await withSpan(span, () => pull.next());
      if (next === undefined || next.done === true) break;
      writing = true;
      const stallTimer = setTimeout(onStall, deps.watchStallTimeoutMs);
      try {
        yield next.value;
      } finally {
        clearTimeout(stallTimer);
      }
      writing = false;
    }
    if (signal.aborted) throw signal.reason;
    recordRpc(deps.metrics, "connect", hctx.method.name, "ok", undefined);
    code = "ok";
  } catch (err) {
    // Ended by onStall, which has recorded it; whatever connect-node threw in, the client's answer is the stall.
    if (stalled) throw toConnectError(toClientError(signal.reason, errorScope(deps, hctx, active)));
    // connect-node throws its own write failures (the client went away) into
    // the generator at the yield: not the core's errors, so not mapped or
    // logged as internal.
    if (writing) {
      recordRpc(deps.metrics, "connect", hctx.method.name, "cancelled", undefined);
      throw err;
    }
    const clientError = toClientError(err, errorScope(deps, hctx, active));
    recordRpc(deps.metrics, "connect", hctx.method.name, clientError.code, undefined);
    code = clientError.code;
    throw toConnectError(clientError);
  } finally {
    if (!stalled) endRpcSpan(span, code);
    active.end();
    release();
  }
}

/** The Node request of a call; set for every call by the adapter's `contextValues`. */
export const rawRequestKey = createContextKey<HttpRequest | undefined>(undefined, {
  description: "raw Node request",
});

/** Drops a response whose client does not read (see serverStreaming). */
function resetStalledRequest(req: HttpRequest | undefined): void {
  if (req === undefined) return;
  if ("stream" in req) {
    req.stream.close(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
    return;
  }
  const socket = req.socket;
  try {
    // RST: the kernel drops the unread bytes instead of keeping them for a FIN.
    socket.resetAndDestroy();
  } catch {
    socket.destroy(); // a TLS socket has no TCP handle of its own to reset
  }
}

/**
 * Tracks a call and ties its signal to Connect's: connect-node aborts
 * `hctx.signal` when the client goes away (reason: a ConnectError or none) or
 * at the deadline (a DeadlineExceeded ConnectError). Shutdown aborts the
 * tracked signal directly, which Connect's own shutdownSignal could not do
 * without also cutting unary calls short.
 */
function beginConnectCall(calls: CallRegistry, kind: CallKind, hctx: HandlerContext): ActiveCall {
  const timeoutMs = hctx.timeoutMs();
  const active = calls.begin(kind, timeoutMs === undefined ? undefined : Date.now() + timeoutMs);
  const onAbort = (): void => {
    const reason: unknown = hctx.signal.reason;
    const timedOut = reason instanceof ConnectError && reason.code === Code.DeadlineExceeded;
    active.abort(timedOut ? deadlineExceeded() : clientStopReason(active.deadline, active.begunAt));
  };
  if (hctx.signal.aborted) onAbort();
  else hctx.signal.addEventListener("abort", onAbort, { once: true });
  return {
    get signal() {
      return active.signal;
    },
    deadline: active.deadline,
    begunAt: active.begunAt,
    abort: (reason) => active.abort(reason),
    end() {
      hctx.signal.removeEventListener("abort", onAbort);
      active.end();
    },
  };
}

// The caller's namespace, set by the request gate once the call is admitted.
const NAMESPACE = createContextKey<string | undefined>(undefined, { description: "namespace" });

/**
 * connect-es' request gate, run on the headers before the body is read: the
 * token is checked and the namespace's rate taken (admitCall), so a caller
 * without a good token, or over its rate, never gets its body decoded.
 */
export function admit(deps: Deps, hctx: HandlerContext): void {
  try {
    hctx.values.set(
      NAMESPACE,
      admitCall(deps, hctx.requestHeader.get("authorization") ?? undefined),
    );
  } catch (err) {
    const clientError = toClientError(err, { method: methodName(hctx), logger: deps.logger });
    recordRpc(deps.metrics, "connect", hctx.method.name, clientError.code, undefined);
    throw toConnectError(clientError);
  }
}

/** The call's context; the namespace comes from the request gate. */
function callContext(deps: Deps, hctx: HandlerContext, active: ActiveCall): CallContext {
  const namespace =
    hctx.values.get(NAMESPACE) ??
    admitCall(deps, hctx.requestHeader.get("authorization") ?? undefined);
  // A getter: reading the signal is what creates it (call-registry.ts).
  return {
    namespace,
    get signal() {
      return active.signal;
    },
    deadline: active.deadline,
  };
}

function errorScope(deps: Deps, hctx: HandlerContext, active: ActiveCall): ErrorScope {
  return {
    method: methodName(hctx),
    get signal() {
      return active.signal;
    },
    logger: deps.logger,
  };
}

function methodName(hctx: HandlerContext): string {
  return `${hctx.service.typeName}/${hctx.method.name}`;
}
