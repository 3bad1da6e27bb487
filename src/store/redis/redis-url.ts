/**
 * Where a single-node Redis store connects: a redis:// or rediss:// URL
 * read as node-redis reads it (resp-connection.ts connects there).
 */

export interface RedisEndpoint {
  readonly host: string;
  readonly port: number;
  readonly tls: boolean;
  readonly username: string | undefined;
  readonly password: string | undefined;
  readonly database: number;
}

/** The parts of a redis:// or rediss:// URL, as node-redis reads them. */
export function parseRedisUrl(url: string): RedisEndpoint {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new TypeError("redis store: the URL is not a valid redis:// or rediss:// URL");
  }
  if (u.protocol !== "redis:" && u.protocol !== "rediss:") {
    throw new TypeError("redis store: the URL's scheme is not redis:// or rediss://");
  }
  const database = u.pathname.length > 1 ? Number(u.pathname.slice(1)) : 0;
  if (!Number.isInteger(database) || database < 0) {
    throw new TypeError("redis store: the URL's path is not a database number");
  }
  return {
    // An IPv6 literal comes in brackets.
    host: u.hostname.replace(/^\[([0-9a-fA-F:.]+)\]$/, "$1") || "localhost",
    port: u.port === "" ? 6379 : Number(u.port),
    tls: u.protocol === "rediss:",
    username: u.username === "" ? undefined : decodeURIComponent(u.username),
    password: u.password === "" ? undefined : decodeURIComponent(u.password),
    database,
  };
}
