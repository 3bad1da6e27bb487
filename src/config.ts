import type { LogLevel } from "./logger.js";

/**
 * The one configuration of the server: every setting is a flag
 * (`--http-port 8080` or `--http-port=8080`) with an environment variable
 * (`WINDLASS_HTTP_PORT`); a flag wins over the environment. Secrets (API
 * keys, auth tokens) come from the environment only, so they never show up in
 * a process listing. Bad values stop start-up with one line naming the setting.
 */
export interface Config {
  host: string;
  grpcPort: number;
  httpPort: number;
  store: StoreConfig;
  summarizer: "extractive" | "openai";
  openai:
    | { baseUrl: string; model: string; apiKey: string; timeoutMs: number; maxRetries: number }
    | undefined;
  defaultStrategy: "buffer" | "window" | "summary";
  maxMessageBytes: number;
  maxMessagesPerAdd: number;
  /** Connect JSON requests: drop unknown keys instead of refusing them. */
  jsonIgnoreUnknownFields: boolean;
  getFoldWaitMs: number;
  progressIntervalMs: number;
  watchBuffer: number;
  /** Open Watch streams a namespace may have; 0: unlimited. */
  maxWatchersPerNamespace: number;
  eventRetention: number;
  /** Namespace quotas (src/store/store.ts StoreLimits); 0: unlimited. */
  maxThreadsPerNamespace: number;
  maxMessagesPerNamespace: number;
  maxBytesPerNamespace: number;
  /** Ttl of threads created without one, ms; 0: none (README "Thread lifecycle"). */
  defaultTtlMs: number;
  /** How often each replica sweeps expired threads. */
  ttlSweepIntervalMs: number;
  maxConcurrentFolds: number;
  foldLeaseMs: number;
  shutdownGraceMs: number;
  /** How often the store's health is checked, for gRPC health and GET /readyz. */
  healthCheckIntervalMs: number;
  /** Limits per caller and per connection; see README "Transports and operations". */
  limits: {
    /** Requests per second per namespace (token bucket rate); 0: no limit. */
    rateLimitRps: number;
    rateLimitBurst: number;
    /** Open connections per port. */
    maxConnections: number;
    firstByteTimeoutMs: number;
    maxConnectionIdleMs: number;
    keepaliveTimeMs: number;
    keepaliveTimeoutMs: number;
    watchStallTimeoutMs: number;
  };
  /** GET /metrics on its own port; undefined: on the HTTP port. */
  metricsPort: number | undefined;
  /** Bearer token GET /metrics requires; undefined: none. */
  metricsToken: string | undefined;
  /** Bearer token -> namespace; undefined: no auth, one namespace. */
  authTokens: Map<string, string> | undefined;
  tls: { certFile: string; keyFile: string; clientCaFile: string | undefined } | undefined;
  logLevel: LogLevel;
  /** Browser origins allowed to call the Connect port; ["*"]: any; []: none. */
  corsOrigins: string[];
  /** Put namespaces and thread ids into trace attributes. */
  traceThreadIds: boolean;
}

export type StoreConfig =
  | { kind: "memory" }
  | { kind: "sqlite"; path: string; cacheMb: number }
  | {
      kind: "redis";
      /** redis://, rediss://, redis+sentinel:// (parseRedisSentinelUrl) or redis-cluster:// (parseRedisClusterUrl). */
      url: string;
      /** Replicas that must confirm an acknowledged write (WAIT); 0: no wait. */
      minReplicas: number;
      /** Longest an acknowledged write waits for them before UNAVAILABLE. */
      replicaWaitMs: number;
      /** Hash slots each namespace is split into (store/redis/keys.ts); 1: one slot. */
      namespaceShards: number;
    }
  | { kind: "postgres"; url: string; poolSize: number };

/** A `redis-cluster://` store URL, parsed: the seed nodes. */
export interface RedisClusterUrl {
  nodes: { host: string; port: number }[];
  /** For every node of the cluster; never logged. */
  username: string | undefined;
  password: string | undefined;
}

/** A `redis+sentinel://` store URL, parsed. */
export interface RedisSentinelUrl {
  sentinels: { host: string; port: number }[];
  masterName: string;
  /** For the Redis nodes (the sentinels are asked without one); never logged. */
  username: string | undefined;
  password: string | undefined;
}

import { ConfigError, MAX_TIMER_MS } from "./config/config-error.js";
import {
  nonEmpty,
  parseAuthTokens,
  parseCorsOrigins,
  parseFlags,
  parseMetricsToken,
  parseStore,
  parseTtl,
} from "./config/parsers.js";
import { SETTINGS, type Setting, type SettingKey } from "./config/settings.js";

export { ConfigError } from "./config/config-error.js";
export {
  CLUSTER_SCHEME,
  parseRedisClusterUrl,
  parseRedisSentinelUrl,
  SENTINEL_SCHEME,
} from "./config/parsers.js";
export { SETTINGS };

/** Reads settings by key: flag, else environment, else default; each checked as it is read. */
interface SettingsReader {
  raw(key: SettingKey): string | undefined;
  str(key: SettingKey): string;
  int(key: SettingKey, min: number, max?: number): number;
  oneOf<T extends string>(key: SettingKey, values: readonly T[]): T;
  authTokens: Map<string, string> | undefined;
}

function settingsReader(argv: readonly string[], env: NodeJS.ProcessEnv): SettingsReader {
  const flags = parseFlags(argv);
  for (const s of Object.values(SETTINGS) as Setting[]) {
    if (s.secret && flags.has(s.flag)) {
      throw new ConfigError(`--${s.flag} is a secret: set ${s.env} in the environment instead`);
    }
  }
  const given = (s: Setting): string | undefined => flags.get(s.flag) ?? nonEmpty(env[s.env]);
  const authTokens = parseAuthTokens(given(SETTINGS.authTokens));
  const raw = (key: SettingKey): string | undefined => {
    const s: Setting = SETTINGS[key];
    return given(s) ?? (authTokens === undefined ? s.defaultWithoutAuth : undefined) ?? s.default;
  };
  const str = (key: SettingKey): string => raw(key) ?? "";
  return {
    raw,
    str,
    authTokens,
    int(key, min, max = Number.MAX_SAFE_INTEGER) {
      const s: Setting = SETTINGS[key];
      const text = str(key);
      const n = Number(text);
      if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < min || n > max) {
        throw new ConfigError(
          `--${s.flag} / ${s.env}: "${text}" is not a whole number from ${min} to ${max}`,
        );
      }
      return n;
    },
    oneOf(key, values) {
      const s: Setting = SETTINGS[key];
      const v = str(key);
      if (!(values as readonly string[]).includes(v)) {
        throw new ConfigError(`--${s.flag} / ${s.env}: "${v}" is not one of ${values.join(", ")}`);
      }
      return v as (typeof values)[number];
    },
  };
}

/** Reads and validates the configuration; throws ConfigError with one clear line. */
export function loadConfig(argv: readonly string[], env: NodeJS.ProcessEnv): Config {
  const config = readConfig(argv, env);
  checkQuotaShares(config);
  return config;
}

/**
 * A namespace split into N shards enforces each quota as N shares, one per
 * shard (store/redis/context.ts quotaArgs): a limit below N would leave a
 * share of 0, which reads as "none".
 */
function checkQuotaShares(config: Config): void {
  if (config.store.kind !== "redis") return;
  const n = config.store.namespaceShards;
  const limits = [
    ["maxThreadsPerNamespace", config.maxThreadsPerNamespace],
    ["maxMessagesPerNamespace", config.maxMessagesPerNamespace],
    ["maxBytesPerNamespace", config.maxBytesPerNamespace],
  ] as const;
  for (const [key, limit] of limits) {
    if (limit !== 0 && limit < n) {
      const s: Setting = SETTINGS[key];
      throw new ConfigError(
        `--${s.flag} / ${s.env}: ${limit} is below --redis-namespace-shards (${n}); each shard holds a share of the limit, so it must be 0 or at least ${n}`,
      );
    }
  }
}

function readConfig(argv: readonly string[], env: NodeJS.ProcessEnv): Config {
  const r = settingsReader(argv, env);
  const { int, oneOf } = r;
  return {
    host: r.str("host"),
    grpcPort: int("port", 0, 65535),
    httpPort: int("httpPort", 0, 65535),
    store: storeConfig(r),
    ...summarizerConfig(r),
    defaultStrategy: oneOf("defaultStrategy", ["buffer", "window", "summary"] as const),
    maxMessageBytes: int("maxMessageBytes", 1024, 1024 * 1024 * 1024),
    maxMessagesPerAdd: int("maxMessagesPerAdd", 1, 1_000_000),
    jsonIgnoreUnknownFields:
      oneOf("jsonIgnoreUnknownFields", ["true", "false"] as const) === "true",
    getFoldWaitMs: int("getFoldWaitMs", 0, MAX_TIMER_MS),
    progressIntervalMs: int("progressIntervalMs", 10, MAX_TIMER_MS),
    watchBuffer: int("watchBuffer", 1),
    maxWatchersPerNamespace: int("maxWatchersPerNamespace", 0),
    eventRetention: int("eventRetention", 1),
    maxThreadsPerNamespace: int("maxThreadsPerNamespace", 0),
    maxMessagesPerNamespace: int("maxMessagesPerNamespace", 0),
    maxBytesPerNamespace: int("maxBytesPerNamespace", 0),
    defaultTtlMs: parseTtl(r.str("defaultTtl")),
    ttlSweepIntervalMs: int("ttlSweepIntervalMs", 10, MAX_TIMER_MS),
    maxConcurrentFolds: int("maxConcurrentFolds", 1, 10_000),
    // At least 2 s: the model call gets the lease less a second.
    foldLeaseMs: int("foldLeaseMs", 2000, 3_600_000),
    shutdownGraceMs: int("shutdownGraceMs", 0, MAX_TIMER_MS),
    healthCheckIntervalMs: int("healthCheckIntervalMs", 50, MAX_TIMER_MS),
    limits: limitsConfig(r),
    metricsPort: r.raw("metricsPort") === undefined ? undefined : int("metricsPort", 0, 65535),
    metricsToken: parseMetricsToken(r.raw("metricsToken")),
    authTokens: r.authTokens,
    tls: tlsConfig(r),
    logLevel: oneOf("logLevel", ["debug", "info", "warn", "error"] as const),
    corsOrigins: parseCorsOrigins(r.raw("corsOrigin")),
    traceThreadIds: oneOf("traceThreadIds", ["false", "true"] as const) === "true",
  };
}

function storeConfig(r: SettingsReader): StoreConfig {
  return parseStore(
    r.str("store"),
    r.int("sqliteCacheMb", 0, 1024 * 1024),
    {
      minReplicas: r.int("redisMinReplicas", 0, 100),
      // WAIT's 0 would mean "forever".
      replicaWaitMs: r.int("redisReplicaWaitMs", 1, MAX_TIMER_MS),
      namespaceShards: r.int("redisNamespaceShards", 1, 64),
    },
    r.int("postgresPoolSize", 1, 1000),
  );
}

function summarizerConfig(r: SettingsReader): Pick<Config, "summarizer" | "openai"> {
  const summarizer = r.oneOf("summarizer", ["extractive", "openai"] as const);
  const baseUrl = r.raw("openaiBaseUrl");
  if (baseUrl !== undefined && !/^https?:\/\/[^\s]+$/.test(baseUrl)) {
    throw new ConfigError(
      `--openai-base-url / WINDLASS_OPENAI_BASE_URL: "${baseUrl}" is not an http(s) URL`,
    );
  }
  if (summarizer === "openai" && baseUrl === undefined) {
    throw new ConfigError("--summarizer openai needs --openai-base-url / WINDLASS_OPENAI_BASE_URL");
  }
  return {
    summarizer,
    openai:
      baseUrl === undefined
        ? undefined
        : {
            baseUrl,
            model: r.str("openaiModel"),
            apiKey: r.raw("openaiApiKey") ?? "",
            timeoutMs: r.int("openaiTimeoutMs", 1, MAX_TIMER_MS),
            maxRetries: r.int("openaiMaxRetries", 0, 10),
          },
  };
}

function tlsConfig(r: SettingsReader): Config["tls"] {
  const tlsCert = r.raw("tlsCert");
  const tlsKey = r.raw("tlsKey");
  if ((tlsCert === undefined) !== (tlsKey === undefined)) {
    throw new ConfigError("--tls-cert and --tls-key go together: set both or neither");
  }
  const tlsClientCa = r.raw("tlsClientCa");
  if (tlsClientCa !== undefined && tlsCert === undefined) {
    throw new ConfigError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  return tlsCert === undefined || tlsKey === undefined
    ? undefined
    : { certFile: tlsCert, keyFile: tlsKey, clientCaFile: tlsClientCa };
}

function limitsConfig(r: SettingsReader): Config["limits"] {
  const { int } = r;
  return {
    rateLimitRps: int("rateLimitRps", 0, 1_000_000),
    rateLimitBurst: int("rateLimitBurst", 1, 10_000_000),
    maxConnections: int("maxConnections", 1, 1_000_000),
    firstByteTimeoutMs: int("firstByteTimeoutMs", 1, MAX_TIMER_MS),
    maxConnectionIdleMs: int("maxConnectionIdleMs", 1, MAX_TIMER_MS),
    keepaliveTimeMs: int("keepaliveTimeMs", 1, MAX_TIMER_MS),
    keepaliveTimeoutMs: int("keepaliveTimeoutMs", 1, MAX_TIMER_MS),
    watchStallTimeoutMs: int("watchStallTimeoutMs", 1, MAX_TIMER_MS),
  };
}

/** The text of `windlass-memory --help`. */
export function helpText(): string {
  const lines = [
    "Usage: windlass-memory serve [flags]",
    "       windlass-memory export [--namespace NS]... [--output FILE] [flags]",
    "       windlass-memory import [--input FILE] [flags]",
    "       windlass-memory --version",
    "",
    "Flags (each also an environment variable):",
  ];
  for (const s of Object.values(SETTINGS) as Setting[]) {
    const def =
      s.default === undefined
        ? ""
        : s.defaultWithoutAuth === undefined
          ? ` (default ${s.default})`
          : ` (default ${s.defaultWithoutAuth}, or ${s.default} with WINDLASS_AUTH_TOKENS)`;
    const flag = s.boolean ? `--${s.flag}[=true|false]` : `--${s.flag}`;
    const name = s.secret ? `${s.env} (env only)` : `${flag} / ${s.env}`;
    lines.push(`  ${name}${def}`, `      ${s.help}`);
  }
  return lines.join("\n");
}
