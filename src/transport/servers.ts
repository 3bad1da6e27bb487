import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "../logger.js";
import type { ServerMetrics } from "../metrics.js";
import type { MemoryServiceCore } from "../service/context.js";
import { createAuthenticator } from "./auth.js";
import { CallRegistry } from "./call-registry.js";
import { type ConnectServer, startConnectServer } from "./connect-server.js";
import { type GrpcServer, startGrpcServer } from "./grpc-server.js";
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
  /** RPC counts and latencies; GET /metrics on the HTTP port renders them. */
  readonly metrics?: ServerMetrics;
  /** Serve TLS on both ports (optionally requiring client certificates). */
  readonly tls?: TlsOptions;
  /** Connect JSON: drop unknown keys instead of refusing them. Default false. */
  readonly jsonIgnoreUnknownFields?: boolean;
  /**
   * How long shutdown keeps serving after health turns NOT_SERVING, so that
   * load balancers and Kubernetes probes stop routing here before the
   * listeners close. Default 0.
   */
  readonly drainDelayMs?: number;
  /** Aborting this signal starts `shutdown(shutdownGraceMs)` (e.g. on SIGTERM). */
  readonly shutdownSignal?: AbortSignal;
  /** Grace period used when `shutdownSignal` aborts. Default 10 s. */
  readonly shutdownGraceMs?: number;
}

export interface RunningServers {
  /** Port of the gRPC server (health and reflection included). */
  readonly grpcPort: number;
  /** Port of the Connect server (Connect, gRPC-Web, gRPC; HTTP/1.1 and HTTP/2). */
  readonly httpPort: number;
  /** Resolves when shutdown has finished, however it was started. */
  readonly closed: Promise<void>;
  /**
   * Graceful shutdown: health NOT_SERVING, wait `drainDelayMs`, stop
   * accepting, end Watch streams with UNAVAILABLE, let unary calls in flight
   * finish; after `graceMs`, abort what is left and close every connection.
   * Idempotent: later calls return the first call's promise.
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
  const shared = {
    core: options.core,
    host: options.host,
    authenticator: createAuthenticator(options.auth),
    calls,
    logger,
    ...(options.maxMessageBytes === undefined ? {} : { maxMessageBytes: options.maxMessageBytes }),
    ...(options.tls === undefined ? {} : { tls: options.tls }),
    ...(options.metrics === undefined ? {} : { metrics: options.metrics }),
    ...(options.jsonIgnoreUnknownFields === undefined
      ? {}
      : { jsonIgnoreUnknownFields: options.jsonIgnoreUnknownFields }),
  };
  const grpc = await startGrpcServer({ ...shared, port: options.grpcPort });
  let connect: ConnectServer;
  try {
    connect = await startConnectServer({ ...shared, port: options.httpPort });
  } catch (err) {
    grpc.forceClose();
    throw err;
  }
  logger.info("servers listening", {
    host: options.host,
    grpcPort: grpc.port,
    httpPort: connect.port,
    auth: options.auth !== undefined && options.auth.size > 0,
    tls: options.tls !== undefined,
  });

  let shuttingDown: Promise<void> | undefined;
  let markClosed: () => void = () => {};
  const closed = new Promise<void>((resolve) => {
    markClosed = resolve;
  });
  const shutdown = (graceMs: number): Promise<void> => {
    shuttingDown ??= shutdownServers(
      { grpc, connect, calls, logger, drainDelayMs: options.drainDelayMs ?? 0 },
      graceMs,
    ).finally(markClosed);
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

  return { grpcPort: grpc.port, httpPort: connect.port, closed, shutdown };
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
