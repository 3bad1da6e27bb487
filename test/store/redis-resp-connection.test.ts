import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ErrorReply } from "redis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseRedisUrl } from "../../src/store/redis/redis-url.js";
import {
  CommandQueueFull,
  ConnectionLost,
  ConnectionNotReady,
  RespConnection,
  type RespConnectionOptions,
} from "../../src/store/redis/resp-connection.js";
import { freePort, type RedisServer, startRedisServer } from "../support/redis-server.js";
import { writeSelfSignedCert } from "../support/self-signed.js";

/**
 * The single-node connection (resp-connection.ts) against a real
 * redis-server: replies in order under pipelining, MULTI, the bound on
 * commands awaiting replies while Redis hangs (SIGSTOP), no offline queue,
 * reconnecting after a restart, AUTH and SELECT, close and destroy.
 */

let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedisServer();
});
afterAll(async () => {
  await redis?.stop();
});

function options(url: string, more: Partial<RespConnectionOptions> = {}): RespConnectionOptions {
  return {
    endpoint: parseRedisUrl(url),
    connectTimeoutMs: 1000,
    reconnect: () => 50,
    maxQueued: 10_000,
    ...more,
  };
}

async function opened(url: string, more: Partial<RespConnectionOptions> = {}) {
  const c = new RespConnection(options(url, more));
  const errors: Error[] = [];
  c.on("error", (err: Error) => errors.push(err));
  await c.connect();
  return { c, errors };
}

async function waitFor(cond: () => boolean, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error("resolved");
}

describe("parseRedisUrl", () => {
  it("reads host, port, credentials and database as node-redis does", () => {
    expect(parseRedisUrl("redis://u%40x:p%3Aw@example.org:6380/3")).toEqual({
      host: "example.org",
      port: 6380,
      tls: false,
      username: "u@x",
      password: "p:w",
      database: 3,
    });
    expect(parseRedisUrl("rediss://:secret@[::1]")).toEqual({
      host: "::1",
      port: 6379,
      tls: true,
      username: undefined,
      password: "secret",
      database: 0,
    });
    expect(() => parseRedisUrl("redis://h/x")).toThrow(/database number/);
    expect(() => parseRedisUrl("http://h")).toThrow(/scheme/);
  });
});

describe("RespConnection", () => {
  it("answers pipelined commands in order, with every reply type", async () => {
    const { c } = await opened(redis.url);
    const key = `pipe-${Date.now()}`;
    const replies = await Promise.all(
      Array.from({ length: 2000 }, () => c.sendCommand(["INCR", key])),
    );
    expect(replies).toEqual(Array.from({ length: 2000 }, (_, i) => i + 1));
    await c.sendCommand(["RPUSH", `${key}:l`, "a", "é🙂", ""]);
    expect(await c.sendCommand(["LRANGE", `${key}:l`, "0", "-1"])).toEqual(["a", "é🙂", ""]);
    expect(await c.sendCommand(["GET", `${key}:none`])).toBeNull();
    expect(await c.sendCommand(["PING"])).toBe("PONG");
    const big = "z".repeat(3 * 1024 * 1024);
    await c.sendCommand(["SET", `${key}:big`, big]);
    expect(await c.sendCommand(["GET", `${key}:big`])).toBe(big);
    const err = await rejection(c.sendCommand(["INCR", `${key}:l`]));
    expect(err).toBeInstanceOf(ErrorReply);
    expect((err as Error).message).toMatch(/^WRONGTYPE/);
    // The connection goes on after an error reply.
    expect(await c.sendCommand(["INCR", key])).toBe(2001);
    c.destroy();
  });

  it("sends MULTI … EXEC back to back, between other callers' commands", async () => {
    const { c } = await opened(redis.url);
    const key = `multi-${Date.now()}`;
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        i % 2 === 0
          ? c.sendAtomic([
              ["INCR", key],
              ["INCR", key],
            ])
          : c.sendCommand(["INCR", key]),
      ),
    );
    // Each transaction's two increments are adjacent: nothing ran between them.
    for (let i = 0; i < results.length; i += 2) {
      const [a, b] = results[i] as number[];
      expect(b).toBe((a as number) + 1);
    }
    // A command that fails when run rejects the whole call; one refused when queued aborts it.
    await c.sendCommand(["SET", `${key}:s`, "text"]);
    expect(await rejection(c.sendAtomic([["INCR", `${key}:s`]]))).toBeInstanceOf(ErrorReply);
    const aborted = await rejection(c.sendAtomic([["INCR"], ["INCR", key]]));
    expect((aborted as Error).message).toMatch(/^EXECABORT/);
    expect(await c.sendCommand(["GET", `${key}:s`])).toBe("text");
    c.destroy();
  });

  it("fails commands at once past the bound while Redis hangs, and resumes after", async () => {
    const { c } = await opened(redis.url, { maxQueued: 50 });
    const pid = redis.pid as number;
    process.kill(pid, "SIGSTOP");
    let resumed = false;
    try {
      const held = Array.from({ length: 50 }, () => c.sendCommand(["PING"]));
      const refused = await rejection(c.sendCommand(["PING"]));
      expect(refused).toBeInstanceOf(CommandQueueFull);
      expect(await rejection(c.sendAtomic([["PING"]]))).toBeInstanceOf(CommandQueueFull);
      expect(c.awaitingReplies).toBe(50);
      process.kill(pid, "SIGCONT");
      resumed = true;
      expect(await Promise.all(held)).toEqual(Array(50).fill("PONG"));
    } finally {
      if (!resumed) process.kill(pid, "SIGCONT");
    }
    expect(await c.sendCommand(["PING"])).toBe("PONG");
    c.destroy();
  });

  it("refuses commands while Redis is away and reconnects when it is back", async () => {
    const own = await startRedisServer();
    try {
      const { c, errors } = await opened(own.url);
      let readies = 0;
      c.on("ready", () => {
        readies += 1;
      });
      await c.sendCommand(["SET", "k", "v"]);
      const inFlight = rejection(c.sendCommand(["BLPOP", "never", "0"]));
      await own.kill();
      expect(await inFlight).toBeInstanceOf(ConnectionLost);
      await waitFor(() => !c.isReady);
      expect(await rejection(c.sendCommand(["PING"]))).toBeInstanceOf(ConnectionNotReady);
      expect(c.isOpen).toBe(true);
      await waitFor(() => errors.length > 0);
      await own.restart();
      await waitFor(() => c.isReady);
      expect(readies).toBe(1);
      // The restarted Redis is empty.
      expect(await c.sendCommand(["GET", "k"])).toBeNull();
      c.destroy();
      expect(c.isOpen).toBe(false);
    } finally {
      await own.stop();
    }
  });

  it("authenticates and selects the database; a wrong password is an error event, retried", async () => {
    const own = await startRedisServer({ password: "s3cret" });
    try {
      const { c } = await opened(own.url.replace(/\/0$/, "/2"));
      await c.sendCommand(["SET", "where", "db2"]);
      const check = await opened(own.url);
      expect(await check.c.sendCommand(["GET", "where"])).toBeNull();
      await check.c.sendCommand(["SELECT", "2"]);
      expect(await check.c.sendCommand(["GET", "where"])).toBe("db2");
      c.destroy();
      check.c.destroy();

      const wrong = new RespConnection(options(own.url.replace("s3cret", "nope")));
      const errors: Error[] = [];
      wrong.on("error", (err: Error) => errors.push(err));
      const connecting = wrong.connect();
      await waitFor(() => errors.length >= 2);
      expect(errors[0]?.message).toMatch(/WRONGPASS|invalid password/);
      expect(wrong.isReady).toBe(false);
      wrong.destroy();
      expect(await rejection(connecting)).toBeInstanceOf(ConnectionNotReady);
    } finally {
      await own.stop();
    }
  });

  it("without reconnecting, a first failure ends connect() and the connection", async () => {
    const own = await startRedisServer();
    const url = own.url;
    await own.stop();
    const c = new RespConnection(options(url, { reconnect: false }));
    c.on("error", () => {});
    expect(await rejection(c.connect())).toBeInstanceOf(Error);
    expect(c.isOpen).toBe(false);
  });

  it("close() lets awaited replies arrive; destroy() fails them at once", async () => {
    const { c } = await opened(redis.url);
    const key = `close-${Date.now()}`;
    await c.sendCommand(["DEL", key]);
    const pending = c.sendCommand(["BLPOP", key, "1"]);
    const closing = c.close();
    // Refused once closing has begun.
    expect(await rejection(c.sendCommand(["PING"]))).toBeInstanceOf(ConnectionNotReady);
    expect(await pending).toBeNull();
    await closing;
    expect(c.isOpen).toBe(false);

    const other = await opened(redis.url);
    const blocked = rejection(other.c.sendCommand(["BLPOP", key, "0"]));
    other.c.destroy();
    expect(await blocked).toBeInstanceOf(ConnectionLost);
    // destroy() is not reported as an error.
    expect(other.errors).toEqual([]);
  });

  it("speaks TLS for rediss://, checking Redis's certificate", async () => {
    const dir = mkdtempSync(join(tmpdir(), "windlass-redis-tls-"));
    const { cert, key } = await writeSelfSignedCert(dir);
    const tlsPort = await freePort();
    const own = await startRedisServer({
      args: [
        "--tls-port",
        String(tlsPort),
        "--tls-cert-file",
        cert,
        "--tls-key-file",
        key,
        "--tls-ca-cert-file",
        cert,
        "--tls-auth-clients",
        "no",
      ],
    });
    try {
      const url = `rediss://127.0.0.1:${tlsPort}/0`;
      const ca = readFileSync(cert);
      const { c } = await opened(url, { tlsOptions: { ca } });
      const big = "t".repeat(200_000);
      await c.sendCommand(["SET", "over-tls", big]);
      expect(await c.sendCommand(["GET", "over-tls"])).toBe(big);
      expect(await c.sendAtomic([["STRLEN", "over-tls"], ["PING"]])).toEqual([200_000, "PONG"]);
      c.destroy();

      // Without the CA the certificate is refused: an error event, never ready.
      const untrusted = new RespConnection(options(url));
      const errors: Error[] = [];
      untrusted.on("error", (err: Error) => errors.push(err));
      const connecting = rejection(untrusted.connect());
      await waitFor(() => errors.length > 0);
      expect(errors[0]?.message).toMatch(/self.signed|certificate/i);
      expect(untrusted.isReady).toBe(false);
      untrusted.destroy();
      expect(await connecting).toBeInstanceOf(ConnectionNotReady);
    } finally {
      await own.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("reports a connection Redis closes (CLIENT KILL) as an error, and reconnects", async () => {
    const { c, errors } = await opened(redis.url);
    let readies = 0;
    c.on("ready", () => {
      readies += 1;
    });
    const killer = await opened(redis.url);
    await killer.c.sendCommand(["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
    await waitFor(() => errors.length > 0);
    expect(errors[0]).toBeInstanceOf(ConnectionLost);
    await waitFor(() => readies === 1);
    expect(await c.sendCommand(["PING"])).toBe("PONG");
    c.destroy();
    killer.c.destroy();
  });

  it("is ready only once Redis has answered: a server that accepts and says nothing is retried", async () => {
    const silent = await listening((socket) => {
      socket.on("error", () => {});
    });
    try {
      const port = (silent.address() as { port: number }).port;
      const c = new RespConnection(
        options(`redis://127.0.0.1:${port}`, { reconnect: false, connectTimeoutMs: 300 }),
      );
      c.on("error", () => {});
      const started = Date.now();
      const err = await rejection(c.connect());
      expect((err as Error).message).toMatch(/not ready within 300 ms/);
      expect(Date.now() - started).toBeLessThan(3000);
      expect(c.isOpen).toBe(false);
    } finally {
      silent.close();
    }
  });

  it("reports what Redis says when it drops a connection it just accepted", async () => {
    const full = await listening((socket) => {
      socket.on("error", () => {});
      socket.end("-ERR max number of clients reached\r\n");
    });
    try {
      const port = (full.address() as { port: number }).port;
      const c = new RespConnection(options(`redis://127.0.0.1:${port}`, { reconnect: false }));
      const errors: Error[] = [];
      c.on("error", (e: Error) => errors.push(e));
      await rejection(c.connect());
      expect(errors.map((e) => e.message).join(" | ")).toMatch(/max number of clients reached/);
    } finally {
      full.close();
    }
  });

  it("authenticates a user named without a password, as node-redis does", async () => {
    const admin = await opened(redis.url);
    await admin.c.sendCommand(["ACL", "SETUSER", "alice", "on", "nopass", "~*", "+@all"]);
    try {
      const { c } = await opened(redis.url.replace("redis://", "redis://alice@"));
      expect(await c.sendCommand(["ACL", "WHOAMI"])).toBe("alice");
      c.destroy();
    } finally {
      await admin.c.sendCommand(["ACL", "DELUSER", "alice"]);
      admin.c.destroy();
    }
  });

  it("closes once however often close() is called, still answering what was sent", async () => {
    const { c } = await opened(redis.url);
    const pending = c.sendCommand(["BLPOP", `twice-${Date.now()}`, "1"]);
    const first = c.close();
    const second = c.close();
    expect(await pending).toBeNull();
    await Promise.all([first, second]);
    expect(c.isOpen).toBe(false);
  });
});

function listening(onSocket: (socket: Socket) => void): Promise<Server> {
  return new Promise((resolve) => {
    const server = createServer(onSocket);
    server.listen(0, "127.0.0.1", () => resolve(server));
  });
}
