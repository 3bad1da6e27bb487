/**
 * Helpers for tests with Redis replication: arguments that make it quick,
 * one-off commands to a server or sentinel, and waiting for a replica.
 */
import { createClient } from "redis";
import type { RedisServer } from "./redis-server.js";

/**
 * Arguments for a primary in tests: diskless full syncs start at once
 * (Redis waits 5 s for more replicas by default), and it pings its replicas
 * every second (default 10 s), which moves the offset a fresh replica
 * acknowledges (see waitForLinkOf).
 */
export const QUICK_REPLICATION = [
  "--repl-diskless-sync-delay",
  "0",
  "--repl-ping-replica-period",
  "1",
] as const;

/**
 * Resolves once `server` is a replica whose link to its primary is up and
 * whom the primary counts as online, acknowledging an offset: just after a
 * full sync a replica acknowledges offset 0 for a while, and WAIT does not
 * count it.
 */
export async function waitForLinkOf(
  server: RedisServer,
  timeoutMs = 30_000,
  password?: string,
): Promise<void> {
  await waitUntil(timeoutMs, `port ${server.port} to replicate`, async () => {
    const info = String(await ask(server.port, ["INFO", "replication"], password));
    const primaryPort = Number(/master_port:(\d+)/.exec(info)?.[1]);
    if (!/role:slave/.test(info) || !/master_link_status:up/.test(info)) return false;
    const primaryInfo = String(await ask(primaryPort, ["INFO", "replication"], password));
    // Online, and acknowledging an offset (just after a sync it acknowledges 0 for a while).
    const acked = new RegExp(`port=${server.port},state=online,offset=(\\d+)`).exec(primaryInfo);
    return acked !== null && Number(acked[1]) > 0;
  });
}

/** One command on a fresh connection to 127.0.0.1:port (a sentinel's answer, a server's INFO). */
export async function ask(port: number, args: string[], password?: string): Promise<unknown> {
  const client = createClient({
    socket: { host: "127.0.0.1", port, connectTimeout: 1000, reconnectStrategy: false },
    RESP: 2,
    ...(password === undefined ? {} : { password }),
  });
  client.on("error", () => {});
  try {
    await client.connect();
    return await client.sendCommand(args);
  } finally {
    client.destroy();
  }
}

/** Polls a state every 50 ms until it holds; a failed probe counts as "not yet". */
export async function waitUntil(timeoutMs: number, what: string, holds: () => Promise<boolean>) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await holds().catch(() => false)) return;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
