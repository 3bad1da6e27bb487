/**
 * Every setting of the server: its flag, environment variable, default and
 * help line (src/config.ts reads them; `--help` and the README list them).
 */
export interface Setting {
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
    help: "memory | sqlite:PATH | redis://HOST:PORT/DB | redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER | redis-cluster://HOST:PORT[,HOST:PORT…] | postgres://USER@HOST:PORT/DB",
  },
  redisMinReplicas: {
    flag: "redis-min-replicas",
    env: "WINDLASS_REDIS_MIN_REPLICAS",
    default: "0",
    help: "Redis store: an Add, Rewind, import or Clear is acknowledged only once this many replicas have it (WAIT); 0: once the primary has it",
  },
  redisReplicaWaitMs: {
    flag: "redis-replica-wait-ms",
    env: "WINDLASS_REDIS_REPLICA_WAIT_MS",
    default: "1000",
    help: "longest such a write waits for the replicas before UNAVAILABLE (a retry with its request_id answers the stored result)",
  },
  redisNamespaceShards: {
    flag: "redis-namespace-shards",
    env: "WINDLASS_REDIS_NAMESPACE_SHARDS",
    default: "1",
    help: "Redis store: hash slots each namespace is split into, by thread id (1 to 64; fixed per deployment); 1: a namespace is one slot",
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

export type SettingKey = keyof typeof SETTINGS;
