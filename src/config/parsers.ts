import type { RedisClusterUrl, RedisSentinelUrl, StoreConfig } from "../config.js";
import { ConfigError } from "./config-error.js";
import { SETTINGS, type Setting } from "./settings.js";

/** The parsers of settings whose values have a shape of their own; each throws ConfigError naming the setting. */

export function nonEmpty(v: string | undefined): string | undefined {
  return v === undefined || v === "" ? undefined : v;
}

export function parseFlags(argv: readonly string[]): Map<string, string> {
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
export function parseTtl(v: string): number {
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

export function parseStore(
  v: string,
  sqliteCacheMb: number,
  redis: { minReplicas: number; replicaWaitMs: number; namespaceShards: number },
  postgresPoolSize: number,
): StoreConfig {
  if (redis.namespaceShards > 1 && !/^redis/.test(v)) {
    throw new ConfigError(
      "--redis-namespace-shards / WINDLASS_REDIS_NAMESPACE_SHARDS: only a redis store splits namespaces into shards",
    );
  }
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
  if (v.startsWith(CLUSTER_SCHEME)) {
    parseRedisClusterUrl(v);
    return { kind: "redis", url: v, ...redis };
  }
  if (/^postgres(ql)?:\/\/\S+$/.test(v)) {
    return { kind: "postgres", url: v, poolSize: postgresPoolSize };
  }
  throw new ConfigError(
    `--store / WINDLASS_STORE: "${redact(v)}" is not memory, sqlite:PATH, redis://HOST:PORT/DB, redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER, redis-cluster://HOST:PORT[,HOST:PORT…] or postgres://USER@HOST:PORT/DB`,
  );
}

/** The URL schemes of the Redis store's Sentinel and Cluster clients (the store tells them apart by these). */
export const SENTINEL_SCHEME = "redis+sentinel://";
export const CLUSTER_SCHEME = "redis-cluster://";

/** The URL with its userinfo (it may hold a password) replaced, for error messages. */
function redact(url: string): string {
  return url.replace(/^([a-z+-]+:\/\/)[^/]*@/, "$1***@");
}

/**
 * `redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT…]/MASTER`: the
 * sentinels to ask and the name they monitor the primary under. Throws
 * ConfigError naming --store (never echoing the password).
 */
export function parseRedisSentinelUrl(url: string): RedisSentinelUrl {
  const bad = badStoreUrl(url);
  if (!url.startsWith(SENTINEL_SCHEME)) throw bad("does not start with redis+sentinel://");
  const rest = url.slice(SENTINEL_SCHEME.length);
  const at = rest.lastIndexOf("@");
  const slash = rest.indexOf("/", at + 1);
  if (slash === -1) throw bad("names no master (…/MASTER after the sentinels)");
  const masterName = decodeUrlPart(bad, rest.slice(slash + 1), "master name");
  if (!/^[A-Za-z0-9._-]+$/.test(masterName)) {
    throw bad("the master name must be letters, digits, '.', '_' or '-'");
  }
  const sentinels = parseHostList(bad, rest.slice(at + 1, slash), "sentinel");
  return {
    sentinels,
    masterName,
    ...parseUserinfo(bad, at === -1 ? undefined : rest.slice(0, at)),
  };
}

/**
 * `redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT…][/]`: seed nodes
 * of a Redis Cluster (the client learns the rest from them). Throws
 * ConfigError naming --store (never echoing the password).
 */
export function parseRedisClusterUrl(url: string): RedisClusterUrl {
  const bad = badStoreUrl(url);
  if (!url.startsWith(CLUSTER_SCHEME)) throw bad("does not start with redis-cluster://");
  const rest = url.slice(CLUSTER_SCHEME.length);
  const at = rest.lastIndexOf("@");
  const hosts = rest.slice(at + 1).replace(/\/$/, "");
  if (hosts.includes("/")) throw bad("a cluster has no database number or path (only database 0)");
  const nodes = parseHostList(bad, hosts, "cluster node");
  return { nodes, ...parseUserinfo(bad, at === -1 ? undefined : rest.slice(0, at)) };
}

type BadUrl = (why: string) => ConfigError;

function badStoreUrl(url: string): BadUrl {
  return (why) => new ConfigError(`--store / WINDLASS_STORE: "${redact(url)}": ${why}`);
}

function decodeUrlPart(bad: BadUrl, part: string, what: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw bad(`its ${what} is not valid percent-encoding`);
  }
}

/** "HOST:PORT[,HOST:PORT…]", IPv6 hosts in brackets. */
function parseHostList(bad: BadUrl, hosts: string, what: string): { host: string; port: number }[] {
  return hosts.split(",").map((hostPort) => {
    const m = /^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):(\d{1,5})$/.exec(hostPort);
    const port = Number(m?.[2]);
    if (m?.[1] === undefined || !(port >= 1 && port <= 65535)) {
      throw bad(`"${hostPort}" is not a ${what} HOST:PORT`);
    }
    return { host: m[1].replace(/^\[(.*)\]$/, "$1"), port };
  });
}

/** "[USER][:PASSWORD]", percent-decoded; an empty user is none. */
function parseUserinfo(
  bad: BadUrl,
  userinfo: string | undefined,
): { username: string | undefined; password: string | undefined } {
  if (userinfo === undefined) return { username: undefined, password: undefined };
  const colon = userinfo.indexOf(":");
  const user = decodeUrlPart(bad, colon === -1 ? userinfo : userinfo.slice(0, colon), "user name");
  return {
    username: user === "" ? undefined : user,
    password: colon === -1 ? undefined : decodeUrlPart(bad, userinfo.slice(colon + 1), "password"),
  };
}

// scheme://host[:port], as a browser sends it in Origin: no path, no slash at the end.
const ORIGIN = /^https?:\/\/[^\s/]+$/;

export function parseCorsOrigins(v: string | undefined): string[] {
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

export function parseAuthTokens(v: string | undefined): Map<string, string> | undefined {
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

export function parseMetricsToken(v: string | undefined): string | undefined {
  if (v === undefined) return undefined;
  if (/\s/.test(v)) {
    // Never echo the value: it is a secret.
    throw new ConfigError("WINDLASS_METRICS_TOKEN: must not contain whitespace");
  }
  return v;
}
