import type { Logger } from "../logger.js";
import type { ServerMetrics } from "../metrics.js";
import type { MemoryServiceCore } from "../service/context.js";
import type { Authenticator } from "./auth.js";
import type { CallRegistry } from "./call-registry.js";
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
  /** Where RPC counts and latencies go; the Connect server also serves them at GET /metrics. */
  readonly metrics?: ServerMetrics;
  /** Connect JSON: drop unknown keys instead of refusing them. Default false. */
  readonly jsonIgnoreUnknownFields?: boolean;
}

/** What a handler needs of the options, beyond the core it calls. */
export type HandlerDeps = Pick<ServerOptions, "authenticator" | "calls" | "logger" | "metrics">;
