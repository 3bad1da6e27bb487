import { describe, expect, it } from "vitest";
import { ConfigError, helpText, loadConfig, parseRedisSentinelUrl } from "../src/config.js";

describe("configuration", () => {
  it("has the documented defaults", () => {
    const c = loadConfig([], {});
    expect(c).toMatchObject({
      host: "127.0.0.1",
      grpcPort: 50051,
      httpPort: 8080,
      store: { kind: "memory" },
      summarizer: "extractive",
      openai: undefined,
      defaultStrategy: "window",
      maxMessageBytes: 4 * 1024 * 1024,
      maxMessagesPerAdd: 1000,
      jsonIgnoreUnknownFields: false,
      authTokens: undefined,
      tls: undefined,
      logLevel: "info",
    });
  });

  it("reads WINDLASS_ variables, and flags win over them", () => {
    const env = {
      WINDLASS_HOST: "0.0.0.0",
      WINDLASS_PORT: "6000",
      WINDLASS_HTTP_PORT: "6001",
      WINDLASS_STORE: "sqlite:/tmp/m.db",
      WINDLASS_SUMMARIZER: "openai",
      WINDLASS_OPENAI_BASE_URL: "http://127.0.0.1:9/v1",
      WINDLASS_OPENAI_MODEL: "llama",
      WINDLASS_OPENAI_API_KEY: "sk-x",
    };
    const c = loadConfig(["--port=7000", "--store", "redis://127.0.0.1:6379/0"], env);
    expect(c.host).toBe("0.0.0.0");
    expect(c.grpcPort).toBe(7000);
    expect(c.httpPort).toBe(6001);
    expect(c.store).toEqual({
      kind: "redis",
      url: "redis://127.0.0.1:6379/0",
      minReplicas: 0,
      replicaWaitMs: 1000,
      namespaceShards: 1,
    });
    expect(c.openai).toMatchObject({
      baseUrl: "http://127.0.0.1:9/v1",
      model: "llama",
      apiKey: "sk-x",
    });
    expect(loadConfig([], env).store).toEqual({ kind: "sqlite", path: "/tmp/m.db", cacheMb: 256 });
  });

  it("bounds the SQLite store's caches by --sqlite-cache-mb, validated", () => {
    const env = { WINDLASS_STORE: "sqlite:/tmp/m.db", WINDLASS_SQLITE_CACHE_MB: "64" };
    expect(loadConfig([], env).store).toEqual({ kind: "sqlite", path: "/tmp/m.db", cacheMb: 64 });
    expect(loadConfig(["--sqlite-cache-mb", "0"], env).store).toMatchObject({ cacheMb: 0 });
    for (const bad of ["-1", "lots", "1.5", "2000000"]) {
      expect(() => loadConfig(["--sqlite-cache-mb", bad], env)).toThrow(
        /--sqlite-cache-mb \/ WINDLASS_SQLITE_CACHE_MB/,
      );
    }
  });

  it("asks the Redis store for replica confirmation by --redis-min-replicas, validated", () => {
    const redis = { WINDLASS_STORE: "redis://127.0.0.1:6379/0", WINDLASS_REDIS_MIN_REPLICAS: "2" };
    expect(loadConfig(["--redis-replica-wait-ms", "250"], redis).store).toMatchObject({
      minReplicas: 2,
      replicaWaitMs: 250,
    });
    expect(loadConfig(["--redis-min-replicas=0"], redis).store).toMatchObject({ minReplicas: 0 });
    for (const bad of ["-1", "one", "1.5", "101"]) {
      expect(() => loadConfig(["--redis-min-replicas", bad], redis)).toThrow(
        /^--redis-min-replicas \/ WINDLASS_REDIS_MIN_REPLICAS: /,
      );
    }
    expect(() => loadConfig(["--redis-min-replicas", "1"], {})).toThrow(
      /^--redis-min-replicas \/ WINDLASS_REDIS_MIN_REPLICAS: only a redis store/,
    );
    // WAIT's 0 means "forever": not a timeout.
    for (const bad of ["0", "soon", "2147483648"]) {
      expect(() => loadConfig(["--redis-replica-wait-ms", bad], redis)).toThrow(
        /^--redis-replica-wait-ms \/ WINDLASS_REDIS_REPLICA_WAIT_MS: /,
      );
    }
  });

  it("parses redis+sentinel:// store URLs, and names --store without echoing a password", () => {
    const url = "redis+sentinel://:s3cret@127.0.0.1:26379,sentinel-b:26380,[::1]:26381/mymaster";
    expect(loadConfig(["--store", url], {}).store).toMatchObject({ kind: "redis", url });
    expect(parseRedisSentinelUrl(url)).toEqual({
      sentinels: [
        { host: "127.0.0.1", port: 26379 },
        { host: "sentinel-b", port: 26380 },
        { host: "::1", port: 26381 },
      ],
      masterName: "mymaster",
      username: undefined,
      password: "s3cret",
    });
    expect(parseRedisSentinelUrl("redis+sentinel://app:p%40ss@h:1/m")).toMatchObject({
      username: "app",
      password: "p@ss",
    });
    for (const bad of [
      "redis+sentinel://:s3cret@127.0.0.1:26379",
      "redis+sentinel://:s3cret@127.0.0.1/mymaster",
      "redis+sentinel://:s3cret@127.0.0.1:99999/mymaster",
      "redis+sentinel://:s3cret@a:1,,b:2/mymaster",
      "redis+sentinel://:s3cret@a:1/my master",
      "redis+sentinel://:s3cret@a:1/",
    ]) {
      const err = (() => {
        try {
          loadConfig(["--store", bad], {});
        } catch (e) {
          return e as Error;
        }
      })();
      expect(err).toBeInstanceOf(ConfigError);
      expect(err?.message).toMatch(/^--store \/ WINDLASS_STORE: /);
      expect(err?.message).not.toContain("s3cret");
    }
    expect(() => loadConfig(["--store", "rediz://:s3cret@h:1/0"], {})).toThrow(
      /^(?!.*s3cret).*--store/,
    );
  });

  it("takes a postgres:// or postgresql:// store with --postgres-pool-size, validated", () => {
    const url = "postgres://windlass@db.internal:5432/memory";
    expect(loadConfig(["--store", url], {}).store).toEqual({ kind: "postgres", url, poolSize: 10 });
    const env = { WINDLASS_STORE: "postgresql://u@h/db", WINDLASS_POSTGRES_POOL_SIZE: "25" };
    expect(loadConfig([], env).store).toEqual({
      kind: "postgres",
      url: "postgresql://u@h/db",
      poolSize: 25,
    });
    for (const bad of ["0", "many", "1001"]) {
      expect(() => loadConfig(["--postgres-pool-size", bad], env)).toThrow(
        /--postgres-pool-size \/ WINDLASS_POSTGRES_POOL_SIZE/,
      );
    }
    expect(() => loadConfig(["--store", "postgres:/nohost"], {})).toThrow(
      /--store \/ WINDLASS_STORE/,
    );
  });

  it("maps bearer tokens to namespaces from the environment only", () => {
    const c = loadConfig([], { WINDLASS_AUTH_TOKENS: "t1=team-a, t2=team-b" });
    expect([...(c.authTokens ?? [])]).toEqual([
      ["t1", "team-a"],
      ["t2", "team-b"],
    ]);
    expect(() => loadConfig(["--auth-tokens", "t=x"], {})).toThrow(/environment/);
    const err = (() => {
      try {
        loadConfig([], { WINDLASS_AUTH_TOKENS: "secret-without-namespace" });
      } catch (e) {
        return e as Error;
      }
    })();
    expect(err).toBeInstanceOf(ConfigError);
    expect(err?.message).not.toContain("secret-without-namespace");
  });

  it("relaxes unknown JSON fields only when asked to, by flag or environment", () => {
    expect(loadConfig(["--json-ignore-unknown-fields", "true"], {}).jsonIgnoreUnknownFields).toBe(
      true,
    );
    const env = { WINDLASS_JSON_IGNORE_UNKNOWN_FIELDS: "true" };
    expect(loadConfig([], env).jsonIgnoreUnknownFields).toBe(true);
    expect(loadConfig(["--json-ignore-unknown-fields=false"], env).jsonIgnoreUnknownFields).toBe(
      false,
    );
  });

  it("takes a boolean flag alone as true, and still reads --flag=false and --flag false", () => {
    const env = { WINDLASS_TRACE_THREAD_IDS: "true" };
    const read = (argv: string[]) => {
      const c = loadConfig(argv, env);
      return [c.jsonIgnoreUnknownFields, c.traceThreadIds];
    };
    expect(read(["--json-ignore-unknown-fields"])).toEqual([true, true]);
    // Alone before another flag, which is not taken as its value.
    expect(read(["--json-ignore-unknown-fields", "--trace-thread-ids", "false"])).toEqual([
      true,
      false,
    ]);
    expect(read(["--trace-thread-ids=false", "--json-ignore-unknown-fields", "true"])).toEqual([
      true,
      false,
    ]);
    expect(read(["--json-ignore-unknown-fields", "false", "--trace-thread-ids"])).toEqual([
      false,
      true,
    ]);
    // A word after a boolean flag is not its value: it is an argument, refused as before.
    expect(() => loadConfig(["--trace-thread-ids", "yes"], {})).toThrow(
      'unexpected argument "yes"',
    );
    expect(() => loadConfig(["--trace-thread-ids=yes"], {})).toThrow(/--trace-thread-ids.*true/);
  });

  it.each([
    [["--json-ignore-unknown-fields=yes"], /--json-ignore-unknown-fields.*true, false/],
    [["--http-port", "-1"], /--http-port/],
    [["--max-message-bytes", "12abc"], /--max-message-bytes/],
    [["--default-strategy", "fancy"], /buffer, window, summary/],
    [["--log-level", "loud"], /--log-level/],
    [["--tls-cert", "/c.pem"], /go together/],
    [["--openai-base-url", "ftp://x"], /http\(s\) URL/],
    [["serve"], /unexpected argument/],
    [["--port"], /needs a value/],
  ])("refuses %j", (argv, message) => {
    expect(() => loadConfig(argv, {})).toThrow(message);
  });

  it("lists every setting in --help", () => {
    const text = helpText();
    expect(text).toContain("WINDLASS_OPENAI_API_KEY (env only)");
    expect(text).toContain(
      "--rate-limit-rps / WINDLASS_RATE_LIMIT_RPS (default 0, or 1000 with WINDLASS_AUTH_TOKENS)",
    );
    expect(text).toContain("--get-fold-wait-ms / WINDLASS_GET_FOLD_WAIT_MS");
    expect(text).toContain("--trace-thread-ids[=true|false] / WINDLASS_TRACE_THREAD_IDS");
  });
});

describe("limits per caller and per connection", () => {
  it("has defaults that protect a small node, each a flag with an environment twin", () => {
    // No auth: one namespace for every caller, so no per-namespace rate limit by default.
    expect(loadConfig([], {}).limits.rateLimitRps).toBe(0);
    const c = loadConfig([], { WINDLASS_AUTH_TOKENS: "t=team" });
    expect(c.limits).toEqual({
      rateLimitRps: 1000,
      rateLimitBurst: 2000,
      maxConnections: 500,
      firstByteTimeoutMs: 10_000,
      maxConnectionIdleMs: 300_000,
      keepaliveTimeMs: 60_000,
      keepaliveTimeoutMs: 20_000,
      watchStallTimeoutMs: 30_000,
    });
    expect(c.metricsPort).toBeUndefined();
    expect(c.metricsToken).toBeUndefined();
    const set = loadConfig(["--rate-limit-rps", "0", "--metrics-port=0"], {
      WINDLASS_RATE_LIMIT_RPS: "5",
      WINDLASS_MAX_CONNECTIONS: "7",
      WINDLASS_WATCH_STALL_TIMEOUT_MS: "1000",
      WINDLASS_METRICS_TOKEN: "scrape-me",
    });
    expect(set.limits).toMatchObject({
      rateLimitRps: 0,
      maxConnections: 7,
      watchStallTimeoutMs: 1000,
    });
    expect(set.metricsPort).toBe(0);
    expect(set.metricsToken).toBe("scrape-me");
  });

  it("rejects bad values naming the setting, and takes the metrics token from the environment only", () => {
    expect(() => loadConfig(["--max-connections", "0"], {})).toThrow(/--max-connections/);
    expect(() => loadConfig(["--rate-limit-burst", "0"], {})).toThrow(/--rate-limit-burst/);
    expect(() => loadConfig(["--watch-stall-timeout-ms", "soon"], {})).toThrow(
      /--watch-stall-timeout-ms/,
    );
    expect(() => loadConfig(["--metrics-port", "70000"], {})).toThrow(/--metrics-port/);
    expect(() => loadConfig(["--metrics-token", "x"], {})).toThrow(/environment/);
    expect(() => loadConfig([], { WINDLASS_METRICS_TOKEN: "has space" })).toThrow(
      /WINDLASS_METRICS_TOKEN/,
    );
  });

  it("caps every setting in milliseconds at the longest delay a timer can have", () => {
    // Node would run a longer setTimeout after 1 ms: "never" must not become "at once".
    const flags = [
      "--openai-timeout-ms",
      "--get-fold-wait-ms",
      "--progress-interval-ms",
      "--shutdown-grace-ms",
      "--health-check-interval-ms",
      "--first-byte-timeout-ms",
      "--max-connection-idle-ms",
      "--keepalive-time-ms",
      "--keepalive-timeout-ms",
      "--watch-stall-timeout-ms",
    ];
    // The OpenAI settings are read only with an endpoint configured.
    const endpoint = ["--openai-base-url", "http://127.0.0.1:9/v1"];
    for (const flag of flags) {
      expect(() => loadConfig([...endpoint, flag, "2147483648"], {}), flag).toThrow(flag);
      expect(() => loadConfig([...endpoint, flag, "2147483647"], {}), flag).not.toThrow();
    }
  });
});

describe("thread retention settings", () => {
  it("reads --default-ttl as a duration and the sweep interval in ms, refusing anything else", () => {
    expect(loadConfig([], {}).defaultTtlMs).toBe(0);
    expect(loadConfig([], {}).ttlSweepIntervalMs).toBe(1000);
    for (const [text, ms] of [
      ["0", 0],
      ["500ms", 500],
      ["90s", 90_000],
      ["30m", 1_800_000],
      ["24h", 86_400_000],
      ["7d", 604_800_000],
    ] as const) {
      expect(loadConfig(["--default-ttl", text], {}).defaultTtlMs, text).toBe(ms);
    }
    expect(loadConfig([], { WINDLASS_DEFAULT_TTL: "2h" }).defaultTtlMs).toBe(7_200_000);
    for (const bad of ["10", "1.5h", "-1s", "3w", "h", "4000d"]) {
      expect(() => loadConfig(["--default-ttl", bad], {}), bad).toThrow(
        `--default-ttl / WINDLASS_DEFAULT_TTL: "${bad}" is not 0 or a duration`,
      );
    }
    expect(loadConfig(["--ttl-sweep-interval-ms", "50"], {}).ttlSweepIntervalMs).toBe(50);
    expect(() => loadConfig(["--ttl-sweep-interval-ms", "5"], {})).toThrow(
      "--ttl-sweep-interval-ms",
    );
  });
});

describe("--health-check-interval-ms", () => {
  it("defaults to 1000, reads the flag and the environment, and refuses less than 50 naming the flag", () => {
    expect(loadConfig([], {}).healthCheckIntervalMs).toBe(1000);
    expect(loadConfig(["--health-check-interval-ms", "250"], {}).healthCheckIntervalMs).toBe(250);
    expect(
      loadConfig([], { WINDLASS_HEALTH_CHECK_INTERVAL_MS: "5000" }).healthCheckIntervalMs,
    ).toBe(5000);
    expect(
      loadConfig(["--health-check-interval-ms=60"], { WINDLASS_HEALTH_CHECK_INTERVAL_MS: "5000" })
        .healthCheckIntervalMs,
    ).toBe(60);
    for (const bad of ["49", "0", "-1", "1.5", "1s", ""]) {
      expect(() => loadConfig([`--health-check-interval-ms=${bad}`], {}), bad).toThrow(
        `--health-check-interval-ms / WINDLASS_HEALTH_CHECK_INTERVAL_MS: "${bad}" is not a whole number from 50 to 2147483647`,
      );
    }
  });
});
