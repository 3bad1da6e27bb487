import { readFileSync } from "node:fs";
import type { Config } from "./config.js";
import {
  DEFAULT_MAX_STORED,
  DEFAULT_SUMMARIZE_EVERY,
  DEFAULT_SUMMARY_WINDOW,
  DEFAULT_WINDOW,
} from "./core/strategy.js";
import type { Strategy } from "./core/types.js";
import type { Logger } from "./logger.js";
import { ServerMetrics } from "./metrics.js";
import { createMemoryService, type MemoryService } from "./service/memory-service.js";
import { createStore } from "./store/create-store.js";
import { createExtractiveSummarizer } from "./summarizer/extractive.js";
import { createOpenAiSummarizer } from "./summarizer/openai.js";
import { createSummarizerRegistry, type SummarizerRegistry } from "./summarizer/registry.js";
import type { Summarizer } from "./summarizer/summarizer.js";
import { startServers } from "./transport/servers.js";

/** A running windlass-memory: the store, the service and both servers. */
export interface App {
  readonly grpcPort: number;
  readonly httpPort: number;
  readonly service: MemoryService;
  /** Graceful stop: servers first (in-flight calls finish), then folds, then the store. */
  stop(): Promise<void>;
}

/**
 * Builds and starts the server from a validated configuration. This is the
 * wiring only; `main.ts` adds the process concerns (argv, env, signals).
 */
export async function startApp(config: Config, logger: Logger): Promise<App> {
  const metrics = new ServerMetrics();
  const store = await createStore(config.store, { eventRetention: config.eventRetention });
  const summarizers = createSummarizers(config);
  const service = createMemoryService({
    store,
    summarizers,
    defaultStrategy: defaultStrategy(config, summarizers),
    logger,
    metrics,
    limits: {
      maxMessagesPerAdd: config.maxMessagesPerAdd,
      getFoldWaitMs: config.getFoldWaitMs,
      progressIntervalMs: config.progressIntervalMs,
      watchBuffer: config.watchBuffer,
      maxConcurrentFolds: config.maxConcurrentFolds,
    },
  });
  let servers: Awaited<ReturnType<typeof startServers>>;
  try {
    servers = await startServers({
      core: service,
      host: config.host,
      grpcPort: config.grpcPort,
      httpPort: config.httpPort,
      maxMessageBytes: config.maxMessageBytes,
      jsonIgnoreUnknownFields: config.jsonIgnoreUnknownFields,
      metrics,
      ...(config.authTokens === undefined ? {} : { auth: config.authTokens }),
      ...(config.tls === undefined
        ? {}
        : {
            tls: {
              cert: readFileSync(config.tls.certFile),
              key: readFileSync(config.tls.keyFile),
              ...(config.tls.clientCaFile === undefined
                ? {}
                : { clientCa: readFileSync(config.tls.clientCaFile) }),
            },
          }),
      logger,
    });
  } catch (err) {
    await service.close();
    await store.close();
    throw err;
  }
  let stopping: Promise<void> | undefined;
  return {
    grpcPort: servers.grpcPort,
    httpPort: servers.httpPort,
    service,
    stop() {
      stopping ??= (async () => {
        const closing = servers.shutdown(config.shutdownGraceMs);
        // Watch streams end with UNAVAILABLE as soon as shutdown starts.
        await service.close();
        await closing;
        await store.close();
      })();
      return stopping;
    },
  };
}

function createSummarizers(config: Config): SummarizerRegistry {
  const list: Summarizer[] = [createExtractiveSummarizer()];
  if (config.openai !== undefined) {
    list.push(
      createOpenAiSummarizer({
        baseUrl: config.openai.baseUrl,
        model: config.openai.model,
        timeoutMs: config.openai.timeoutMs,
        maxRetries: config.openai.maxRetries,
        ...(config.openai.apiKey === "" ? {} : { apiKey: config.openai.apiKey }),
      }),
    );
  }
  return createSummarizerRegistry(list, config.summarizer);
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
