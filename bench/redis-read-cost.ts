import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { THREAD_FIELDS } from "../src/store/redis/codec.js";
import { READ } from "../src/store/redis/lua/read.js";
import { parseRedisUrl } from "../src/store/redis/redis-url.js";
import { RespConnection } from "../src/store/redis/resp-connection.js";
import { READ_SLACK } from "../src/store/store.js";
import { startBenchRedis } from "./redis-server.js";
import { text } from "./scenarios.js";

/**
 * redis-server's CPU per read of a Get's window, by the READ script (what
 * every Get ran before) and by the MULTI the Redis store sends once it has
 * read a thread (src/store/redis/reads.ts readTail), side by side, with a
 * trivial script and the plain commands for scale. Redis copies each reply
 * of a command a script runs into Lua and back out, so the script costs
 * Redis several times what the commands cost.
 *
 *   npm run build && node dist/bench/redis-read-cost.js
 *
 * A thread of 200 messages of 100-200 bytes (the unary bench's Get thread);
 * each variant runs ROUNDS rounds of CALLS calls, 64 in flight over one
 * connection, taking turns, and keeps its cheapest round (CPU per call read
 * from /proc for the bench's own redis-server). Prints a table; not a test.
 */

const MESSAGES = 200;
const WINDOW = 20;
const CALLS = 20_000;
const ROUNDS = 5;
const IN_FLIGHT = 64;
const REDIS_SERVER = process.env.REDIS_SERVER || "redis-server";

type Variant = { readonly name: string; readonly call: () => Promise<unknown> };

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "windlass-read-cost-"));
  const redis = await startBenchRedis(REDIS_SERVER, dir);
  const c = new RespConnection({
    endpoint: parseRedisUrl(redis.url),
    connectTimeoutMs: 1000,
    reconnect: false,
    maxQueued: 10_000,
  });
  try {
    await c.connect();
    const thread = "bench:t";
    const list = "bench:m";
    const strategy = JSON.stringify({
      kind: "window",
      window: WINDOW,
      excludeSystem: false,
      maxStored: 0,
    });
    // The fields a thread hash has (src/store/redis/lua/append.ts).
    await c.sendCommand([
      "HSET",
      thread,
      "thread_id",
      "t",
      "incarnation",
      "i",
      "last_seq",
      String(MESSAGES),
      "summarized_through_seq",
      "0",
      "summary",
      "",
      "summary_time",
      "0",
      "create_time",
      "1",
      "update_time",
      "1",
      "counted",
      "1",
      "bytes",
      "0",
      "strategy",
      strategy,
      "strategy_key",
      "k",
      "kind",
      "window",
      "max_stored",
      "0",
      "exclude_system",
      "0",
    ]);
    for (let i = 1; i <= MESSAGES; i++) {
      const body = JSON.stringify({
        role: i % 2 ? "user" : "assistant",
        content: text(100 + ((i * 53) % 101), i),
        tokens: 30,
        createTime: 1,
      });
      await c.sendCommand(["RPUSH", list, `${i} ${body.length} ${body}`]);
    }
    await c.sendCommand(["SCRIPT", "LOAD", READ.source]);
    const trivial = String(await c.sendCommand(["SCRIPT", "LOAD", "return 1"]));
    const lrangeInLua = String(
      await c.sendCommand([
        "SCRIPT",
        "LOAD",
        "return redis.call('LRANGE', KEYS[1], ARGV[1], '-1')",
      ]),
    );
    const tail = String(WINDOW + READ_SLACK);
    const variants: Variant[] = [
      {
        name: `READ script (window ${WINDOW} + ${READ_SLACK})`,
        call: () =>
          c.sendCommand(["EVALSHA", READ.sha, "2", thread, list, "view", "", String(READ_SLACK)]),
      },
      {
        name: "MULTI HMGET LLEN LRANGE EXEC",
        call: () =>
          c.sendAtomic([
            ["HMGET", thread, ...THREAD_FIELDS],
            ["LLEN", list],
            ["LRANGE", list, `-${tail}`, "-1"],
          ]),
      },
      { name: "EVALSHA of 'return 1'", call: () => c.sendCommand(["EVALSHA", trivial, "0"]) },
      {
        name: `LRANGE of ${tail} entries`,
        call: () => c.sendCommand(["LRANGE", list, `-${tail}`, "-1"]),
      },
      {
        name: `LRANGE of ${tail} entries inside a script`,
        call: () => c.sendCommand(["EVALSHA", lrangeInLua, "1", list, `-${tail}`]),
      },
      { name: "PING", call: () => c.sendCommand(["PING"]) },
    ];
    const best = new Map<string, number>();
    for (let round = 0; round < ROUNDS; round++) {
      for (const v of variants) {
        const before = redis.cpuMicros();
        for (let done = 0; done < CALLS; done += IN_FLIGHT) {
          await Promise.all(Array.from({ length: IN_FLIGHT }, () => v.call()));
        }
        const after = redis.cpuMicros();
        if (before === undefined || after === undefined)
          throw new Error("no /proc: cannot read redis-server's CPU");
        const perCall = (after - before) / CALLS;
        best.set(v.name, Math.min(best.get(v.name) ?? Number.POSITIVE_INFINITY, perCall));
      }
    }
    const read = best.get(variants[0]?.name ?? "") ?? 0;
    process.stdout.write(
      `redis-server CPU per call (us), best of ${ROUNDS} rounds of ${CALLS} calls, ${IN_FLIGHT} in flight:\n`,
    );
    for (const v of variants) {
      const us = best.get(v.name) ?? 0;
      process.stdout.write(
        `  ${v.name.padEnd(40)} ${us.toFixed(1).padStart(7)}   ${(us / read).toFixed(2)}x the script\n`,
      );
    }
  } finally {
    c.destroy();
    await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
