import type { ErrorCode } from "../core/errors.js";
import type { ServerMetrics } from "../metrics.js";

export type TransportName = "grpc" | "connect";

/**
 * Records one finished RPC: its count by gRPC code, and, for unary calls,
 * how long it took (a stream's length says nothing about the server).
 */
export function recordRpc(
  metrics: ServerMetrics | undefined,
  transport: TransportName,
  method: string,
  code: ErrorCode | "ok",
  startedAt: number | undefined,
): void {
  if (metrics === undefined) return;
  const labels = labelsOf(transport, method, code);
  metrics.rpcs.inc(labels.rpc);
  if (startedAt !== undefined) {
    metrics.rpcSeconds.observe((performance.now() - startedAt) / 1000, labels.duration);
  }
}

/**
 * recordRpc for one method of one transport, with the metric series of each
 * code looked up once: a unary call's handler records through this on every
 * call.
 */
export class RpcRecorder {
  readonly #metrics: ServerMetrics | undefined;
  readonly #transport: TransportName;
  readonly #method: string;
  readonly #byCode = new Map<
    string,
    { rpcs: { inc(): void }; seconds: { observe(value: number): void } }
  >();

  constructor(metrics: ServerMetrics | undefined, transport: TransportName, method: string) {
    this.#metrics = metrics;
    this.#transport = transport;
    this.#method = method;
  }

  record(code: ErrorCode | "ok", startedAt: number | undefined): void {
    const metrics = this.#metrics;
    if (metrics === undefined) return;
    let series = this.#byCode.get(code);
    if (series === undefined) {
      const labels = labelsOf(this.#transport, this.#method, code);
      series = {
        rpcs: metrics.rpcs.child(labels.rpc),
        seconds: metrics.rpcSeconds.child(labels.duration),
      };
      this.#byCode.set(code, series);
    }
    series.rpcs.inc();
    if (startedAt !== undefined) series.seconds.observe((performance.now() - startedAt) / 1000);
  }
}

// The same label objects for the same call kind, so their text is built once (metrics.ts).
const labelCache = new Map<
  string,
  { rpc: Record<string, string>; duration: Record<string, string> }
>();

function labelsOf(transport: TransportName, method: string, code: string) {
  const key = `${transport} ${method} ${code}`;
  let labels = labelCache.get(key);
  if (labels === undefined) {
    labels = {
      rpc: { transport, method, code: code.toUpperCase() },
      duration: { transport, method },
    };
    labelCache.set(key, labels);
  }
  return labels;
}
