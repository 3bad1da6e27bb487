import { THREAD_FIELDS } from "../codec.js";
import { ENTRIES, NUMBERS } from "./entries.js";
import { LOG_EVENT } from "./event-log.js";
import { fragment, script } from "./fragment.js";
import { REQUESTS } from "./idempotency.js";
import { LABELS, TTL } from "./labels.js";
import { LINEAGE } from "./lineage.js";
import { QUOTA } from "./quota.js";
import { TRIM } from "./trim.js";
import { USAGE } from "./usage.js";

/**
 * decide_append mirrors core/append.ts decideAppend and keeps_summary
 * keepsSummary; the case tables test/core/cases/append.ts prove them, run
 * against the core (test/core/decision-cases.test.ts) and against this Lua
 * in a real redis-server (test/store/redis-lua-decisions.test.ts).
 */
export const DECIDE_APPEND = fragment(
  "decide_append",
  [],
  `
-- core/append.ts decideAppend on strategy keys (core/strategy.ts
-- sameStrategy is their equality): whether the thread exists, its strategy
-- key and last_seq (0 for none), the request's strategy key ('' none),
-- replace_strategy and expected_last_seq (false: none). Returns
-- 'last_seq_mismatch' or 'strategy_mismatch' (refusals), or whose strategy
-- the thread has after the Add: 'thread', 'request' or 'default'.
local function decide_append(exists, thread_key, last_seq, request_key, replace, expected)
  if expected and expected ~= last_seq then return 'last_seq_mismatch' end
  if not exists then
    if request_key == '' then return 'default' end
    return 'request'
  end
  if request_key == '' or request_key == thread_key then return 'thread' end
  if replace then return 'request' end
  return 'strategy_mismatch'
end

-- core/append.ts keepsSummary on the two strategies' kind and exclude_system.
local function keeps_summary(from_kind, from_exclude, to_kind, to_exclude)
  return from_kind == 'summary' and to_kind == 'summary' and from_exclude == to_exclude
end
`,
);

/**
 * Store.append, one script: core/append.ts decideAppend's checks
 * (DECIDE_APPEND above), the idempotent replay (lua/idempotency.ts), the trim
 * (lua/trim.ts) and the quotas (lua/quota.ts) are decided inside, against
 * the thread as it is then, so check and write never interleave; each of
 * those fragments names the core function it mirrors and the case table
 * that proves it.
 *
 * KEYS: thread, messages, requests, request times, threads, events, usage.
 * ARGV: thread_id, now, request_id, request_hash, expected_last_seq ("" none),
 * replace ("1"/"0"), new incarnation, event retention, idempotency retention
 * ms, then core/idempotency.ts requestsToKeep's keepNewest and dropThrough
 * (decided outside), then the request's strategy (json, key,
 * kind, max_stored, exclude_system; json "" when the request has none) and the
 * default strategy (same five), the quotas (max threads, messages, bytes; 0
 * none), the labels' JSON ("" keeps the thread's), the ttl in ms ("": the
 * thread's own, or the default for a new thread), the default ttl, then per
 * message "<bytes> <json>" (bytes: quota.ts messageBytes). Returns
 * {"expired"} (nothing written) when the thread has expired: the store
 * removes it with EXPIRE_THREAD and calls again. Returns {"ok", result} |
 * {"replayed", result} | {"request_id_reused"} | {"last_seq_mismatch",
 * last_seq} | {"strategy_mismatch", thread strategy key} | {"quota", quota
 * name, limit}; a result is the text codec.ts decodeResult reads.
 */
export const APPEND = script(
  "append",
  [NUMBERS, ENTRIES, DECIDE_APPEND, TRIM, USAGE, QUOTA, REQUESTS, LOG_EVENT, LABELS, TTL, LINEAGE],
  `
local now = tonumber(ARGV[2])
local request_id = ARGV[3]
-- The first ARGV of each strategy (json, key, kind, max_stored, exclude_system), of the messages.
local REQUEST, DEFAULT, FIRST_MESSAGE = 12, 17, 28
-- The thread in one read: every thread hash has last_seq, so a false one
-- means there is no thread (one HMGET where EXISTS and two HGETs were: each
-- call a script makes costs Redis a few microseconds on every Add).
local current = redis.call('HMGET', KEYS[1], 'last_seq', 'strategy_key', 'kind', 'exclude_system',
  'max_stored', 'summarized_through_seq', 'counted', 'lineage', 'expire_at', 'ttl_ms',
  'summary', 'summary_time')
local exists = current[1] ~= false
if exists and is_expired(current[9], now) then return {'expired'} end
local ttl_before = exists and current[10]
if exists then
  local replay = replay_reply(KEYS[3], request_id, ARGV[4], now, tonumber(ARGV[9]), 'add')
  if replay then return replay end
end

local last_seq = 0
if exists then last_seq = tonumber(current[1]) end
local expected = false
if ARGV[5] ~= '' then expected = tonumber(ARGV[5]) end
local decision = decide_append(exists, current[2], last_seq, ARGV[REQUEST + 1], ARGV[6] == '1', expected)
if decision == 'last_seq_mismatch' then return {'last_seq_mismatch', str(last_seq)} end
if decision == 'strategy_mismatch' then return {'strategy_mismatch', current[2]} end
-- The strategy written with the Add (none: the thread keeps its own).
local target = nil
if decision == 'request' then target = REQUEST elseif decision == 'default' then target = DEFAULT end

-- The thread after the Add, its trim included, is worked out before anything
-- is written, so an Add refused by a quota writes nothing.
local kind, max_stored, exclude_system = current[3], tonumber(current[5]), current[4]
if target then
  kind, max_stored, exclude_system = ARGV[target + 2], tonumber(ARGV[target + 3]), ARGV[target + 4]
end
-- From the thread's strategy to the one it has now (checked on every
-- append, as the memory store does).
local keeps = exists and keeps_summary(current[3], current[4], kind, exclude_system)
local through = 0
if keeps then through = tonumber(current[6]) end
local count = #ARGV - FIRST_MESSAGE + 1
local entries = {}
local added_bytes = 0
for i = 1, count do
  entries[i] = str(last_seq + i) .. ' ' .. ARGV[FIRST_MESSAGE + i - 1]
  added_bytes = added_bytes + entry_bytes(entries[i])
end
local len_old = 0
if exists then len_old = redis.call('LLEN', KEYS[2]) end
-- A thread holding frozen segments (keys.ts) trims across them: \`dropped\`
-- is then what leaves its head list, and the segments whose last
-- reference the trim releases leave the usage (freed).
local base = label_base(KEYS[1], ARGV[1])
local lineage = exists and current[8] and lineage_of(current[8])
local dropped, dropped_bytes, kept, released, freed, freed_bytes = 0, 0, nil, {}, 0, 0
local trimmed = 0
if lineage then
  trimmed, kept, released, dropped, dropped_bytes = lineage_trim_plan(base, KEYS[2], lineage, last_seq,
    len_old, entries, kind, max_stored, through)
  freed, freed_bytes = freed_by(base, released)
else
  dropped, dropped_bytes = trim_plan(KEYS[2], len_old, entries, kind, max_stored, through)
end
-- A thread written before quotas is counted from its first Add on: it joins
-- the usage with everything it holds (at most its max_stored messages).
local adopt = exists and current[7] ~= '1'
local new_threads, held, held_bytes = 1, 0, 0
if exists and not adopt then new_threads = 0 end
if adopt then
  held = len_old
  for _, entry in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
    held_bytes = held_bytes + entry_bytes(entry)
  end
end
local delta = {new_threads, held + count - dropped, held_bytes + added_bytes - dropped_bytes}
do
  local used = redis.call('HMGET', KEYS[7], 'threads', 'messages', 'bytes')
  local quota, limit = quota_refusal({ARGV[22], ARGV[23], ARGV[24]}, used,
    {delta[1], delta[2] - freed, delta[3] - freed_bytes})
  if quota then return {'quota', quota, limit} end
end

if not exists then
  redis.call('HSET', KEYS[1], 'thread_id', ARGV[1], 'incarnation', ARGV[7], 'last_seq', '0',
    'summarized_through_seq', '0', 'summary', '', 'summary_time', '0',
    'create_time', ARGV[2], 'update_time', ARGV[2], 'counted', '1', 'bytes', '0')
  redis.call('ZADD', KEYS[5], 0, ARGV[1])
end
-- Only when there is a summary to drop: a window or buffer thread's Add
-- would otherwise write (and replicate, and append to the AOF) this HSET
-- every time.
local has_summary = current[11] ~= '' or current[12] ~= '0' or current[6] ~= '0'
if exists and not keeps and has_summary then
  redis.call('HSET', KEYS[1], 'summary', '', 'summary_time', '0', 'summarized_through_seq', '0')
end
if target then
  redis.call('HSET', KEYS[1], 'strategy', ARGV[target], 'strategy_key', ARGV[target + 1],
    'kind', ARGV[target + 2], 'max_stored', ARGV[target + 3], 'exclude_system', ARGV[target + 4])
end

local first_seq = 0
if count > 0 then
  for i = 1, count, 256 do
    redis.call('RPUSH', KEYS[2], unpack(entries, i, math.min(i + 255, count)))
  end
  first_seq = last_seq + 1
  last_seq = last_seq + count
  redis.call('HSET', KEYS[1], 'last_seq', str(last_seq), 'update_time', ARGV[2])
end
if dropped > 0 then redis.call('LTRIM', KEYS[2], dropped, -1) end
if lineage and trimmed > 0 then
  release_entries(base, KEYS[7], released)
  save_lineage(KEYS[1], kept)
end
-- bytes starts at 0 so that use() below leaves the thread's own count set,
-- even when this Add changed no byte (HINCRBY is skipped for 0).
if adopt then redis.call('HSET', KEYS[1], 'counted', '1', 'bytes', '0') end
use(KEYS[7], KEYS[1], delta[1], delta[2], delta[3])
set_labels(KEYS[1], ARGV[1], ARGV[25])
do
  local ttl = ttl_after_add(ARGV[26], ttl_before, not exists, ARGV[27])
  -- A thread without a ttl that keeps none costs no write here (the common Add).
  if ttl > 0 or ttl_before then set_ttl(KEYS[1], ARGV[1], ttl, now) end
end

local added_last = 0
if count > 0 then added_last = last_seq end
local result = str(first_seq) .. '\\n' .. str(added_last) .. '\\n'
if request_id ~= '' then
  -- Recorded for replays in the form every release reads: HGETALL's pairs.
  result = result .. cjson.encode(redis.call('HGETALL', KEYS[1]))
  record_request(KEYS[3], KEYS[4], request_id, ARGV[4], now, result, tonumber(ARGV[11]), tonumber(ARGV[10]))
else
  -- Not recorded: codec.ts THREAD_FIELDS' values, after '=' (half HGETALL's
  -- strings to copy out of Redis and encode, a few microseconds per Add).
  result = result .. '=' .. cjson.encode(redis.call('HMGET', KEYS[1], ${THREAD_FIELDS.map((f) => `'${f}'`).join(", ")}))
end
if count > 0 then
  log_event(KEYS[6], ARGV[8], ARGV[1], ARGV[2], 'messages_added',
    'first_seq', str(first_seq), 'last_seq', str(last_seq))
end
return {'ok', result}
`,
  // The store's hot write: called as a Redis Function where Redis has it (commands.ts).
  { asFunction: true },
);
