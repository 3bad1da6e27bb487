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
      /** redis://, rediss:// or redis+sentinel:// (see parseRedisSentinelUrl). */
      url: string;
      /** Replicas that must confirm an acknowledged write (WAIT); 0: no wait. */
      minReplicas: number;
      /** Longest an acknowledged write waits for them before UNAVAILABLE. */
      replicaWaitMs: number;
    }
  | { kind: "postgres"; url: string; poolSize: number };

/** A `redis+sentinel://` store URL, parsed. */
export interface RedisSentinelUrl {
  sentinels: { host: string; port: number }[];
  masterName: string;
  /** For the Redis nodes (the sentinels are asked without one); never logged. */
  username: string | undefined;
  password: string | undefined;
}

/**
 * The longest delay a timer can have: Node runs a longer setTimeout after
 * 1 ms, so "a very long timeout" would become the shortest. Every setting in
 * milliseconds is capped here (about 24.8 days).
 */
const MAX_TIMER_MS = 2_147_483_647;

export class ConfigError extends Error {
  override readonly name = "ConfigError";
}

interface Setting {
  flag: string;
  env: string;
  secret?: boolean;
  /** The flag may be given more than once; the values are joined with commas. */
  repeatable?: boolean;
  /** `true` or `false`; the flag alone (`--trace-thread-ids`) means true. */
  boolean?: boolean;
  help: string;
  default?: string;
  /**
   * The default without WINDLASS_AUTH_TOKENS, when it differs: every caller is
   * then in one namespace, so a per-namespace limit would be the whole server's.
   */
  defaultWithoutAuth?: string;
}

/** Every setting, in the order `--help` and the README list them. */
export const SETTINGS = {
  host: { flag: "host", env: "WINDLASS_HOST", default: "127.0.0.1", help: "address to listen on" },
  port: {
    flag: "port",
    env: "WINDLASS_PORT",
    default: "50051",
    help: "gRPC port (grpc-js); 0 picks a free one",
  },
  httpPort: {
    flag: "http-port",
    env: "WINDLASS_HTTP_PORT",
    default: "8080",
    help: "Connect / gRPC-Web / JSON port, HTTP/1.1 and h2c; 0 picks a free one",
  },
  store: {
    flag: "store",
    env: "WINDLASS_STORE",
    default: "memory",
    help: "memory | sqlite:PATH | redis://HOST:PORT/DB | redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER | postgres://USER@HOST:PORT/DB",
  },
  redisMinReplicas: {
    flag: "redis-min-replicas",
    env: "WINDLASS_REDIS_MIN_REPLICAS",
    default: "0",
    help: "Redis store: an Add, import or Clear is acknowledged only once this many replicas have it (WAIT); 0: once the primary has it",
  },
  redisReplicaWaitMs: {
    flag: "redis-replica-wait-ms",
    env: "WINDLASS_REDIS_REPLICA_WAIT_MS",
    default: "1000",
    help: "longest such a write waits for the replicas before UNAVAILABLE (a retry with its request_id answers the stored result)",
  },
  sqliteCacheMb: {
    flag: "sqlite-cache-mb",
    env: "WINDLASS_SQLITE_CACHE_MB",
    default: "256",
    help: "memory (MiB) the SQLite store's caches may hold: its page caches and recent threads' messages",
  },
  postgresPoolSize: {
    flag: "postgres-pool-size",
    env: "WINDLASS_POSTGRES_POOL_SIZE",
    default: "10",
    help: "connections the Postgres store keeps open (plus one for LISTEN)",
  },
  summarizer: {
    flag: "summarizer",
    env: "WINDLASS_SUMMARIZER",
    default: "extractive",
    help: "default summariser: extractive | openai",
  },
  openaiBaseUrl: {
    flag: "openai-base-url",
    env: "WINDLASS_OPENAI_BASE_URL",
    help: "OpenAI-compatible API base URL, e.g. http://127.0.0.1:11434/v1; enables the openai summariser",
  },
  openaiModel: {
    flag: "openai-model",
    env: "WINDLASS_OPENAI_MODEL",
    default: "gpt-4o-mini",
    help: "model name sent to the OpenAI-compatible API",
  },
  openaiApiKey: {
    flag: "openai-api-key",
    env: "WINDLASS_OPENAI_API_KEY",
    secret: true,
    help: "API key (environment only)",
  },
  openaiTimeoutMs: {
    flag: "openai-timeout-ms",
    env: "WINDLASS_OPENAI_TIMEOUT_MS",
    default: "30000",
    help: "per-attempt timeout of a summary call",
  },
  openaiMaxRetries: {
    flag: "openai-max-retries",
    env: "WINDLASS_OPENAI_MAX_RETRIES",
    default: "2",
    help: "retries of a failed summary call",
  },
  defaultStrategy: {
    flag: "default-strategy",
    env: "WINDLASS_DEFAULT_STRATEGY",
    default: "window",
    help: "strategy of threads created without one: buffer | window | summary",
  },
  maxMessageBytes: {
    flag: "max-message-bytes",
    env: "WINDLASS_MAX_MESSAGE_BYTES",
    default: String(4 * 1024 * 1024),
    help: "largest request or response message",
  },
  maxMessagesPerAdd: {
    flag: "max-messages-per-add",
    env: "WINDLASS_MAX_MESSAGES_PER_ADD",
    default: "1000",
    help: "most messages one Add may carry",
  },
  jsonIgnoreUnknownFields: {
    flag: "json-ignore-unknown-fields",
    env: "WINDLASS_JSON_IGNORE_UNKNOWN_FIELDS",
    default: "false",
    boolean: true,
    help: "true: drop unknown keys of Connect JSON requests instead of refusing them",
  },
  getFoldWaitMs: {
    flag: "get-fold-wait-ms",
    env: "WINDLASS_GET_FOLD_WAIT_MS",
    default: "5000",
    help: "longest a Get waits for a running summary fold",
  },
  progressIntervalMs: {
    flag: "progress-interval-ms",
    env: "WINDLASS_PROGRESS_INTERVAL_MS",
    default: "30000",
    help: "Progress events on idle Watch streams",
  },
  watchBuffer: {
    flag: "watch-buffer",
    env: "WINDLASS_WATCH_BUFFER",
    default: "1000",
    help: "events a watcher may fall behind before RESOURCE_EXHAUSTED",
  },
  maxWatchersPerNamespace: {
    flag: "max-watchers-per-namespace",
    env: "WINDLASS_MAX_WATCHERS_PER_NAMESPACE",
    default: "1000",
    help: "open Watch streams a namespace may have (RESOURCE_EXHAUSTED beyond); 0: unlimited",
  },
  eventRetention: {
    flag: "event-retention",
    env: "WINDLASS_EVENT_RETENTION",
    default: "10000",
    help: "events kept per namespace for Watch resume",
  },
  maxThreadsPerNamespace: {
    flag: "max-threads-per-namespace",
    env: "WINDLASS_MAX_THREADS_PER_NAMESPACE",
    default: "10000",
    defaultWithoutAuth: "0",
    help: "threads a namespace may hold; an Add past it is RESOURCE_EXHAUSTED (0: unlimited)",
  },
  maxMessagesPerNamespace: {
    flag: "max-messages-per-namespace",
    env: "WINDLASS_MAX_MESSAGES_PER_NAMESPACE",
    default: "1000000",
    defaultWithoutAuth: "0",
    help: "stored messages a namespace may hold (0: unlimited)",
  },
  maxBytesPerNamespace: {
    flag: "max-bytes-per-namespace",
    env: "WINDLASS_MAX_BYTES_PER_NAMESPACE",
    default: String(1024 * 1024 * 1024),
    defaultWithoutAuth: "0",
    help: "UTF-8 bytes of stored message text and fields a namespace may hold (0: unlimited)",
  },
  defaultTtl: {
    flag: "default-ttl",
    env: "WINDLASS_DEFAULT_TTL",
    default: "0",
    help: "ttl of threads whose first Add gives none, e.g. 30m, 24h, 7d (ms, s, m, h, d); 0: never expire",
  },
  ttlSweepIntervalMs: {
    flag: "ttl-sweep-interval-ms",
    env: "WINDLASS_TTL_SWEEP_INTERVAL_MS",
    default: "1000",
    help: "how often each replica removes expired threads (and Watch sees them cleared)",
  },
  maxConcurrentFolds: {
    flag: "max-concurrent-folds",
    env: "WINDLASS_MAX_CONCURRENT_FOLDS",
    default: "8",
    help: "summary model calls at once",
  },
  foldLeaseMs: {
    flag: "fold-lease-ms",
    env: "WINDLASS_FOLD_LEASE_MS",
    default: "60000",
    help: "a fold's hold on its thread: its model call ends a second sooner; a replica dying mid-fold delays that thread's summary this long",
  },
  shutdownGraceMs: {
    flag: "shutdown-grace-ms",
    env: "WINDLASS_SHUTDOWN_GRACE_MS",
    default: "5000",
    help: "time in-flight calls get on SIGTERM/SIGINT",
  },
  healthCheckIntervalMs: {
    flag: "health-check-interval-ms",
    env: "WINDLASS_HEALTH_CHECK_INTERVAL_MS",
    default: "1000",
    help: "pause between checks of the store, which set gRPC health and GET /readyz",
  },
  rateLimitRps: {
    flag: "rate-limit-rps",
    env: "WINDLASS_RATE_LIMIT_RPS",
    default: "1000",
    defaultWithoutAuth: "0",
    help: "requests per second per namespace (token bucket); 0 turns the limit off",
  },
  rateLimitBurst: {
    flag: "rate-limit-burst",
    env: "WINDLASS_RATE_LIMIT_BURST",
    default: "2000",
    help: "requests a namespace may make at once above its rate",
  },
  maxConnections: {
    flag: "max-connections",
    env: "WINDLASS_MAX_CONNECTIONS",
    default: "500",
    help: "open connections per port; new ones beyond are closed at once",
  },
  firstByteTimeoutMs: {
    flag: "first-byte-timeout-ms",
    env: "WINDLASS_FIRST_BYTE_TIMEOUT_MS",
    default: "10000",
    help: "a new connection that sends nothing for this long is closed",
  },
  maxConnectionIdleMs: {
    flag: "max-connection-idle-ms",
    env: "WINDLASS_MAX_CONNECTION_IDLE_MS",
    default: "300000",
    help: "an HTTP/2 connection without calls for this long is closed (GOAWAY)",
  },
  keepaliveTimeMs: {
    flag: "keepalive-time-ms",
    env: "WINDLASS_KEEPALIVE_TIME_MS",
    default: "60000",
    help: "the gRPC port pings each connection this often",
  },
  keepaliveTimeoutMs: {
    flag: "keepalive-timeout-ms",
    env: "WINDLASS_KEEPALIVE_TIMEOUT_MS",
    default: "20000",
    help: "a connection whose ping is not answered within this is closed",
  },
  watchStallTimeoutMs: {
    flag: "watch-stall-timeout-ms",
    env: "WINDLASS_WATCH_STALL_TIMEOUT_MS",
    default: "30000",
    help: "a Watch whose client reads nothing for this long ends with RESOURCE_EXHAUSTED",
  },
  metricsPort: {
    flag: "metrics-port",
    env: "WINDLASS_METRICS_PORT",
    help: "serve GET /metrics on this port instead of the HTTP port; 0 picks a free one",
  },
  metricsToken: {
    flag: "metrics-token",
    env: "WINDLASS_METRICS_TOKEN",
    secret: true,
    help: "GET /metrics requires authorization: Bearer TOKEN (environment only)",
  },
  authTokens: {
    flag: "auth-tokens",
    env: "WINDLASS_AUTH_TOKENS",
    secret: true,
    help: "TOKEN=NAMESPACE[,…]: require bearer tokens (environment only)",
  },
  tlsCert: { flag: "tls-cert", env: "WINDLASS_TLS_CERT", help: "PEM certificate file: serve TLS" },
  tlsKey: { flag: "tls-key", env: "WINDLASS_TLS_KEY", help: "PEM private key file for --tls-cert" },
  tlsClientCa: {
    flag: "tls-client-ca",
    env: "WINDLASS_TLS_CLIENT_CA",
    help: "PEM CA file: require client certificates signed by it",
  },
  corsOrigin: {
    flag: "cors-origin",
    env: "WINDLASS_CORS_ORIGIN",
    repeatable: true,
    help: "browser origin allowed to call the Connect port (CORS), e.g. https://app.example.com; repeatable or comma-separated; * for any",
  },
  traceThreadIds: {
    flag: "trace-thread-ids",
    env: "WINDLASS_TRACE_THREAD_IDS",
    default: "false",
    boolean: true,
    help: "true: put namespaces and thread ids into trace span attributes (tracing is on when OTEL_* asks for it)",
  },
  logLevel: {
    flag: "log-level",
    env: "WINDLASS_LOG_LEVEL",
    default: "info",
    help: "debug | info | warn | error",
  },
} satisfies Record<string, Setting>;

type Key = keyof typeof SETTINGS;

/** Reads and validates the configuration; throws ConfigError with one clear line. */
export function loadConfig(argv: readonly string[], env: NodeJS.ProcessEnv): Config {
  const flags = parseFlags(argv);
  for (const s of Object.values(SETTINGS) as Setting[]) {
    if (s.secret && flags.has(s.flag)) {
      throw new ConfigError(`--${s.flag} is a secret: set ${s.env} in the environment instead`);
    }
  }
  const given = (s: Setting): string | undefined => flags.get(s.flag) ?? nonEmpty(env[s.env]);
  const authTokens = parseAuthTokens(given(SETTINGS.authTokens));
  const raw = (key: Key): string | undefined => {
    const s: Setting = SETTINGS[key];
    return given(s) ?? (authTokens === undefined ? s.defaultWithoutAuth : undefined) ?? s.default;
  };
  const str = (key: Key): string => raw(key) ?? "";
  const int = (key: Key, min: number, max = Number.MAX_SAFE_INTEGER): number => {
    const s: Setting = SETTINGS[key];
    const text = str(key);
    const n = Number(text);
    if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < min || n > max) {
      throw new ConfigError(
        `--${s.flag} / ${s.env}: "${text}" is not a whole number from ${min} to ${max}`,
      );
    }
    return n;
  };
  const oneOf = <T extends string>(key: Key, values: readonly T[]): T => {
    const s: Setting = SETTINGS[key];
    const v = str(key);
    if (!(values as readonly string[]).includes(v)) {
      throw new ConfigError(`--${s.flag} / ${s.env}: "${v}" is not one of ${values.join(", ")}`);
    }
    return v as T;
  };

  const summarizer = oneOf("summarizer", ["extractive", "openai"] as const);
  const baseUrl = raw("openaiBaseUrl");
  if (baseUrl !== undefined && !/^https?:\/\/[^\s]+$/.test(baseUrl)) {
    throw new ConfigError(
      `--openai-base-url / WINDLASS_OPENAI_BASE_URL: "${baseUrl}" is not an http(s) URL`,
    );
  }
  if (summarizer === "openai" && baseUrl === undefined) {
    throw new ConfigError("--summarizer openai needs --openai-base-url / WINDLASS_OPENAI_BASE_URL");
  }
  const tlsCert = raw("tlsCert");
  const tlsKey = raw("tlsKey");
  if ((tlsCert === undefined) !== (tlsKey === undefined)) {
    throw new ConfigError("--tls-cert and --tls-key go together: set both or neither");
  }
  const tlsClientCa = raw("tlsClientCa");
  if (tlsClientCa !== undefined && tlsCert === undefined) {
    throw new ConfigError("--tls-client-ca needs --tls-cert and --tls-key");
  }

  return {
    host: str("host"),
    grpcPort: int("port", 0, 65535),
    httpPort: int("httpPort", 0, 65535),
    store: parseStore(
      str("store"),
      int("sqliteCacheMb", 0, 1024 * 1024),
      {
        minReplicas: int("redisMinReplicas", 0, 100),
        // WAIT's 0 would mean "forever".
        replicaWaitMs: int("redisReplicaWaitMs", 1, MAX_TIMER_MS),
      },
      int("postgresPoolSize", 1, 1000),
    ),
    summarizer,
    openai:
      baseUrl === undefined
        ? undefined
        : {
            baseUrl,
            model: str("openaiModel"),
            apiKey: raw("openaiApiKey") ?? "",
            timeoutMs: int("openaiTimeoutMs", 1, MAX_TIMER_MS),
            maxRetries: int("openaiMaxRetries", 0, 10),
          },
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
    defaultTtlMs: parseTtl(str("defaultTtl")),
    ttlSweepIntervalMs: int("ttlSweepIntervalMs", 10, MAX_TIMER_MS),
    maxConcurrentFolds: int("maxConcurrentFolds", 1, 10_000),
    // At least 2 s: the model call gets the lease less a second.
    foldLeaseMs: int("foldLeaseMs", 2000, 3_600_000),
    shutdownGraceMs: int("shutdownGraceMs", 0, MAX_TIMER_MS),
    healthCheckIntervalMs: int("healthCheckIntervalMs", 50, MAX_TIMER_MS),
    limits: {
      rateLimitRps: int("rateLimitRps", 0, 1_000_000),
      rateLimitBurst: int("rateLimitBurst", 1, 10_000_000),
      maxConnections: int("maxConnections", 1, 1_000_000),
      firstByteTimeoutMs: int("firstByteTimeoutMs", 1, MAX_TIMER_MS),
      maxConnectionIdleMs: int("maxConnectionIdleMs", 1, MAX_TIMER_MS),
      keepaliveTimeMs: int("keepaliveTimeMs", 1, MAX_TIMER_MS),
      keepaliveTimeoutMs: int("keepaliveTimeoutMs", 1, MAX_TIMER_MS),
      watchStallTimeoutMs: int("watchStallTimeoutMs", 1, MAX_TIMER_MS),
    },
    metricsPort: raw("metricsPort") === undefined ? undefined : int("metricsPort", 0, 65535),
    metricsToken: parseMetricsToken(raw("metricsToken")),
    authTokens,
    tls:
      tlsCert === undefined || tlsKey === undefined
        ? undefined
        : { certFile: tlsCert, keyFile: tlsKey, clientCaFile: tlsClientCa },
    logLevel: oneOf("logLevel", ["debug", "info", "warn", "error"] as const),
    corsOrigins: parseCorsOrigins(raw("corsOrigin")),
    traceThreadIds: oneOf("traceThreadIds", ["false", "true"] as const) === "true",
  };
}

function nonEmpty(v: string | undefined): string | undefined {
  return v === undefined || v === "" ? undefined : v;
}

function parseFlags(argv: readonly string[]): Map<string, string> {
  const known = new Set(Object.values(SETTINGS).map((s: Setting) => s.flag));
  const repeatable = new Set(
    Object.values(SETTINGS)
      .filter((s: Setting) => s.repeatable === true)
      .map((s: Setting) => s.flag),
  );
  const booleans = new Set(
    Object.values(SETTINGS)
      .filter((s: Setting) => s.boolean === true)
      .map((s: Setting) => s.flag),
  );
  const out = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? "";
    if (!arg.startsWith("--")) throw new ConfigError(`unexpected argument "${arg}"`);
    const eq = arg.indexOf("=");
    const name = eq === -1 ? arg.slice(2) : arg.slice(2, eq);
    if (!known.has(name)) throw new ConfigError(`unknown flag --${name} (see --help)`);
    let value: string | undefined;
    if (eq === -1 && booleans.has(name)) {
      // `--flag` alone is true; `--flag true` / `--flag false` keep working.
      const next = argv[i + 1];
      value = "true";
      if (next === "true" || next === "false") {
        value = next;
        i++;
      }
    } else if (eq === -1) {
      value = argv[++i];
      if (value === undefined) throw new ConfigError(`--${name} needs a value`);
    } else {
      value = arg.slice(eq + 1);
    }
    const earlier = out.get(name);
    out.set(name, earlier !== undefined && repeatable.has(name) ? `${earlier},${value}` : value);
  }
  return out;
}

const TTL_UNITS: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};
/** Ten years, the longest ttl (as AddRequest.ttl). */
const MAX_TTL_MS = 10 * 365 * 86_400_000;

/** "0", or a whole number with a unit: 500ms, 90s, 30m, 24h, 7d. */
function parseTtl(v: string): number {
  const m = /^(\d{1,12})(ms|s|m|h|d)?$/.exec(v);
  const unit = m?.[2] ?? (m?.[1] === "0" ? "ms" : undefined);
  const ms = m === null || unit === undefined ? Number.NaN : Number(m[1]) * (TTL_UNITS[unit] ?? 0);
  if (!(ms >= 0 && ms <= MAX_TTL_MS)) {
    throw new ConfigError(
      `--default-ttl / WINDLASS_DEFAULT_TTL: "${v}" is not 0 or a duration like 30m, 24h or 7d (at most 10 years)`,
    );
  }
  return ms;
}

function parseStore(
  v: string,
  sqliteCacheMb: number,
  redis: { minReplicas: number; replicaWaitMs: number },
  postgresPoolSize: number,
): StoreConfig {
  if (redis.minReplicas > 0 && !/^redis/.test(v)) {
    throw new ConfigError(
      "--redis-min-replicas / WINDLASS_REDIS_MIN_REPLICAS: only a redis store has replicas to wait for",
    );
  }
  if (v === "memory") return { kind: "memory" };
  if (v.startsWith("sqlite:") && v.length > "sqlite:".length) {
    return { kind: "sqlite", path: v.slice("sqlite:".length), cacheMb: sqliteCacheMb };
  }
  if (/^rediss?:\/\/\S+$/.test(v)) return { kind: "redis", url: v, ...redis };
  if (v.startsWith(SENTINEL_SCHEME)) {
    parseRedisSentinelUrl(v);
    return { kind: "redis", url: v, ...redis };
  }
  if (/^postgres(ql)?:\/\/\S+$/.test(v)) {
    return { kind: "postgres", url: v, poolSize: postgresPoolSize };
  }
  throw new ConfigError(
    `--store / WINDLASS_STORE: "${redact(v)}" is not memory, sqlite:PATH, redis://HOST:PORT/DB, redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER or postgres://USER@HOST:PORT/DB`,
  );
}

const SENTINEL_SCHEME = "redis+sentinel://";

/** The URL with its userinfo (it may hold a password) replaced, for error messages. */
function redact(url: string): string {
  return url.replace(/^([a-z+]+:\/\/)[^/]*@/, "$1***@");
}

/**
 * `redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT…]/MASTER`: the
 * sentinels to ask and the name they monitor the primary under. Throws
 * ConfigError naming --store (never echoing the password).
 */
export function parseRedisSentinelUrl(url: string): RedisSentinelUrl {
  const bad = (why: string) =>
    new ConfigError(`--store / WINDLASS_STORE: "${redact(url)}": ${why}`);
  if (!url.startsWith(SENTINEL_SCHEME)) throw bad("does not start with redis+sentinel://");
  const rest = url.slice(SENTINEL_SCHEME.length);
  const at = rest.lastIndexOf("@");
  const userinfo = at === -1 ? undefined : rest.slice(0, at);
  const slash = rest.indexOf("/", at + 1);
  if (slash === -1) throw bad("names no master (…/MASTER after the sentinels)");
  const hosts = rest.slice(at + 1, slash);
  const decode = (part: string, what: string) => {
    try {
      return decodeURIComponent(part);
    } catch {
      throw bad(`its ${what} is not valid percent-encoding`);
    }
  };
  const masterName = decode(rest.slice(slash + 1), "master name");
  if (!/^[A-Za-z0-9._-]+$/.test(masterName)) {
    throw bad("the master name must be letters, digits, '.', '_' or '-'");
  }
  const sentinels = hosts.split(",").map((hostPort) => {
    const m = /^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):(\d{1,5})$/.exec(hostPort);
    const port = Number(m?.[2]);
    if (m?.[1] === undefined || !(port >= 1 && port <= 65535)) {
      throw bad(`"${hostPort}" is not a sentinel HOST:PORT`);
    }
    return { host: m[1].replace(/^\[(.*)\]$/, "$1"), port };
  });
  let username: string | undefined;
  let password: string | undefined;
  if (userinfo !== undefined) {
    const colon = userinfo.indexOf(":");
    const user = decode(colon === -1 ? userinfo : userinfo.slice(0, colon), "user name");
    username = user === "" ? undefined : user;
    password = colon === -1 ? undefined : decode(userinfo.slice(colon + 1), "password");
  }
  return { sentinels, masterName, username, password };
}

// scheme://host[:port], as a browser sends it in Origin: no path, no slash at the end.
const ORIGIN = /^https?:\/\/[^\s/]+$/;

function parseCorsOrigins(v: string | undefined): string[] {
  if (v === undefined) return [];
  const origins = v
    .split(",")
    .map((o) => o.trim())
    .filter((o) => o !== "");
  for (const o of origins) {
    if (o !== "*" && !ORIGIN.test(o)) {
      throw new ConfigError(
        `--cors-origin / WINDLASS_CORS_ORIGIN: "${o}" is not an origin like https://app.example.com (or *)`,
      );
    }
  }
  return origins;
}

function parseAuthTokens(v: string | undefined): Map<string, string> | undefined {
  if (v === undefined) return undefined;
  const map = new Map<string, string>();
  for (const [i, pair] of v.split(",").entries()) {
    const eq = pair.indexOf("=");
    const token = pair.slice(0, eq).trim();
    const namespace = pair.slice(eq + 1).trim();
    if (eq <= 0 || token === "" || namespace === "") {
      // Never echo the value: it holds secrets.
      throw new ConfigError(`WINDLASS_AUTH_TOKENS: entry ${i + 1} is not TOKEN=NAMESPACE`);
    }
    map.set(token, namespace);
  }
  return map;
}

function parseMetricsToken(v: string | undefined): string | undefined {
  if (v === undefined) return undefined;
  if (/\s/.test(v)) {
    // Never echo the value: it is a secret.
    throw new ConfigError("WINDLASS_METRICS_TOKEN: must not contain whitespace");
  }
  return v;
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
