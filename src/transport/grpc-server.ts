import { once } from "node:events";
import * as http2 from "node:http2";
import type {
  DescMessage,
  DescMethodServerStreaming,
  DescMethodUnary,
  MessageShape,
} from "@bufbuild/protobuf";
import {
  type handleServerStreamingCall,
  type handleUnaryCall,
  type Metadata,
  Server,
  ServerCredentials,
  type ServerUnaryCall,
  type ServerWritableStream,
  type sendUnaryData,
  type UntypedHandleCall,
} from "@grpc/grpc-js";
import { MemoryService } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import type { CallContext } from "../service/context.js";
import { endRpcSpan, type RpcSpan, startRpcSpan, withSpan } from "../tracing.js";
import { AbortableIterator, releaseIterator } from "./abortable-next.js";
import { type ActiveCall, admitCall, watchStalled } from "./call-registry.js";
import { type ErrorScope, toClientError, toGrpcStatus } from "./error-table.js";
import { grpcAuthGate } from "./grpc-auth-gate.js";
import { createGrpcHealth } from "./grpc-health.js";
import { type GrpcListener, listenForGrpc } from "./grpc-listener.js";
import { createReflectionService } from "./grpc-reflection.js";
import { grpcServerDefinition, responseSerializer } from "./grpc-service-definition.js";
import { DEFAULT_MAX_MESSAGE_BYTES, MAX_CONCURRENT_STREAMS, messageTooLarge } from "./limits.js";
import { decodeBinaryRequest } from "./request-decoding.js";
import { RpcRecorder, recordRpc } from "./rpc-metrics.js";
import type { HandlerDeps as Deps, ServerOptions } from "./server-options.js";
import { pemBuffer, type TlsOptions } from "./tls.js";

/**
 * The gRPC server: @grpc/grpc-js serving MemoryService over the
 * transport-free core, plus grpc.health.v1.Health and server reflection.
 * grpc-js is the hot path (about 5x less CPU per call than connect-node for
 * gRPC; README "Transports and operations"), so gRPC clients come here and the Connect
 * server covers Connect, gRPC-Web and JSON.
 */

export interface GrpcServer {
  /** The port bound. */
  readonly port: number;
  /** Health status of "" and of "windlass.memory.v1.MemoryService". */
  setServing(serving: boolean): void;
  /**
   * Stops accepting connections and calls (GOAWAY), lets calls in flight
   * finish, and resolves when every connection is closed.
   */
  close(): Promise<void>;
  /** Cancels every call and closes every connection now. */
  forceClose(): void;
}

/** The health service names this server reports: the whole server and MemoryService. */
export const HEALTH_SERVICE_NAMES = ["", MemoryService.typeName] as const;

/** Starts the gRPC server and resolves once it is bound. */
export async function startGrpcServer(options: ServerOptions): Promise<GrpcServer> {
  const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const limits = options.connectionLimits;
  const server = new Server({
    "grpc.max_receive_message_length": maxMessageBytes,
    "grpc.max_send_message_length": maxMessageBytes,
    // channelz (grpc-js's call tracing) is not served here and costs CPU on every call.
    "grpc.enable_channelz": 0,
    // Streams at once per connection (HTTP/2 SETTINGS); the Connect port sets the same.
    "grpc.max_concurrent_streams": MAX_CONCURRENT_STREAMS,
    // GOAWAY to a connection without calls; pings find peers that are gone.
    "grpc.max_connection_idle_ms": limits.maxConnectionIdleMs,
    "grpc.keepalive_time_ms": limits.keepaliveTimeMs,
    "grpc.keepalive_timeout_ms": limits.keepaliveTimeoutMs,
    // With auth on, the token is checked before the request body is read.
    interceptors: options.authenticator.required ? [grpcAuthGate(options, MemoryService)] : [],
  });
  const health = createGrpcHealth(HEALTH_SERVICE_NAMES, options.calls, options.logger);
  health.addToServer(server);
  createReflectionService().addToServer(server);
  server.addService(grpcServerDefinition(MemoryService), memoryServiceHandlers(options));

  // Our own listener, so connections are capped and must speak first (grpc-listener.ts).
  const injector = server.createConnectionInjector(credentials(options.tls));
  let listener: GrpcListener;
  try {
    listener = await listenForGrpc(injector, options.host, options.port, limits);
  } catch (err) {
    injector.destroy();
    throw err;
  }
  let closing: Promise<void> | undefined;
  return {
    port: listener.port,
    setServing(serving) {
      health.setServing(serving);
    },
    close() {
      listener.stopAccepting();
      // grpc-js calls back as soon as it has asked every session to close
      // (Node's Http2Server.close has already marked them closed), while
      // their streams may still be finishing: the port is closed when its
      // sockets are. A socket that never became a session (a TLS handshake
      // under way) is left to the first-byte timeout or to forceClose.
      closing ??= new Promise<void>((resolve) => server.tryShutdown(() => resolve())).then(() =>
        listener.allClosed(),
      );
      return closing;
    },
    forceClose() {
      server.forceShutdown();
      listener.destroyAll();
    },
  };
}

/**
 * One thin handler per RPC: authenticate, call the core, map errors through
 * the table, respond. `satisfies` keeps the keys in step with the descriptor.
 */
function memoryServiceHandlers(options: ServerOptions) {
  const { core } = options;
  const methods = MemoryService.method;
  return {
    add: unary(options, methods.add, (req, ctx) => core.add(req, ctx)),
    get: unary(options, methods.get, (req, ctx) => core.get(req, ctx)),
    clear: unary(options, methods.clear, (req, ctx) => core.clear(req, ctx)),
    listThreads: unary(options, methods.listThreads, (req, ctx) => core.listThreads(req, ctx)),
    rewind: unary(options, methods.rewind, (req, ctx) => core.rewind(req, ctx)),
    fork: unary(options, methods.fork, (req, ctx) => core.fork(req, ctx)),
    watch: serverStreaming(options, methods.watch, (req, ctx) => core.watch(req, ctx)),
  } satisfies Record<keyof typeof methods, UntypedHandleCall>;
}

function unary<I extends DescMessage, O extends DescMessage>(
  deps: Deps,
  method: DescMethodUnary<I, O>,
  invoke: (request: MessageShape<I>, ctx: CallContext) => Promise<MessageShape<O>>,
): handleUnaryCall<Buffer, MessageShape<O>> {
  const unaryMethod: UnaryMethod<I, O> = {
    fullName: `${method.parent.typeName}/${method.name}`,
    service: method.parent.typeName,
    name: method.name,
    input: method.input,
    invoke,
    serialize: responseSerializer(method),
    maxResponseBytes: deps.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES,
    rpcs: new RpcRecorder(deps.metrics, "grpc", method.name),
  };
  return (call, callback) => {
    void respondUnary(deps, unaryMethod, call, callback);
  };
}

interface UnaryMethod<I extends DescMessage, O extends DescMessage> {
  readonly fullName: string;
  readonly service: string;
  readonly name: string;
  readonly input: I;
  readonly invoke: (request: MessageShape<I>, ctx: CallContext) => Promise<MessageShape<O>>;
  /** The response's wire form (the same encoder grpc-js would call). */
  readonly serialize: (response: MessageShape<O>) => Buffer;
  readonly maxResponseBytes: number;
  readonly rpcs: RpcRecorder;
}

/**
 * One unary call. This is the hot path: it makes the call's registry entry,
 * its context and one promise, and nothing else unless tracing is on or the
 * call fails (the error scope is built only then).
 */
async function respondUnary<I extends DescMessage, O extends DescMessage>(
  deps: Deps,
  method: UnaryMethod<I, O>,
  call: ServerUnaryCall<Buffer, MessageShape<O>>,
  callback: sendUnaryData<MessageShape<O>>,
): Promise<void> {
  const startedAt = performance.now();
  const active = deps.calls.begin("unary", deadlineOf(call), call);
  const span = startRpcSpan("grpc", method.service, method.name, call.metadata);
  try {
    // Authenticate first: a caller without a good token never gets its body decoded.
    const ctx = callContext(deps, call.metadata, active);
    const response =
      span === undefined
        ? await method.invoke(decodeBinaryRequest(method.input, call.request), ctx)
        : await withSpan(span, () =>
            method.invoke(decodeBinaryRequest(method.input, call.request), ctx),
          );
    // Encoded here rather than by grpc-js, so a response over the limit is
    // refused in words that name the flag (grpc-js: "Sent message larger than max").
    const bytes = method.serialize(response);
    if (bytes.byteLength > method.maxResponseBytes) {
      throw messageTooLarge("response", bytes.byteLength, method.maxResponseBytes);
    }
    // The definition's serializer passes a Buffer through unchanged.
    callback(null, bytes as unknown as MessageShape<O>);
    method.rpcs.record("ok", startedAt);
    endRpcSpan(span, "ok");
  } catch (err) {
    const scope: ErrorScope = {
      method: method.fullName,
      get signal() {
        return active.signal;
      },
      logger: deps.logger,
    };
    const clientError = toClientError(err, scope);
    callback(toGrpcStatus(clientError));
    method.rpcs.record(clientError.code, startedAt);
    endRpcSpan(span, clientError.code);
  } finally {
    active.end();
  }
}

function serverStreaming<I extends DescMessage, O extends DescMessage>(
  deps: Deps,
  method: DescMethodServerStreaming<I, O>,
  open: (request: MessageShape<I>, ctx: CallContext) => AsyncIterable<MessageShape<O>>,
): handleServerStreamingCall<Buffer, MessageShape<O>> {
  // pump calls this after callContext has checked the token, inside its error
  // handling: a caller without a good token never gets its body decoded.
  const decodeAndOpen = (bytes: Buffer, ctx: CallContext) =>
    open(decodeBinaryRequest(method.input, bytes), ctx);
  return (call) => {
    const span = startRpcSpan("grpc", method.parent.typeName, method.name, call.metadata);
    void withSpan(span, () => pump(deps, method.name, call, decodeAndOpen, span));
  };
}

/**
 * Copies the core's events to the call. Writes respect backpressure: when
 * grpc-js's buffer is full (the client or the network is slow) the next event
 * is pulled only after 'drain', so a slow client holds at most the stream's
 * buffer plus the HTTP/2 window here; keeping up is the core's job (it ends a
 * watcher that falls too far behind with RESOURCE_EXHAUSTED). Cancellation,
 * deadline and shutdown abort the wait and release the core's iterator.
 *
 * No 'drain' within `watchStallTimeoutMs` (the client reads nothing) ends
 * the stream with RESOURCE_EXHAUSTED: the status is queued, and since it
 * cannot pass the unread bytes the HTTP/2 stream is also reset with
 * ENHANCE_YOUR_CALM, which gRPC clients read as RESOURCE_EXHAUSTED too, and
 * which drops what was queued for it.
 */
async function pump<O extends DescMessage>(
  deps: Deps,
  name: string,
  call: ServerWritableStream<Buffer, MessageShape<O>>,
  open: (request: Buffer, ctx: CallContext) => AsyncIterable<MessageShape<O>>,
  span: RpcSpan,
): Promise<void> {
  const active = deps.calls.begin("stream", deadlineOf(call), call);
  const { signal } = active;
  const scope: ErrorScope = {
    method: `${MemoryService.typeName}/${name}`,
    signal,
    logger: deps.logger,
  };
  let events: AsyncIterator<MessageShape<O>> | undefined;
  let pulls: AbortableIterator<MessageShape<O>> | undefined;
  let stalled = false;
  try {
    events = open(call.request, callContext(deps, call.metadata, active))[Symbol.asyncIterator]();
    pulls = new AbortableIterator(events, signal);
    for (;;) {
      const next = await pulls.next();
      if (next === undefined || next.done === true) break;
      if (!call.write(next.value)) {
        stalled = !(await drainedWithin(call, signal, deps.watchStallTimeoutMs));
        if (stalled) throw watchStalled(deps.watchStallTimeoutMs);
      }
    }
    // A core may simply return when the signal aborts; the client must
    // still learn why the stream ended.
    if (signal.aborted) throw signal.reason;
    call.end();
    recordRpc(deps.metrics, "grpc", name, "ok", undefined);
    endRpcSpan(span, "ok");
  } catch (err) {
    const clientError = toClientError(err, scope);
    recordRpc(deps.metrics, "grpc", name, clientError.code, undefined);
    endRpcSpan(span, clientError.code);
    // A cancelled call (client gone, or deadline already reported by
    // grpc-js) has nobody to tell; its write errors are no news either.
    if (!call.cancelled) call.emit("error", toGrpcStatus(clientError));
    if (stalled) resetHttp2Stream(call);
  } finally {
    pulls?.close();
    active.end();
    releaseIterator(events, (err) =>
      deps.logger.warn("watch iterator failed while closing", { method: name, err }),
    );
  }
}

/** Whether 'drain' came within `ms`; rejects when the call's signal aborts first. */
async function drainedWithin(
  call: ServerWritableStream<unknown, unknown>,
  signal: AbortSignal,
  ms: number,
): Promise<boolean> {
  const stall = AbortSignal.timeout(ms);
  try {
    await once(call, "drain", { signal: AbortSignal.any([signal, stall]) });
    return true;
  } catch (err) {
    if (stall.aborted && !signal.aborted) return false;
    throw err;
  }
}

/**
 * RST_STREAM ENHANCE_YOUR_CALM on the call's HTTP/2 stream. grpc-js keeps the
 * stream private (ServerWritableStreamImpl.call, then .nextCall through any
 * interceptors, then .stream); if a later grpc-js hides it elsewhere, the
 * queued status still ends the call once the client reads, and the
 * limits tests fail.
 */
function resetHttp2Stream(call: object): void {
  let node: unknown = (call as { call?: unknown }).call;
  for (let depth = 0; depth < 8 && typeof node === "object" && node !== null; depth++) {
    const stream: unknown = (node as { stream?: unknown }).stream;
    if (isClosableHttp2Stream(stream)) {
      if (!stream.closed) stream.close(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
      return;
    }
    node = (node as { nextCall?: unknown }).nextCall;
  }
}

function isClosableHttp2Stream(
  value: unknown,
): value is { readonly closed: boolean; close(code: number): void } {
  return (
    typeof value === "object" &&
    value !== null &&
    "rstCode" in value &&
    typeof (value as { close?: unknown }).close === "function"
  );
}

/**
 * What of a grpc-js call the registry watches: 'cancelled' fires when the
 * client cancels, and also when grpc-js ends the call at its deadline, so a
 * cancel at the deadline counts as the deadline (clientStopReason).
 */
type SurfaceCall = Pick<
  ServerUnaryCall<unknown, unknown>,
  "cancelled" | "getDeadline" | "on" | "off"
>;

/**
 * Throws MemoryError("unauthenticated") when auth is on and the token is not
 * good, and "resource_exhausted" when the namespace is over its rate.
 */
function callContext(deps: Deps, metadata: Metadata, active: ActiveCall): CallContext {
  const [authorization] = metadata.get("authorization");
  const namespace = admitCall(deps, typeof authorization === "string" ? authorization : undefined);
  return new GrpcCallContext(namespace, active);
}

/**
 * A call's context. `signal` is a getter, as reading the signal is what
 * creates it (call-registry.ts); a class, because an object literal with a
 * getter costs more to make, once per call.
 */
class GrpcCallContext implements CallContext {
  readonly namespace: string;
  readonly deadline: number | undefined;
  readonly #active: ActiveCall;

  constructor(namespace: string, active: ActiveCall) {
    this.namespace = namespace;
    this.deadline = active.deadline;
    this.#active = active;
  }

  get signal(): AbortSignal {
    return this.#active.signal;
  }
}

function deadlineOf(call: SurfaceCall): number | undefined {
  const deadline = call.getDeadline();
  const ms = deadline instanceof Date ? deadline.getTime() : deadline;
  return Number.isFinite(ms) ? ms : undefined;
}

function credentials(tls: TlsOptions | undefined): ServerCredentials {
  if (tls === undefined) return ServerCredentials.createInsecure();
  const clientCa = tls.clientCa === undefined ? null : pemBuffer(tls.clientCa);
  return ServerCredentials.createSsl(
    clientCa,
    [{ cert_chain: pemBuffer(tls.cert), private_key: pemBuffer(tls.key) }],
    clientCa !== null,
  );
}
