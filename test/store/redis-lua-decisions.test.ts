import { randomUUID } from "node:crypto";
import { createClient } from "redis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LineageEntry } from "../../src/core/lineage.js";
import { messageBytes } from "../../src/core/quota.js";
import { strategyKey } from "../../src/core/strategy.js";
import type { ChatMessage } from "../../src/core/types.js";
import { encodeMessage } from "../../src/store/redis/codec.js";
import { DECIDE_APPEND } from "../../src/store/redis/lua/append.js";
import { ACQUIRE_LEASE, FOLD_COMMIT } from "../../src/store/redis/lua/folds.js";
import { type LuaFragment, script } from "../../src/store/redis/lua/fragment.js";
import { REQUESTS } from "../../src/store/redis/lua/idempotency.js";
import { TTL } from "../../src/store/redis/lua/labels.js";
import { LINEAGE } from "../../src/store/redis/lua/lineage.js";
import { QUOTA } from "../../src/store/redis/lua/quota.js";
import { RECALL_SIZE } from "../../src/store/redis/lua/read.js";
import { DECIDE_REWIND } from "../../src/store/redis/lua/rewind.js";
import { TRIM } from "../../src/store/redis/lua/trim.js";
import { REWIND_REFUSALS } from "../../src/store/redis/rewind.js";
import { APPEND_DECISION_CASES, KEEPS_SUMMARY_CASES } from "../core/cases/append.js";
import { FOLD_COMMIT_CASES } from "../core/cases/fold-commit.js";
import { LEASE_TAKE_CASES } from "../core/cases/lease-take.js";
import { CUT_LINEAGE_CASES, RAISE_FLOOR_CASES, RANGES_FOR_CASES } from "../core/cases/lineage.js";
import { QUOTA_CASES } from "../core/cases/quota.js";
import { RECALL_SIZE_CASES } from "../core/cases/recall-size.js";
import { REPLAY_CASES } from "../core/cases/replay.js";
import { FORGET_REQUEST_CASES, REWIND_CASES } from "../core/cases/rewind.js";
import { TRIM_COUNT_CASES } from "../core/cases/trim-count.js";
import { IS_EXPIRED_CASES, TTL_AFTER_ADD_CASES } from "../core/cases/ttl.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";

/**
 * The decision case tables (test/core/cases/, also run against the core
 * in test/core/decision-cases.test.ts) against the Redis store's Lua, in a
 * real redis-server: each case calls the very fragment the store's scripts
 * include (or, for the lease, the store's whole script) with the case's
 * inputs through EVAL. A case where the Lua and the core disagree fails
 * one of the two files.
 */
let redis: RedisServer;
let client: ReturnType<typeof createClient>;
beforeAll(async () => {
  redis = await startRedisServer();
  client = createClient({ url: redis.url, RESP: 2 });
  await client.connect();
});
afterAll(async () => {
  client?.destroy();
  await redis?.stop();
});

/** Runs `body` after `needs` (as the store assembles its scripts) with EVAL. */
function evalLua(
  needs: readonly LuaFragment[],
  body: string,
  keys: readonly string[],
  args: readonly (string | number)[],
): Promise<unknown> {
  const lua = script("case", needs, body);
  return client.sendCommand([
    "EVAL",
    lua.source,
    String(keys.length),
    ...keys,
    ...args.map(String),
  ]);
}

/**
 * Runs a LINEAGE function over entries as the thread hash stores them
 * (keys.ts: `[segment, low, through, first]`); its two lists back as entries.
 */
async function lineageEval(
  body: string,
  entries: readonly LineageEntry[],
  arg: number,
): Promise<{ entries: LineageEntry[]; released: LineageEntry[] }> {
  const stored = entries.map((e) => [e.segment, e.low, e.through, e.low]);
  const reply = await evalLua([LINEAGE], body, [], [JSON.stringify(stored), arg]);
  // cjson writes an empty table as {}.
  const lists = (JSON.parse(String(reply)) as unknown[]).map((l) => (Array.isArray(l) ? l : []));
  const back = (l: unknown[]) =>
    (l as [string, number, number][]).map(([segment, low, through]) => ({ segment, low, through }));
  return { entries: back(lists[0] ?? []), released: back(lists[1] ?? []) };
}

const opt = (v: number | string | undefined): string => (v === undefined ? "" : String(v));
const cases = <T extends { name: string }>(table: readonly T[]) =>
  table.map((c) => [c.name, c] as const);

describe("decision case tables, the Redis store's Lua", () => {
  it.each(cases(TRIM_COUNT_CASES))("trim_plan (trimCount): %s", async (_n, c) => {
    const messages: ChatMessage[] = c.roles.map((role, i) => ({
      role,
      content: `m${c.firstSeq + i}`,
      ...(role === "tool" ? { toolCallId: "call" } : {}),
    }));
    const entries = messages.map(
      (m, i) => `${c.firstSeq + i} ${messageBytes(m)} ${encodeMessage(m, 1000)}`,
    );
    const droppedBytes = messages.slice(0, c.expected).reduce((n, m) => n + messageBytes(m), 0);
    // Split between the stored list and entries not written yet, as an Add has them.
    for (const split of new Set([0, Math.floor(entries.length / 2), entries.length])) {
      const key = `case:${randomUUID()}`;
      if (split > 0) await client.sendCommand(["RPUSH", key, ...entries.slice(0, split)]);
      const reply = await evalLua(
        [TRIM],
        `local extra = {}
for i = 4, #ARGV do extra[#extra + 1] = ARGV[i] end
local n, bytes = trim_plan(KEYS[1], redis.call('LLEN', KEYS[1]), extra, ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
return {n, bytes}`,
        [key],
        [c.kind, c.maxStored, c.summarizedThroughSeq, ...entries.slice(split)],
      );
      expect(reply, `split ${split}`).toEqual([c.expected, droppedBytes]);
    }
  });

  it.each(cases(TRIM_COUNT_CASES))("lineage_trim_count (forkTrimCount): %s", async (_n, c) => {
    const tools = c.roles.flatMap((r, i) => (r === "tool" ? [c.firstSeq + i] : []));
    const reply = await evalLua(
      [LINEAGE],
      `local tools = {}
for i = 6, #ARGV do tools[tonumber(ARGV[i])] = true end
return lineage_trim_count(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]),
  tonumber(ARGV[5]), function(seq) return tools[seq] == true end)`,
      [],
      [c.kind, c.maxStored, c.summarizedThroughSeq, c.firstSeq, c.roles.length, ...tools],
    );
    expect(reply).toBe(c.expected);
  });

  it.each(cases(RAISE_FLOOR_CASES))("raise_floor (raiseFloor): %s", async (_n, c) => {
    const reply = await lineageEval(
      "return cjson.encode({raise_floor(lineage_of(ARGV[1]), tonumber(ARGV[2]))})",
      c.lineage.entries,
      c.newFloor,
    );
    expect(reply).toEqual({ entries: c.expected.lineage.entries, released: c.expected.released });
  });

  it.each(cases(RANGES_FOR_CASES))("ranges_for (rangesFor): %s", async (_n, c) => {
    // The head's length as the store derives it: its list holds low..last_seq.
    const headLength = Math.max(0, c.lastSeq - (c.lineage.head?.low ?? c.lastSeq + 1) + 1);
    const stored = c.lineage.entries.map((e) => [e.segment, e.low, e.through, e.low]);
    const reply = await evalLua(
      [LINEAGE],
      `local out = {}
for _, r in ipairs(ranges_for(lineage_of(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))) do
  out[#out + 1] = {r[1] or ARGV[6], r[2], r[3]}
end
return cjson.encode(out)`,
      [],
      [JSON.stringify(stored), c.lastSeq, headLength, c.from, c.to, c.lineage.head?.segment ?? ""],
    );
    const got = JSON.parse(String(reply)) as unknown;
    const ranges = (Array.isArray(got) ? got : []) as [string, number, number][];
    expect(ranges.map(([segment, from, to]) => ({ segment, from, to }))).toEqual(c.expected);
  });

  it.each(cases(CUT_LINEAGE_CASES))("cut_lineage (cutLineage): %s", async (_n, c) => {
    const reply = await lineageEval(
      "return cjson.encode({cut_lineage(lineage_of(ARGV[1]), tonumber(ARGV[2]))})",
      c.lineage.entries,
      c.toSeq,
    );
    expect(reply).toEqual({ entries: c.expected.lineage.entries, released: c.expected.released });
  });

  it.each(cases(REPLAY_CASES))("decide_replay (decideReplay): %s", async (_n, c) => {
    const record = c.seen === undefined ? "" : `${c.seen.time}\n${c.seen.hash}\n1\n1\n[]`;
    const reply = await evalLua(
      [REQUESTS],
      `local record = false
if ARGV[1] ~= '' then record = ARGV[1] end
return decide_replay(record, ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]))`,
      [],
      [record, c.requestId, c.requestHash, c.now, c.retentionMs],
    );
    expect(reply).toBe(c.expected);
  });

  it.each(cases(QUOTA_CASES))("quota_refusal (checkQuotas): %s", async (_n, c) => {
    const { limits: l, usage: u, delta: d } = c;
    const reply = await evalLua(
      [QUOTA],
      // A count of 0 is passed as absent: a namespace's usage hash has no field yet.
      `local used = {false, false, false}
for i = 1, 3 do if ARGV[3 + i] ~= '0' then used[i] = ARGV[3 + i] end end
local name, limit = quota_refusal({ARGV[1], ARGV[2], ARGV[3]}, used,
  {tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])})
if not name then return {'allowed'} end
return {name, limit}`,
      [],
      [
        l.maxThreadsPerNamespace,
        l.maxMessagesPerNamespace,
        l.maxBytesPerNamespace,
        u.threads,
        u.messages,
        u.bytes,
        d.threads,
        d.messages,
        d.bytes,
      ],
    );
    const limitOf = {
      max_threads_per_namespace: l.maxThreadsPerNamespace,
      max_messages_per_namespace: l.maxMessagesPerNamespace,
      max_bytes_per_namespace: l.maxBytesPerNamespace,
    };
    expect(reply).toEqual(
      c.expected === "allowed" ? ["allowed"] : [c.expected, String(limitOf[c.expected])],
    );
  });

  it.each(cases(FOLD_COMMIT_CASES))("may_commit_summary (mayCommitSummary): %s", async (_n, c) => {
    const reply = await evalLua(
      [FOLD_COMMIT],
      `local function given(i) if ARGV[i] == '' then return false end return ARGV[i] end
local ok = may_commit_summary(given(1), given(2), given(3), ARGV[4], tonumber(ARGV[5]),
  tonumber(ARGV[6]), tonumber(ARGV[7]))
if ok then return 1 end
return 0`,
      [],
      [
        opt(c.thread?.incarnation),
        opt(c.thread?.summarizedThroughSeq),
        opt(c.lease?.token),
        c.cmd.incarnation,
        c.cmd.leaseToken,
        c.cmd.fromSeq,
        c.cmd.throughSeq,
      ],
    );
    expect(reply).toBe(c.expected ? 1 : 0);
  });

  it.each(cases(LEASE_TAKE_CASES))(
    "ACQUIRE_LEASE (mayTakeLease, nextLeaseToken): %s",
    async (_n, c) => {
      const lease = `case:{${randomUUID()}}:l`;
      const counter = lease.replace(/:l$/, ":lease-seq");
      if (c.lastToken !== undefined)
        await client.sendCommand(["SET", counter, String(c.lastToken)]);
      if (c.held !== undefined) {
        // The case's clock mapped onto Redis's: a lease expiring at or before now is gone.
        const at = Date.now() + (c.held.expiresAt - c.now);
        await client.sendCommand(["SET", lease, String(c.held.token), "PXAT", String(at)]);
      }
      const reply = await client.sendCommand([
        "EVAL",
        ACQUIRE_LEASE.source,
        "2",
        lease,
        counter,
        "60000",
      ]);
      expect(reply).toBe(c.expected ?? null);
    },
  );

  it.each(cases(REWIND_CASES))("decide_rewind (decideRewind): %s", async (_n, c) => {
    const reply = await evalLua(
      [DECIDE_REWIND],
      `local function given(i) if ARGV[i] == '' then return false end return tonumber(ARGV[i]) end
local decision, dropped = decide_rewind(given(1), tonumber(ARGV[2]), given(3), tonumber(ARGV[4]), given(5))
if dropped then return {decision, 1} end
return {decision, 0}`,
      [],
      [
        opt(c.thread?.lastSeq),
        c.thread?.summarizedThroughSeq ?? 0,
        opt(c.oldestStoredSeq),
        c.toSeq,
        opt(c.expectedLastSeq),
      ],
    );
    const [decision, dropped] = reply as [string, number];
    const code = REWIND_REFUSALS[decision];
    const got =
      decision === "plan"
        ? { dropAfterSeq: c.toSeq, summaryDropped: dropped === 1 }
        : decision === "unchanged"
          ? "unchanged"
          : { refused: code ?? `unknown decision ${decision}` };
    expect(got).toEqual(c.expected);
  });

  it.each(cases(FORGET_REQUEST_CASES))("forget_request (forgetRequest): %s", async (_n, c) => {
    const reply = await evalLua(
      [REQUESTS],
      "if forget_request(tonumber(ARGV[1]), tonumber(ARGV[2])) then return 1 end return 0",
      [],
      [c.recordedLastSeq, c.toSeq],
    );
    expect(reply).toBe(c.expected ? 1 : 0);
  });

  it.each(cases(APPEND_DECISION_CASES))("decide_append (decideAppend): %s", async (_n, c) => {
    const reply = await evalLua(
      [DECIDE_APPEND],
      `local expected = false
if ARGV[5] ~= '' then expected = tonumber(ARGV[5]) end
return decide_append(ARGV[1] == '1', ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[6] == '1', expected)`,
      [],
      [
        c.thread === undefined ? "0" : "1",
        c.thread === undefined ? "" : strategyKey(c.thread.strategy),
        c.thread?.lastSeq ?? 0,
        c.strategy === undefined ? "" : strategyKey(c.strategy),
        opt(c.expectedLastSeq),
        c.replaceStrategy ? "1" : "0",
      ],
    );
    const refusals: Record<string, string> = {
      last_seq_mismatch: "aborted",
      strategy_mismatch: "failed_precondition",
    };
    const code = refusals[String(reply)];
    expect(code === undefined ? reply : { refused: code }).toEqual(c.expected);
  });

  it.each(cases(KEEPS_SUMMARY_CASES))("keeps_summary (keepsSummary): %s", async (_n, c) => {
    const reply = await evalLua(
      [DECIDE_APPEND],
      "if keeps_summary(ARGV[1], ARGV[2], ARGV[3], ARGV[4]) then return 1 end return 0",
      [],
      [c.from.kind, c.from.excludeSystem ? "1" : "0", c.to.kind, c.to.excludeSystem ? "1" : "0"],
    );
    expect(reply).toBe(c.expected ? 1 : 0);
  });

  it.each(cases(RECALL_SIZE_CASES))("recall_size (recallSize): %s", async (_n, c) => {
    const reply = await evalLua(
      [RECALL_SIZE],
      // The strategy as the thread hash keeps it (codec.ts strategyArgs: its JSON).
      "return recall_size(cjson.decode(ARGV[1]), tonumber(ARGV[2]))",
      [],
      [JSON.stringify(c.strategy), opt(c.limit)],
    );
    expect(reply).toBe(c.expected);
  });

  it.each(cases(TTL_AFTER_ADD_CASES))("ttl_after_add (ttlAfterAdd): %s", async (_n, c) => {
    const reply = await evalLua(
      [TTL],
      // The store passes the Add's ttl ("" none) and default as text, the thread's as HGET gives it.
      `local current = false
if ARGV[2] ~= '' then current = ARGV[2] end
return ttl_after_add(ARGV[1], current, ARGV[3] == '1', ARGV[4])`,
      [],
      [opt(c.requested), opt(c.current), c.created ? "1" : "0", String(c.defaultTtlMs ?? 0)],
    );
    expect(reply).toBe(c.expected);
  });

  it.each(cases(IS_EXPIRED_CASES))("is_expired (isExpired): %s", async (_n, c) => {
    const reply = await evalLua(
      [TTL],
      `local at = false
if ARGV[1] ~= '' then at = ARGV[1] end
if is_expired(at, tonumber(ARGV[2])) then return 1 end
return 0`,
      [],
      [opt(c.expireTime), c.now],
    );
    expect(reply).toBe(c.expected ? 1 : 0);
  });
});
