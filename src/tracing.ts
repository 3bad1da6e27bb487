import {
  type Attributes,
  context,
  propagation,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TextMapGetter,
  type Tracer,
  trace,
} from "@opentelemetry/api";
import type { Summarizer } from "./summarizer/summarizer.js";

/**
 * OpenTelemetry tracing: one SERVER span per RPC on both ports, continuing
 * the caller's W3C `traceparent`, with child spans for store calls, summary
 * folds and summariser model calls; the model call carries `traceparent` on.
 *
 * Off unless the standard OTEL_* environment asks for traces (see
 * `tracingRequested`); then the OpenTelemetry Node SDK exports them as the
 * environment says (OTLP over HTTP/protobuf by default, `http/json` or
 * `grpc` by OTEL_EXPORTER_OTLP_TRACES_PROTOCOL). Off, every helper here is
 * one check of a module variable: no span objects, no context switches.
 *
 * Attributes name methods, codes, stores and summarisers. Namespaces and
 * thread ids only with `--trace-thread-ids`; message contents and tokens never.
 */

const TRACER_NAME = "windlass-memory";

/** The tracer while tracing is on; undefined is the fast path. */
let tracer: Tracer | undefined;
let threadIds = false;

export interface Tracing {
  readonly enabled: boolean;
  /** Flushes the spans still buffered and stops the SDK. */
  shutdown(): Promise<void>;
}

const OFF: Tracing = { enabled: false, shutdown: async () => {} };

/** Whether the environment asks for traces: an OTLP endpoint, or a traces exporter other than none. */
export function tracingRequested(env: NodeJS.ProcessEnv): boolean {
  if ((env.OTEL_SDK_DISABLED ?? "").trim().toLowerCase() === "true") return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? "").trim().toLowerCase();
  if (exporters === "none") return false;
  return (
    exporters !== "" ||
    (env.OTEL_EXPORTER_OTLP_ENDPOINT ?? "") !== "" ||
    (env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? "") !== ""
  );
}

/**
 * Starts the OpenTelemetry Node SDK when the environment asks for traces.
 * Only traces: no OTel metrics (Prometheus has /metrics) and no OTel logs.
 */
export async function startTracing(
  env: NodeJS.ProcessEnv,
  options: { threadIds: boolean },
): Promise<Tracing> {
  if (!tracingRequested(env)) return OFF;
  // Loaded only when on: the SDK and its exporters are a lot of code.
  const { NodeSDK } = await import("@opentelemetry/sdk-node");
  const sdk = new NodeSDK({
    serviceName: env.OTEL_SERVICE_NAME ?? TRACER_NAME,
    instrumentations: [],
    metricReaders: [],
    logRecordProcessors: [],
  });
  sdk.start();
  tracer = trace.getTracer(TRACER_NAME);
  threadIds = options.threadIds;
  let stopping: Promise<void> | undefined;
  return {
    enabled: true,
    shutdown() {
      stopping ??= sdk.shutdown().finally(() => {
        tracer = undefined;
      });
      return stopping;
    },
  };
}

/** Whether spans are being made (for wiring decorators only when they matter). */
export function tracingEnabled(): boolean {
  return tracer !== undefined;
}

/** gRPC metadata: `get` returns every value of a key. */
interface MetadataLike {
  get(key: string): unknown[];
  getMap(): Record<string, unknown>;
}

const metadataGetter: TextMapGetter<MetadataLike> = {
  get(carrier, key) {
    const values = carrier.get(key).filter((v): v is string => typeof v === "string");
    return values.length === 0 ? undefined : values;
  },
  keys: (carrier) => Object.keys(carrier.getMap()),
};

const headersGetter: TextMapGetter<Headers> = {
  get: (carrier, key) => carrier.get(key) ?? undefined,
  keys: (carrier) => [...carrier.keys()],
};

/**
 * Starts the SERVER span of an RPC, child of the caller's `traceparent` in
 * gRPC metadata or HTTP headers. Undefined when tracing is off.
 */
export function startRpcSpan(
  transport: "grpc" | "connect",
  service: string,
  method: string,
  carrier: MetadataLike | Headers,
): Span | undefined {
  if (tracer === undefined) return undefined;
  const parent =
    carrier instanceof Headers
      ? propagation.extract(ROOT_CONTEXT, carrier, headersGetter)
      : propagation.extract(ROOT_CONTEXT, carrier, metadataGetter);
  return tracer.startSpan(
    `${service}/${method}`,
    {
      kind: SpanKind.SERVER,
      attributes: {
        "rpc.system": transport === "grpc" ? "grpc" : "connect_rpc",
        "rpc.service": service,
        "rpc.method": method,
        "windlass.transport": transport,
      },
    },
    parent,
  );
}

/** The span of one RPC; undefined while tracing is off. */
export type RpcSpan = Span | undefined;

/** Runs `fn` with `span` as the active span (its children's parent); just `fn()` without one. */
export function withSpan<T>(span: Span | undefined, fn: () => T): T {
  if (span === undefined) return fn();
  return context.with(trace.setSpan(context.active(), span), fn);
}

/** Ends an RPC's span with its gRPC code ("ok", "invalid_argument", …). */
export function endRpcSpan(span: Span | undefined, code: string): void {
  if (span === undefined) return;
  span.setAttribute("rpc.grpc.status_code_name", code.toUpperCase());
  if (code !== "ok") span.setStatus({ code: SpanStatusCode.ERROR, message: code });
  span.end();
}

/**
 * Runs `fn` in a new INTERNAL or CLIENT child span of the active span; the
 * span ends when the promise settles and records a failure. Without tracing,
 * `fn()`.
 */
export function inChildSpan<T>(
  name: string,
  kind: "internal" | "client",
  attributes: Attributes,
  fn: () => Promise<T>,
): Promise<T> {
  const t = tracer;
  if (t === undefined) return fn();
  return t.startActiveSpan(
    name,
    { kind: kind === "client" ? SpanKind.CLIENT : SpanKind.INTERNAL, attributes },
    async (span) => {
      try {
        return await fn();
      } catch (err) {
        span.setStatus({
          code: SpanStatusCode.ERROR,
          message: err instanceof Error ? err.name : "error",
        });
        throw err;
      } finally {
        span.end();
      }
    },
  );
}

/** Attributes naming the thread, only when --trace-thread-ids allows it. */
export function threadAttributes(namespace: string, threadId: string): Attributes {
  return threadIds ? { "windlass.namespace": namespace, "windlass.thread_id": threadId } : {};
}

/** Runs one summary fold in a span. */
export function inFoldSpan<T>(
  namespace: string,
  threadId: string,
  fn: () => Promise<T>,
): Promise<T> {
  if (tracer === undefined) return fn();
  return inChildSpan("windlass.fold", "internal", threadAttributes(namespace, threadId), fn);
}

/**
 * HTTP headers with the active span's `traceparent` (and `tracestate`) added,
 * for an outgoing call; the same object when tracing is off.
 */
export function withTraceHeaders(headers: Record<string, string>): Record<string, string> {
  if (tracer === undefined) return headers;
  const span = trace.getSpanContext(context.active());
  if (span === undefined || !trace.isSpanContextValid(span)) return headers;
  // W3C trace context only, written here rather than by the configured
  // propagators: those carry `baggage` too, which callers set, and a
  // caller's data must not travel on to a third-party model endpoint.
  const out = {
    ...headers,
    traceparent: `00-${span.traceId}-${span.spanId}-${(span.traceFlags & 0xff).toString(16).padStart(2, "0")}`,
  };
  const state = span.traceState?.serialize();
  return state === undefined || state === "" ? out : { ...out, tracestate: state };
}

/**
 * A summariser whose calls run in a span (`summarize NAME`; CLIENT for a
 * model behind HTTP), so the model request's `traceparent` names it.
 */
export function tracedSummarizer(summarizer: Summarizer, remote: boolean): Summarizer {
  const attributes = { "windlass.summarizer": summarizer.name };
  return {
    name: summarizer.name,
    summarize: (input, signal) =>
      inChildSpan(
        `summarize ${summarizer.name}`,
        remote ? "client" : "internal",
        { ...attributes, "windlass.fold_messages": input.messages.length },
        () => summarizer.summarize(input, signal),
      ),
  };
}
