import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "../logger.js";
import type { ServerMetrics } from "../metrics.js";
import type { MemoryServiceCore } from "../service/context.js";
import { RateLimiter } from "../service/rate-limit.js";
import type { StoreHealthState } from "../service/store-health.js";
import { createAuthenticator } from "./auth.js";
import { CallRegistry } from "./call-registry.js";
import { type ConnectServer, startConnectServer } from "./connect-server.js";
import { type GrpcServer, startGrpcServer } from "./grpc-server.js";
import type { HttpProbes } from "./http-front.js";
import {
  isLoopbackHost,
  type MetricsServer,
  metricsEndpoint,
  startMetricsServer,
} from "./metrics-endpoint.js";
import {
  type ConnectionLimits,
  DEFAULT_CONNECTION_LIMITS,
  DEFAULT_WATCH_STALL_TIMEOUT_MS,
} from "./server-options.js";
import type { TlsOptions } from "./tls.js";

/**
 * Both servers over one core, started and stopped together: the gRPC server
 * (grpc-js, with health and reflection) and the Connect server (Connect,
 * gRPC-Web and gRPC over HTTP/1.1 and HTTP/2). They share auth, limits and
 * the registry of calls in flight, so shutdown treats every call alike.
 */
export interface StartServersOptions {
  readonly core: MemoryServiceCore;
  /** Interface to bind, e.g. "0.0.0.0", "::" or "127.0.0.1". */
  readonly host: string;
  /** 0 picks a free port; the bound one is in `RunningServers.grpcPort`. */
  readonly grpcPort: number;
  /** 0 picks a free port; the bound one is in `RunningServers.httpPort`. */
  readonly httpPort: number;
  /** Largest request or response message, in bytes. Default 4 MiB. */
  readonly maxMessageBytes?: number;
  /** Bearer token -> namespace. Absent or empty: no auth, everything in namespace "". */
  readonly auth?: ReadonlyMap<string, string>;
  readonly logger: Logger;
  /** RPC counts and latencies; GET /metrics renders them (see metrics-endpoint.ts). */
  readonly metrics?: ServerMetrics;
  /** Serve GET /metrics on this port (0: a free one) instead of the HTTP port. */
  readonly metricsPort?: number;
  /** GET /metrics requires `authorization: Bearer <metricsToken>`. */
  readonly metricsToken?: string;
  /** Requests per second per namespace; absent or rate 0: no limit. */
  readonly rateLimit?: { readonly ratePerSecond: number; readonly burst: number };
  /** Per-port connection limits; each absent one takes its default. */
  readonly connectionLimits?: Partial<ConnectionLimits>;
  /** A Watch whose client reads nothing for this long ends with RESOURCE_EXHAUSTED. Default 30 s. */
  readonly watchStallTimeoutMs?: number;
  /** Serve TLS on both ports (optionally requiring client certificates). */
  readonly tls?: TlsOptions;
  /** Browser origins allowed to call the Connect port (CORS); `*` for any. Default none. */
  readonly corsOrigins?: readonly string[];
  /** Connect JSON: drop unknown keys instead of refusing them. Default false. */
  readonly jsonIgnoreUnknownFields?: boolean;
  /**
   * How long shutdown keeps serving after health turns NOT_SERVING, so that
   * load balancers and Kubernetes probes stop routing here before the
   * listeners close. Default 0.
   */
  readonly drainDelayMs?: number;
  /**
   * The store's health (service/store-health.ts): gRPC health and GET
   * /readyz follow it. Absent: the store is taken to serve always.
   */
  readonly storeHealth?: StoreHealthSource;
  /** Aborting this signal starts `shutdown(shutdownGraceMs)` (e.g. on SIGTERM). */
  readonly shutdownSignal?: AbortSignal;
  /** Grace period used when `shutdownSignal` aborts. Default 10 s. */
  readonly shutdownGraceMs?: number;
}

/** What the servers read of the store health monitor. */
export interface StoreHealthSource {
  readonly state: StoreHealthState;
  /** Called when `serving` changes; returns the unsubscribe. */
  subscribe(listener: (state: StoreHealthState) => void): () => void;
}

export interface RunningServers {
  /** Port of the gRPC server (health and reflection included). */
  readonly grpcPort: number;
  /** Port of the Connect server (Connect, gRPC-Web, gRPC; HTTP/1.1 and HTTP/2). */
  readonly httpPort: number;
  /** Port of GET /metrics when it has its own (`metricsPort`). */
  readonly metricsPort: number | undefined;
  /** Resolves when shutdown has finished, however it was started. */
  readonly closed: Promise<void>;
  /**
   * Graceful shutdown: health NOT_SERVING for good (GET /healthz and
   * /readyz 503), wait `drainDelayMs`, stop accepting, end Watch streams
   * with UNAVAILABLE, let unary calls in flight finish; after `graceMs`,
   * abort what is left and close every connection. Idempotent:
   * later calls return the first call's promise.
   */
  shutdown(graceMs: number): Promise<void>;
}

const DEFAULT_SHUTDOWN_GRACE_MS = 10_000;
// Between aborting the calls left after the grace period and cutting their
// connections: long enough for handlers of a core that honours its signal
// to send UNAVAILABLE instead of leaving clients with a reset stream.
const ABORTED_CALLS_FLUSH_MS = 100;
// After a forced close, connections are gone within a few event-loop turns;
// this only bounds the wait if something misbehaves.
const FORCED_CLOSE_WAIT_MS = 1_000;

/** Starts both servers; resolves once both are bound. */
export async function startServers(options: StartServersOptions): Promise<RunningServers> {
  const { logger } = options;
  const calls = new CallRegistry();
  const shared = sharedOptions(options, calls);
  // Shutdown wins over the store: once it starts, nothing turns health back to SERVING.
  const lifecycle = { shutdownStarted: false };
  const storeHealth = options.storeHealth;
  const { grpc, connect, metricsServer } = await startListeners(
    options,
    shared,
    httpProbes(lifecycle, storeHealth),
  );
  const followStore = (state: StoreHealthState): void => {
    if (!lifecycle.shutdownStarted) grpc.setServing(state.serving);
  };
  const unsubscribe = storeHealth?.subscribe(followStore);
  if (storeHealth !== undefined) followStore(storeHealth.state);
  logger.info("servers listening", {
    host: options.host,
    grpcPort: grpc.port,
    httpPort: connect.port,
    metricsPort: metricsServer?.port,
    auth: options.auth !== undefined && options.auth.size > 0,
    tls: options.tls !== undefined,
  });

  let shuttingDown: Promise<void> | undefined;
  let markClosed: () => void = () => {};
  const closed = new Promise<void>((resolve) => {
    markClosed = resolve;
  });
  const shutdown = (graceMs: number): Promise<void> => {
    lifecycle.shutdownStarted = true;
    unsubscribe?.();
    shuttingDown ??= shutdownServers(
      { grpc, connect, calls, logger, drainDelayMs: options.drainDelayMs ?? 0 },
      graceMs,
    )
      .then(() => metricsServer?.close())
      .finally(markClosed);
    return shuttingDown;
  };
  const signal = options.shutdownSignal;
  if (signal !== undefined) {
    const graceMs = options.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS;
    const onAbort = (): void => {
      void shutdown(graceMs);
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
  }
  return {
    grpcPort: grpc.port,
    httpPort: connect.port,
    metricsPort: metricsServer?.port,
    closed,
    shutdown,
  };
}

/** What the gRPC and the Connect server share: the core, auth, limits, the call registry. */
function sharedOptions(options: StartServersOptions, calls: CallRegistry) {
  const rate = options.rateLimit;
  return {
    core: options.core,
    host: options.host,
    authenticator: createAuthenticator(options.auth),
    calls,
    logger: options.logger,
    connectionLimits: { ...DEFAULT_CONNECTION_LIMITS, ...options.connectionLimits },
    watchStallTimeoutMs: options.watchStallTimeoutMs ?? DEFAULT_WATCH_STALL_TIMEOUT_MS,
    ...(rate === undefined || rate.ratePerSecond === 0
      ? {}
      : { rateLimiter: new RateLimiter({ ratePerSecond: rate.ratePerSecond, burst: rate.burst }) }),
    ...(options.maxMessageBytes === undefined ? {} : { maxMessageBytes: options.maxMessageBytes }),
    ...(options.tls === undefined ? {} : { tls: options.tls }),
    ...(options.metrics === undefined ? {} : { metrics: options.metrics }),
    ...(options.corsOrigins === undefined ? {} : { corsOrigins: options.corsOrigins }),
    ...(options.jsonIgnoreUnknownFields === undefined
      ? {}
      : { jsonIgnoreUnknownFields: options.jsonIgnoreUnknownFields }),
  };
}

/** GET /healthz and /readyz: not live once shutting down, not ready while the store is not serving. */
function httpProbes(
  lifecycle: { shutdownStarted: boolean },
  storeHealth: StartServersOptions["storeHealth"],
): HttpProbes {
  return {
    liveness: () =>
      lifecycle.shutdownStarted ? { ok: false, reason: "shutting down" } : { ok: true },
    readiness: () => {
      if (lifecycle.shutdownStarted) return { ok: false, reason: "shutting down" };
      const state = storeHealth?.state;
      if (state === undefined || state.serving) return { ok: true };
      return { ok: false, reason: `store not serving: ${state.reason ?? "no reason given"}` };
    },
  };
}

/**
 * Binds the gRPC port, the HTTP port and the metrics port (when it has its
 * own), closing what was bound when a later one fails.
 */
async function startListeners(
  options: StartServersOptions,
  shared: ReturnType<typeof sharedOptions>,
  probes: HttpProbes,
): Promise<{ grpc: GrpcServer; connect: ConnectServer; metricsServer: MetricsServer | undefined }> {
  const metrics = options.metrics;
  const ownMetricsPort = options.metricsPort !== undefined;
  const endpoint =
    metrics === undefined
      ? undefined
      : metricsEndpoint({
          metrics,
          token: options.metricsToken,
          openWithoutToken: ownMetricsPort || isLoopbackHost(options.host),
        });
  const grpc = await startGrpcServer({ ...shared, port: options.grpcPort });
  let connect: ConnectServer;
  let metricsServer: MetricsServer | undefined;
  try {
    connect = await startConnectServer({
      ...shared,
      port: options.httpPort,
      probes,
      ...(endpoint === undefined || ownMetricsPort ? {} : { metricsEndpoint: endpoint }),
    });
    if (endpoint !== undefined && options.metricsPort !== undefined) {
      try {
        metricsServer = await startMetricsServer(
          endpoint,
          options.host,
          options.metricsPort,
          shared.connectionLimits.maxConnections,
        );
      } catch (err) {
        connect.forceClose();
        throw err;
      }
    }
  } catch (err) {
    grpc.forceClose();
    throw err;
  }
  if (endpoint !== undefined && !ownMetricsPort && options.metricsToken === undefined) {
    if (!isLoopbackHost(options.host)) {
      options.logger.warn(
        "GET /metrics answers 403 on a public address: set WINDLASS_METRICS_TOKEN or --metrics-port",
        {},
      );
    }
  }
  return { grpc, connect, metricsServer };
}

interface Parts {
  readonly grpc: GrpcServer;
  readonly connect: ConnectServer;
  readonly calls: CallRegistry;
  readonly logger: Logger;
  readonly drainDelayMs: number;
}

async function shutdownServers(parts: Parts, graceMs: number): Promise<void> {
  const { grpc, connect, calls, logger } = parts;
  logger.info("shutting down", { graceMs, drainDelayMs: parts.drainDelayMs });
  grpc.setServing(false);
  if (parts.drainDelayMs > 0) await sleep(parts.drainDelayMs);

  const allClosed = Promise.all([grpc.close(), connect.close()]).then(() => {});
  // Watch streams never finish on their own: end them now, with UNAVAILABLE.
  calls.endStreams();
  if (await settlesWithin(allClosed, graceMs)) {
    logger.info("servers closed");
    return;
  }
  logger.warn("grace period over, closing connections", { graceMs, callsInFlight: calls.size });
  calls.abortAll();
  if (await settlesWithin(allClosed, ABORTED_CALLS_FLUSH_MS)) {
    logger.info("servers closed");
    return;
  }
  grpc.forceClose();
  connect.forceClose();
  if (!(await settlesWithin(allClosed, FORCED_CLOSE_WAIT_MS))) {
    logger.error("connections still open after forced close", { callsInFlight: calls.size });
  }
}

async function settlesWithin(promise: Promise<void>, ms: number): Promise<boolean> {
  const timeout = new AbortController();
  try {
    return await Promise.race([
      promise.then(() => true),
      sleep(ms, false, { signal: timeout.signal }),
    ]);
  } finally {
    timeout.abort();
  }
}
