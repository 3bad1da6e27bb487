import { readFileSync } from "node:fs";
import type { Config } from "./config.js";
import {
  DEFAULT_MAX_STORED,
  DEFAULT_SUMMARIZE_EVERY,
  DEFAULT_SUMMARY_WINDOW,
  DEFAULT_WINDOW,
} from "./core/strategy.js";
import { prepareTokenCounting } from "./core/tokens.js";
import type { Strategy } from "./core/types.js";
import type { Logger } from "./logger.js";
import { ServerMetrics } from "./metrics.js";
import { createMemoryService, type MemoryService } from "./service/memory-service.js";
import { StoreHealthMonitor } from "./service/store-health.js";
import { createStore } from "./store/create-store.js";
import { tracedStore } from "./store/traced-store.js";
import { createExtractiveSummarizer } from "./summarizer/extractive.js";
import { createOpenAiSummarizer } from "./summarizer/openai.js";
import { createSummarizerRegistry, type SummarizerRegistry } from "./summarizer/registry.js";
import type { Summarizer } from "./summarizer/summarizer.js";
import { tracedSummarizer, tracingEnabled } from "./tracing.js";
import { startServers } from "./transport/servers.js";

/** The store's close gets at least this, so an idle store always closes cleanly. */
const STORE_CLOSE_MIN_GRACE_MS = 250;

/** A running windlass-memory: the store, the service and both servers. */
export interface App {
  readonly grpcPort: number;
  readonly httpPort: number;
  /** Port of GET /metrics when `--metrics-port` gives it one. */
  readonly metricsPort: number | undefined;
  readonly service: MemoryService;
  /** Graceful stop: servers first (in-flight calls finish), then folds, then the store. */
  stop(): Promise<void>;
}

/**
 * Builds and starts the server from a validated configuration. This is the
 * wiring only; `main.ts` adds the process concerns (argv, env, signals).
 */
export async function startApp(config: Config, logger: Logger): Promise<App> {
  // Before the ports open, so that no call waits for it.
  prepareTokenCounting();
  const metrics = new ServerMetrics();
  const createdStore = await createStore(config.store, {
    eventRetention: config.eventRetention,
    maxThreadsPerNamespace: config.maxThreadsPerNamespace,
    maxMessagesPerNamespace: config.maxMessagesPerNamespace,
    maxBytesPerNamespace: config.maxBytesPerNamespace,
  });
  // Decorated only while tracing is on: the untraced path calls the store itself.
  const store = tracingEnabled() ? tracedStore(createdStore, config.store.kind) : createdStore;
  const summarizers = createSummarizers(config);
  const service = createMemoryService({
    store,
    summarizers,
    defaultStrategy: defaultStrategy(config, summarizers),
    logger,
    metrics,
    limits: serviceLimits(config),
  });
  const storeHealth = new StoreHealthMonitor(store, {
    intervalMs: config.healthCheckIntervalMs,
    logger,
  });
  let servers: Servers;
  try {
    // The first check's outcome is known before the ports open.
    await storeHealth.start();
    servers = await startServers({
      ...serverOptions(config, logger),
      core: service,
      storeHealth,
      metrics,
    });
  } catch (err) {
    await storeHealth.stop();
    await service.close();
    await store.close();
    throw err;
  }
  let stopping: Promise<void> | undefined;
  return {
    grpcPort: servers.grpcPort,
    httpPort: servers.httpPort,
    metricsPort: servers.metricsPort,
    service,
    stop() {
      stopping ??= (async () => {
        const graceEnds = Date.now() + config.shutdownGraceMs;
        const closing = servers.shutdown(config.shutdownGraceMs);
        // Health is NOT_SERVING for good now; no check may reach the store as it closes.
        const checksStopped = storeHealth.stop();
        // Watch streams end with UNAVAILABLE as soon as shutdown starts.
        await service.close();
        await closing;
        await checksStopped;
        // What is left of the grace: the whole stop stays within it (or the store's minimum).
        await store.close(Math.max(STORE_CLOSE_MIN_GRACE_MS, graceEnds - Date.now()));
      })();
      return stopping;
    },
  };
}

type Servers = Awaited<ReturnType<typeof startServers>>;
type ServerOptions = Parameters<typeof startServers>[0];

function serviceLimits(config: Config): Parameters<typeof createMemoryService>[0]["limits"] {
  return {
    maxMessagesPerAdd: config.maxMessagesPerAdd,
    getFoldWaitMs: config.getFoldWaitMs,
    progressIntervalMs: config.progressIntervalMs,
    watchBuffer: config.watchBuffer,
    maxWatchersPerNamespace: config.maxWatchersPerNamespace,
    maxConcurrentFolds: config.maxConcurrentFolds,
    foldLeaseMs: config.foldLeaseMs,
    defaultTtlMs: config.defaultTtlMs,
    ttlSweepIntervalMs: config.ttlSweepIntervalMs,
  };
}

/** The servers' settings from the configuration: everything but the service, health and metrics. */
function serverOptions(
  config: Config,
  logger: Logger,
): Omit<ServerOptions, "core" | "storeHealth" | "metrics"> {
  return {
    host: config.host,
    grpcPort: config.grpcPort,
    httpPort: config.httpPort,
    maxMessageBytes: config.maxMessageBytes,
    jsonIgnoreUnknownFields: config.jsonIgnoreUnknownFields,
    ...(config.metricsPort === undefined ? {} : { metricsPort: config.metricsPort }),
    ...(config.metricsToken === undefined ? {} : { metricsToken: config.metricsToken }),
    rateLimit: { ratePerSecond: config.limits.rateLimitRps, burst: config.limits.rateLimitBurst },
    connectionLimits: {
      maxConnections: config.limits.maxConnections,
      firstByteTimeoutMs: config.limits.firstByteTimeoutMs,
      maxConnectionIdleMs: config.limits.maxConnectionIdleMs,
      keepaliveTimeMs: config.limits.keepaliveTimeMs,
      keepaliveTimeoutMs: config.limits.keepaliveTimeoutMs,
    },
    watchStallTimeoutMs: config.limits.watchStallTimeoutMs,
    corsOrigins: config.corsOrigins,
    ...(config.authTokens === undefined ? {} : { auth: config.authTokens }),
    ...(config.tls === undefined ? {} : { tls: tlsFiles(config.tls) }),
    logger,
  };
}

function tlsFiles(tls: NonNullable<Config["tls"]>): NonNullable<ServerOptions["tls"]> {
  return {
    cert: readSettingFile("--tls-cert / WINDLASS_TLS_CERT", tls.certFile),
    key: readSettingFile("--tls-key / WINDLASS_TLS_KEY", tls.keyFile),
    ...(tls.clientCaFile === undefined
      ? {}
      : {
          clientCa: readSettingFile("--tls-client-ca / WINDLASS_TLS_CLIENT_CA", tls.clientCaFile),
        }),
  };
}

/** Reads a file a setting names; a failure names the setting, not only the path. */
function readSettingFile(setting: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new Error(`${setting}: cannot read "${path}": ${(err as Error).message}`, {
      cause: err,
    });
  }
}

function createSummarizers(config: Config): SummarizerRegistry {
  const list: Summarizer[] = [traced(createExtractiveSummarizer(), false)];
  if (config.openai !== undefined) {
    list.push(
      traced(
        createOpenAiSummarizer({
          baseUrl: config.openai.baseUrl,
          model: config.openai.model,
          timeoutMs: config.openai.timeoutMs,
          maxRetries: config.openai.maxRetries,
          ...(config.openai.apiKey === "" ? {} : { apiKey: config.openai.apiKey }),
        }),
        true,
      ),
    );
  }
  return createSummarizerRegistry(list, config.summarizer);
}

function traced(summarizer: Summarizer, remote: boolean): Summarizer {
  return tracingEnabled() ? tracedSummarizer(summarizer, remote) : summarizer;
}

function defaultStrategy(config: Config, summarizers: SummarizerRegistry): Strategy {
  const base = { excludeSystem: false, maxStored: DEFAULT_MAX_STORED };
  switch (config.defaultStrategy) {
    case "buffer":
      return { kind: "buffer", maxMessages: 0, ...base };
    case "window":
      return { kind: "window", window: DEFAULT_WINDOW, ...base };
    case "summary":
      return {
        kind: "summary",
        window: DEFAULT_SUMMARY_WINDOW,
        summarizeEvery: DEFAULT_SUMMARIZE_EVERY,
        model: summarizers.defaultName,
        ...base,
      };
  }
}
