import type { Logger } from "../logger.js";
import type { ServerMetrics } from "../metrics.js";
import type { MemoryServiceCore } from "../service/context.js";
import type { RateLimiter } from "../service/rate-limit.js";
import type { Authenticator } from "./auth.js";
import type { CallRegistry } from "./call-registry.js";
import type { HttpRequestHandler } from "./cleartext-http-listener.js";
import type { HttpProbes } from "./http-front.js";
import type { TlsOptions } from "./tls.js";

/** What the gRPC and the Connect server are both built from. */
export interface ServerOptions {
  readonly core: MemoryServiceCore;
  readonly host: string;
  /** 0 picks a free port; the server reports the one bound. */
  readonly port: number;
  /** Largest message received or sent, in bytes. Default 4 MiB. */
  readonly maxMessageBytes?: number;
  readonly authenticator: Authenticator;
  /** Where calls in flight are tracked for shutdown; shared by both servers. */
  readonly calls: CallRegistry;
  readonly logger: Logger;
  readonly tls?: TlsOptions;
  /** Where RPC counts and latencies go. */
  readonly metrics?: ServerMetrics;
  /** GET /metrics on this server's port (the Connect server only); absent: not served here. */
  readonly metricsEndpoint?: HttpRequestHandler;
  /** GET /healthz and /readyz on this server's port (the Connect server only). */
  readonly probes?: HttpProbes;
  /** Requests per second per namespace, shared by both servers; absent: no limit. */
  readonly rateLimiter?: RateLimiter;
  readonly connectionLimits: ConnectionLimits;
  /** A Watch whose client has not taken a write for this long ends with RESOURCE_EXHAUSTED. */
  readonly watchStallTimeoutMs: number;
  /** Browser origins allowed to call the Connect port (CORS); `*` for any. Default none. */
  readonly corsOrigins?: readonly string[];
  /** Connect JSON: drop unknown keys instead of refusing them. Default false. */
  readonly jsonIgnoreUnknownFields?: boolean;
}

/** What protects a port from clients that hold connections (README "Transports and operations"). */
export interface ConnectionLimits {
  /** Open connections on the port; more are closed as they are accepted. */
  readonly maxConnections: number;
  /** A connection that sends no byte for this long is closed (on TLS: finishes no handshake). */
  readonly firstByteTimeoutMs: number;
  /** An HTTP/2 connection with no call for this long is closed with GOAWAY. */
  readonly maxConnectionIdleMs: number;
  /** The gRPC port pings each connection this often... */
  readonly keepaliveTimeMs: number;
  /** ...and closes it when the ping is not answered within this. */
  readonly keepaliveTimeoutMs: number;
}

/** The defaults of src/config.ts, for servers started without a configuration (tests). */
export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = {
  maxConnections: 500,
  firstByteTimeoutMs: 10_000,
  maxConnectionIdleMs: 300_000,
  keepaliveTimeMs: 60_000,
  keepaliveTimeoutMs: 20_000,
};

export const DEFAULT_WATCH_STALL_TIMEOUT_MS = 30_000;

/** What a handler needs of the options, beyond the core it calls. */
export type HandlerDeps = Pick<
  ServerOptions,
  | "authenticator"
  | "calls"
  | "logger"
  | "metrics"
  | "rateLimiter"
  | "watchStallTimeoutMs"
  | "maxMessageBytes"
>;
