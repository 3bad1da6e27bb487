import { createHash } from "node:crypto";

/**
 * The Lua scripts of the Redis store (src/store/redis-store.ts). Each store
 * method that changes state is one script, so it runs atomically on the Redis
 * server in one round trip: the check, the write, the trim and the event can
 * never interleave with another replica's.
 *
 * Data layout, per namespace key base `B` (`<prefix>:{ns-<base64url>}:`):
 * - `B t:<thread>` hash: the thread: thread_id, incarnation, strategy (JSON),
 *   strategy_key (core/strategy.ts strategyKey, what decideAppend compares),
 *   kind, max_stored, exclude_system ("1"/"0"), last_seq,
 *   summarized_through_seq, summary, summary_time, create_time, update_time,
 *   bytes (of its stored messages), counted ("1": counted in `B usage`;
 *   threads written before quotas are not, until their next Add); numbers
 *   as decimal text;
 * - `B m:<thread>` list: the stored messages, oldest first, each
 *   `"<seq> <bytes> <json>"` (bytes: quota.ts messageBytes; entries written
 *   before quotas are `"<seq> <json>"`) where the JSON starts with
 *   `{"role":"<role>",` (the store writes `role` first, so a script can tell
 *   a tool result without parsing JSON);
 * - `B r:<thread>` hash request_id -> `"<time>\n<request hash>\n<result>"`, and
 *   `B ri:<thread>` zset request_id by time (idempotency retention);
 * - `B l:<thread>` string: the fold lease's fencing token, with a TTL;
 * - `B usage` hash: threads, messages, bytes of the namespace (the quotas);
 * - `B threads` zset of thread ids, all scored 0 (so ZRANGE is byte order);
 * - `B log` stream: the namespace's event log, entry ids "0-1", "0-2" … (the
 *   namespace's own count); `B lease-seq` the fencing counter. (`B events`
 *   was the log of earlier versions, with ids from the clock: deleted by
 *   log_event when `B log` is first written.)
 *
 * A result (append) is `"<first_seq>\n<last_seq>\n<cjson array of the thread hash>"`.
 * Lua numbers are doubles: seqs and times (below 2^53) are exact, and the
 * scripts print them with `%d` so they never turn into `1e+15`.
 */

/** A script and its SHA1, for EVALSHA. */
export interface LuaScript {
  readonly name: string;
  readonly source: string;
  readonly sha: string;
}

function script(name: string, body: string): LuaScript {
  const source = `${PRELUDE}\n${body}`;
  return { name, source, sha: createHash("sha1").update(source).digest("hex") };
}

/** Helpers every script shares. */
const PRELUDE = `
local function str(n) return string.format('%d', n) end

local function seq_of(entry)
  return tonumber(string.sub(entry, 1, string.find(entry, ' ', 1, true) - 1))
end

-- The JSON starts at the first brace: "<seq> <bytes> {…}", or "<seq> {…}" as
-- written before quotas.
local function is_tool(entry)
  local brace = string.find(entry, '{', 1, true)
  return string.sub(entry, brace, brace + 14) == '{"role":"tool",'
end

-- The message's size as the byte quota counts it (quota.ts messageBytes, worked
-- out by the store when it wrote the entry); for an entry written before
-- quotas, the length of its JSON.
local function entry_bytes(entry)
  local space = string.find(entry, ' ', 1, true)
  local brace = string.find(entry, '{', 1, true)
  if brace == space + 1 then return #entry - space end
  return tonumber(string.sub(entry, space + 1, brace - 2))
end

-- core/append.ts trimCount over the stored list followed by \`extra\` (entries
-- not written yet): drop the oldest beyond max_stored (summary threads: only
-- those folded, seq <= through), then tool results left at the front without
-- their call. Returns how many to drop and their bytes; writes nothing.
local function trim_plan(key, len_old, extra, kind, max_stored, through)
  local len = len_old + #extra
  local excess = len - max_stored
  if excess <= 0 then return 0, 0 end
  local head = {}
  if math.min(excess, len_old) > 0 then
    head = redis.call('LRANGE', key, 0, math.min(excess, len_old) - 1)
  end
  local function at(i)
    if i < #head then return head[i + 1] end
    if i < len_old then return redis.call('LINDEX', key, i) end
    return extra[i - len_old + 1]
  end
  local n = 0
  while n < excess and (kind ~= 'summary' or seq_of(at(n)) <= through) do n = n + 1 end
  if n == 0 then return 0, 0 end
  while n < len do
    local entry = at(n)
    if not is_tool(entry) or (kind == 'summary' and seq_of(entry) > through) then break end
    n = n + 1
  end
  local bytes = 0
  for i = 0, n - 1 do bytes = bytes + entry_bytes(at(i)) end
  return n, bytes
end

-- Trims the stored list; returns how many entries were dropped and their bytes.
local function trim(key, kind, max_stored, through)
  local n, bytes = trim_plan(key, redis.call('LLEN', key), {}, kind, max_stored, through)
  if n > 0 then redis.call('LTRIM', key, n, -1) end
  return n, bytes
end

-- Adds to the namespace's usage hash (and the thread's bytes) what a change
-- did, for threads counted there (created by a version with quotas).
local function use(usage, thread, threads, messages, bytes)
  if threads ~= 0 then redis.call('HINCRBY', usage, 'threads', threads) end
  if messages ~= 0 then redis.call('HINCRBY', usage, 'messages', messages) end
  if bytes ~= 0 then
    redis.call('HINCRBY', usage, 'bytes', bytes)
    if thread then redis.call('HINCRBY', thread, 'bytes', bytes) end
  end
end

-- Appends an event, keeping at least retention of them. Trimming is done
-- here in batches (amortised O(1) per event) rather than with XADD MAXLEN ~,
-- because trimming does not move the stream's max-deleted-entry-id (Redis
-- 7.0 only moves it on XDEL), and that id is how a resume token whose next
-- events were dropped is told from a current one: XSETID records the newest
-- dropped id there.
local function log_event(stream, retention, thread_id, time, type, ...)
  if redis.call('EXISTS', stream) == 0 then
    -- Same key base and hash tag: "<B>log" -> "<B>events".
    redis.call('UNLINK', string.sub(stream, 1, -4) .. 'events')
  end
  local id = redis.call('XADD', stream, '0-*', 'type', type, 'thread_id', thread_id, 'time', time, ...)
  local keep = tonumber(retention)
  local excess = redis.call('XLEN', stream) - keep
  if excess > 0 and excess >= math.max(64, math.floor(keep / 8)) then
    local dropped = redis.call('XRANGE', stream, '-', '+', 'COUNT', excess)
    redis.call('XTRIM', stream, 'MAXLEN', keep)
    redis.call('XSETID', stream, id, 'MAXDELETEDID', dropped[#dropped][1])
  end
  return id
end

-- Thread labels: the thread hash's \`labels\` field (JSON object) and, per
-- label, the zset \`B lb:<key>=<value>\` of the ids carrying it, scored 0
-- (byte order). Keys never contain "=". B is the thread key less "t:<id>".
local function label_base(thread_key, thread_id)
  return string.sub(thread_key, 1, #thread_key - #thread_id - 2)
end

local function drop_labels(thread_key, thread_id)
  local json = redis.call('HGET', thread_key, 'labels')
  if not json then return end
  local base = label_base(thread_key, thread_id)
  for k, v in pairs(cjson.decode(json)) do
    redis.call('ZREM', base .. 'lb:' .. k .. '=' .. v, thread_id)
  end
end

-- Retention: the thread hash's ttl_ms and expire_at, and the namespace's zset
-- \`B expiry\` of thread ids by expire_at (swept by EXPIRE_DUE on every replica).
-- Sets the thread's ttl (0: none) and moves its expiry to now + ttl.
local function set_ttl(thread_key, thread_id, ttl, now)
  local expiry = label_base(thread_key, thread_id) .. 'expiry'
  if ttl > 0 then
    redis.call('HSET', thread_key, 'ttl_ms', str(ttl), 'expire_at', str(now + ttl))
    redis.call('ZADD', expiry, now + ttl, thread_id)
  else
    redis.call('HDEL', thread_key, 'ttl_ms', 'expire_at')
    redis.call('ZREM', expiry, thread_id)
  end
end

-- Whether the thread exists and has expired at \`now\`.
local function expired(thread_key, now)
  local at = redis.call('HGET', thread_key, 'expire_at')
  return at ~= false and tonumber(at) <= now
end

-- Removes a thread (as CLEAR does) and logs thread_cleared with \`reason\`
-- ("" none). B is the key base; usage and stream are the namespace's.
local function remove_thread(base, thread_id, threads, stream, usage, retention, now, reason)
  local key = base .. 't:' .. thread_id
  local t = redis.call('HMGET', key, 'counted', 'bytes')
  local len = redis.call('LLEN', base .. 'm:' .. thread_id)
  drop_labels(key, thread_id)
  redis.call('DEL', key, base .. 'm:' .. thread_id, base .. 'r:' .. thread_id, base .. 'ri:' .. thread_id)
  if t[1] == '1' then use(usage, false, -1, -len, -(tonumber(t[2]) or 0)) end
  redis.call('ZREM', threads, thread_id)
  redis.call('ZREM', base .. 'expiry', thread_id)
  if reason == '' then
    log_event(stream, retention, thread_id, str(now), 'thread_cleared')
  else
    log_event(stream, retention, thread_id, str(now), 'thread_cleared', 'reason', reason)
  end
end

-- Replaces the thread's labels with those of \`json\` ("" keeps them).
local function set_labels(thread_key, thread_id, json)
  if json == '' then return end
  drop_labels(thread_key, thread_id)
  redis.call('HSET', thread_key, 'labels', json)
  local base = label_base(thread_key, thread_id)
  for k, v in pairs(cjson.decode(json)) do
    redis.call('ZADD', base .. 'lb:' .. k .. '=' .. v, 0, thread_id)
  end
end
`;

/**
 * Store.append. KEYS: thread, messages, requests, request times, threads, events, usage.
 * ARGV: thread_id, now, request_id, request_hash, expected_last_seq ("" none),
 * replace ("1"/"0"), new incarnation, event retention, idempotency retention
 * ms, idempotency max per thread, then the request's strategy (json, key,
 * kind, max_stored, exclude_system; json "" when the request has none) and the
 * default strategy (same five), the quotas (max threads, messages, bytes; 0
 * none), the labels' JSON ("" keeps the thread's), the ttl in ms ("": the
 * thread's own, or the default for a new thread), the default ttl, then per
 * message "<bytes> <json>" (bytes: quota.ts messageBytes). Returns
 * {"expired"} (nothing written) when the thread has expired: the store
 * removes it with EXPIRE_THREAD and calls again.
 * Returns {"ok", result} | {"replayed", result} | {"request_id_reused"} |
 * {"last_seq_mismatch", last_seq} | {"strategy_mismatch", thread strategy key} |
 * {"quota", quota name, limit}.
 */
export const APPEND = script(
  "append",
  `
local now = tonumber(ARGV[2])
local request_id = ARGV[3]
local exists = redis.call('EXISTS', KEYS[1]) == 1
if exists and expired(KEYS[1], now) then return {'expired'} end
local ttl_before = exists and redis.call('HGET', KEYS[1], 'ttl_ms')
if request_id ~= '' and exists then
  local record = redis.call('HGET', KEYS[3], request_id)
  if record then
    local a = string.find(record, '\\n', 1, true)
    local b = string.find(record, '\\n', a + 1, true)
    if now - tonumber(string.sub(record, 1, a - 1)) < tonumber(ARGV[9]) then
      if string.sub(record, a + 1, b - 1) ~= ARGV[4] then return {'request_id_reused'} end
      return {'replayed', string.sub(record, b + 1)}
    end
  end
end

-- core/append.ts decideAppend, on strategy keys.
local last_seq = 0
local current = {}
if exists then
  current = redis.call('HMGET', KEYS[1], 'last_seq', 'strategy_key', 'kind', 'exclude_system',
    'max_stored', 'summarized_through_seq', 'counted')
  last_seq = tonumber(current[1])
end
if ARGV[5] ~= '' and tonumber(ARGV[5]) ~= last_seq then
  return {'last_seq_mismatch', str(last_seq)}
end
local target = nil
if not exists then
  if ARGV[11] == '' then target = 16 else target = 11 end
elseif ARGV[11] ~= '' and ARGV[12] ~= current[2] then
  if ARGV[6] ~= '1' then return {'strategy_mismatch', current[2]} end
  target = 11
end

-- The thread after the Add, its trim included, is worked out before anything
-- is written, so an Add refused by a quota writes nothing.
local kind, max_stored, exclude_system = current[3], tonumber(current[5]), current[4]
if target then
  kind, max_stored, exclude_system = ARGV[target + 2], tonumber(ARGV[target + 3]), ARGV[target + 4]
end
-- core/append.ts keepsSummary, from the thread's strategy to the one it has now
-- (checked on every append, as the memory store does).
local keeps = exists and current[3] == 'summary' and kind == 'summary' and current[4] == exclude_system
local through = 0
if keeps then through = tonumber(current[6]) end
local count = #ARGV - 26
local entries = {}
local added_bytes = 0
for i = 1, count do
  entries[i] = str(last_seq + i) .. ' ' .. ARGV[26 + i]
  added_bytes = added_bytes + entry_bytes(entries[i])
end
local len_old = 0
if exists then len_old = redis.call('LLEN', KEYS[2]) end
local dropped, dropped_bytes = trim_plan(KEYS[2], len_old, entries, kind, max_stored, through)
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
  local names = {'max_threads_per_namespace', 'max_messages_per_namespace', 'max_bytes_per_namespace'}
  for i = 1, 3 do
    local limit = tonumber(ARGV[20 + i])
    if limit > 0 and delta[i] > 0 and (tonumber(used[i]) or 0) + delta[i] > limit then
      return {'quota', names[i], ARGV[20 + i]}
    end
  end
end

if not exists then
  redis.call('HSET', KEYS[1], 'thread_id', ARGV[1], 'incarnation', ARGV[7], 'last_seq', '0',
    'summarized_through_seq', '0', 'summary', '', 'summary_time', '0',
    'create_time', ARGV[2], 'update_time', ARGV[2], 'counted', '1', 'bytes', '0')
  redis.call('ZADD', KEYS[5], 0, ARGV[1])
end
if exists and not keeps then
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
-- bytes starts at 0 so that use() below leaves the thread's own count set,
-- even when this Add changed no byte (HINCRBY is skipped for 0).
if adopt then redis.call('HSET', KEYS[1], 'counted', '1', 'bytes', '0') end
use(KEYS[7], KEYS[1], delta[1], delta[2], delta[3])
set_labels(KEYS[1], ARGV[1], ARGV[24])
do
  local ttl = ARGV[25]
  if ttl == '' and exists then ttl = ttl_before or '0' end
  if ttl == '' then ttl = ARGV[26] end
  -- A thread without a ttl that keeps none costs no write here (the common Add).
  if tonumber(ttl) > 0 or ttl_before then set_ttl(KEYS[1], ARGV[1], tonumber(ttl), now) end
end

local added_last = 0
if count > 0 then added_last = last_seq end
local result = str(first_seq) .. '\\n' .. str(added_last) .. '\\n'
  .. cjson.encode(redis.call('HGETALL', KEYS[1]))
if request_id ~= '' then
  redis.call('HSET', KEYS[3], request_id, ARGV[2] .. '\\n' .. ARGV[4] .. '\\n' .. result)
  redis.call('ZADD', KEYS[4], now, request_id)
  -- Forget the oldest ids while there are too many or they expired.
  local expired = redis.call('ZCOUNT', KEYS[4], '-inf', str(now - tonumber(ARGV[9])))
  local drop = math.max(expired, redis.call('ZCARD', KEYS[4]) - tonumber(ARGV[10]))
  if drop > 0 then
    local ids = redis.call('ZRANGE', KEYS[4], 0, drop - 1)
    redis.call('ZREMRANGEBYRANK', KEYS[4], 0, drop - 1)
    for i = 1, #ids, 256 do
      redis.call('HDEL', KEYS[3], unpack(ids, i, math.min(i + 255, #ids)))
    end
  end
end
if count > 0 then
  log_event(KEYS[6], ARGV[8], ARGV[1], ARGV[2], 'messages_added',
    'first_seq', str(first_seq), 'last_seq', str(last_seq))
end
return {'ok', result}
`,
);

/**
 * Store.read. KEYS: thread, messages. ARGV: "" for every message, or
 * "view" with the Get's limit ("" for the strategy's size) and the slack
 * (store.ts ReadView). Returns false (nil) when the thread does not exist,
 * else {thread hash as a flat array, message entries, 1 if complete else 0}.
 *
 * Seqs in the list are consecutive (Adds append them in order, trimming only
 * drops the oldest), so the list index of a seq is seq - first seq: the
 * unfolded messages of a summary thread are found without reading the rest.
 */
export const READ = script(
  "read",
  `
local thread = redis.call('HGETALL', KEYS[1])
if #thread == 0 then return false end
local start = 0
if ARGV[1] == 'view' then
  local t = {}
  for i = 1, #thread, 2 do t[thread[i]] = thread[i + 1] end
  local strategy = cjson.decode(t['strategy'])
  local size = tonumber(ARGV[2])
  if size == nil then
    if strategy['kind'] == 'buffer' then size = strategy['maxMessages'] else size = strategy['window'] end
  end
  local len = redis.call('LLEN', KEYS[2])
  if size > 0 then start = math.max(0, len - size - tonumber(ARGV[3])) end
  if strategy['kind'] == 'summary' then
    local first_seq = tonumber(t['last_seq']) - len + 1
    start = math.min(start, math.max(0, tonumber(t['summarized_through_seq']) + 1 - first_seq))
  end
end
local complete = 0
if start == 0 then complete = 1 end
return {thread, redis.call('LRANGE', KEYS[2], start, -1), complete}
`,
);

/**
 * Store.commitSummary. KEYS: thread, messages, lease, events, usage. ARGV:
 * incarnation, lease token, from_seq, through_seq, summary, folded_count,
 * now, event retention, thread_id. Returns the thread hash, or nil when a
 * check fails (nothing written).
 */
export const COMMIT_SUMMARY = script(
  "commit_summary",
  `
local t = redis.call('HMGET', KEYS[1], 'incarnation', 'summarized_through_seq', 'kind', 'max_stored',
  'counted')
if t[1] ~= ARGV[1] then return false end
if tonumber(t[2]) ~= tonumber(ARGV[3]) or tonumber(ARGV[4]) <= tonumber(ARGV[3]) then return false end
if redis.call('GET', KEYS[3]) ~= ARGV[2] then return false end
redis.call('HSET', KEYS[1], 'summary', ARGV[5], 'summary_time', ARGV[7],
  'summarized_through_seq', ARGV[4], 'update_time', ARGV[7])
local dropped, bytes = trim(KEYS[2], t[3], tonumber(t[4]), tonumber(ARGV[4]))
if t[5] == '1' then use(KEYS[5], KEYS[1], 0, -dropped, -bytes) end
log_event(KEYS[4], ARGV[8], ARGV[9], ARGV[7], 'summary_updated',
  'summary', ARGV[5], 'summarized_through_seq', ARGV[4], 'folded_count', ARGV[6])
return redis.call('HGETALL', KEYS[1])
`,
);

/**
 * Store.recordFoldFailure. KEYS: thread, events. ARGV: incarnation, reason,
 * attempt, now, event retention, thread_id. Returns 1 when logged.
 */
export const RECORD_FOLD_FAILURE = script(
  "record_fold_failure",
  `
if redis.call('HGET', KEYS[1], 'incarnation') ~= ARGV[1] then return 0 end
log_event(KEYS[2], ARGV[5], ARGV[6], ARGV[4], 'summary_failed', 'reason', ARGV[2], 'attempt', ARGV[3])
return 1
`,
);

/**
 * Store.acquireFoldLease. KEYS: lease, lease-seq. ARGV: ttl ms. The counter
 * is per namespace and never deleted (not even by Clear), so tokens only grow.
 * Returns the token, or nil when the lease is held.
 */
export const ACQUIRE_LEASE = script(
  "acquire_lease",
  `
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], str(token), 'PX', ARGV[1])
return token
`,
);

/** Store.releaseFoldLease: compare-and-delete. KEYS: lease. ARGV: token. */
export const RELEASE_LEASE = script(
  "release_lease",
  `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`,
);

/**
 * Store.clear. KEYS: thread, messages, requests, request times, threads,
 * events, usage. ARGV: thread_id, now, event retention. The lease is left to expire:
 * a fold in flight can no longer commit (the incarnation is gone).
 */
export const CLEAR = script(
  "clear",
  `
local t = redis.call('HMGET', KEYS[1], 'counted', 'bytes')
local len = redis.call('LLEN', KEYS[2])
drop_labels(KEYS[1], ARGV[1])
redis.call('ZREM', label_base(KEYS[1], ARGV[1]) .. 'expiry', ARGV[1])
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
if t[1] == '1' then use(KEYS[7], false, -1, -len, -(tonumber(t[2]) or 0)) end
redis.call('ZREM', KEYS[5], ARGV[1])
log_event(KEYS[6], ARGV[3], ARGV[1], ARGV[2], 'thread_cleared')
return 1
`,
);

/**
 * One chunk of Store.clearAll: the first `chunk` threads in byte order. KEYS:
 * threads, events, usage. ARGV: key base, now, event retention, chunk. Returns how
 * many were cleared. The per-thread keys are derived from the key base
 * rather than declared; they carry the namespace's hash tag, so they live in
 * the same cluster slot as the declared keys.
 */
export const CLEAR_CHUNK = script(
  "clear_chunk",
  `
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[4]) - 1)
local threads, messages, bytes = 0, 0, 0
for _, id in ipairs(ids) do
  local t = redis.call('HMGET', ARGV[1] .. 't:' .. id, 'counted', 'bytes')
  if t[1] == '1' then
    threads = threads + 1
    messages = messages + redis.call('LLEN', ARGV[1] .. 'm:' .. id)
    bytes = bytes + (tonumber(t[2]) or 0)
  end
  drop_labels(ARGV[1] .. 't:' .. id, id)
  redis.call('ZREM', ARGV[1] .. 'expiry', id)
  redis.call('DEL', ARGV[1] .. 't:' .. id, ARGV[1] .. 'm:' .. id,
    ARGV[1] .. 'r:' .. id, ARGV[1] .. 'ri:' .. id)
  log_event(KEYS[2], ARGV[3], id, ARGV[2], 'thread_cleared')
end
if #ids > 0 then redis.call('ZREM', KEYS[1], unpack(ids)) end
use(KEYS[3], false, -threads, -messages, -bytes)
return #ids
`,
);

const STREAM_POSITION = `
local function cmp_num(a, b)
  if #a ~= #b then if #a < #b then return -1 else return 1 end end
  if a == b then return 0 end
  if a < b then return -1 else return 1 end
end
-- Stream ids "<ms>-<seq>" in canonical decimal, compared as numbers.
local function cmp_id(a, b)
  local ad, bd = string.find(a, '-', 1, true), string.find(b, '-', 1, true)
  local c = cmp_num(string.sub(a, 1, ad - 1), string.sub(b, 1, bd - 1))
  if c ~= 0 then return c end
  return cmp_num(string.sub(a, ad + 1), string.sub(b, bd + 1))
end
-- last-generated-id and max-deleted-entry-id (Redis 7.0+), "0-0" for no stream.
local function position(key)
  local last, deleted = '0-0', '0-0'
  if redis.call('EXISTS', key) == 1 then
    local info = redis.call('XINFO', 'STREAM', key)
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then last = info[i + 1]
      elseif info[i] == 'max-deleted-entry-id' then deleted = info[i + 1] end
    end
  end
  return last, deleted
end
`;

/**
 * Store.readEvents. KEYS: events, the incarnation key. ARGV: cursor
 * (canonical stream id), count, the incarnation the cursor was issued in.
 * Returns {"lost", incarnation or false} when the incarnation key no longer
 * holds that incarnation (the data was lost, or another replica rotated it),
 * {"ahead"} for a cursor after the newest id ever generated, {"gone"} when an
 * event after the cursor was trimmed (its id is below max-deleted-entry-id),
 * else {"ok", entries}. The incarnation is checked in the same atomic step as
 * the read, so no cursor of a lost history is ever read in a new one.
 */
export const READ_EVENTS = script(
  "read_events",
  `${STREAM_POSITION}
local incarnation = redis.call('GET', KEYS[2])
if incarnation ~= ARGV[3] then return {'lost', incarnation} end
local last, deleted = position(KEYS[1])
if cmp_id(ARGV[1], last) > 0 then return {'ahead'} end
if cmp_id(ARGV[1], deleted) < 0 then return {'gone'} end
if ARGV[1] == last then return {'ok', {}} end
return {'ok', redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])}
`,
);

/**
 * Store.headCursor. KEYS: events, the incarnation key. Returns {last
 * generated id ("0-0" for none), the incarnation (false when the key is
 * gone)}, read in one atomic step.
 */
export const HEAD = script(
  "head",
  `${STREAM_POSITION}
local last = position(KEYS[1])
return {last, redis.call('GET', KEYS[2])}
`,
);

/**
 * Replaces the incarnation when it still is ARGV[1] (a replica found the
 * history shorter than a cursor it issued: events were lost). KEYS: the
 * incarnation key. ARGV: the incarnation found wanting, the new one.
 * Returns the incarnation in force afterwards.
 */
export const ROTATE_INCARNATION = script(
  "rotate_incarnation",
  `
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] or not current then
  redis.call('SET', KEYS[1], ARGV[2])
  return ARGV[2]
end
return current
`,
);

/**
 * Store.importThread. KEYS: thread, messages, threads, events, usage. ARGV:
 * thread_id, incarnation, strategy (json, key, kind, max_stored,
 * exclude_system), last_seq, summarized_through_seq, summary, summary_time,
 * create_time, update_time, now, event retention, the quotas (max threads,
 * messages, bytes; 0 none), the messages' bytes, the first stored seq (0:
 * none), the labels' JSON ("" none), the ttl and expire time ("" none), then
 * the message entries "<seq> <bytes> <json>", oldest first.
 * Returns {"exists"} | {"quota", quota name, limit} | {"ok"}.
 */
export const IMPORT_THREAD = script(
  "import_thread",
  `
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
local count = #ARGV - 23
local delta = {1, count, tonumber(ARGV[19])}
local used = redis.call('HMGET', KEYS[5], 'threads', 'messages', 'bytes')
local names = {'max_threads_per_namespace', 'max_messages_per_namespace', 'max_bytes_per_namespace'}
for i = 1, 3 do
  local limit = tonumber(ARGV[15 + i])
  if limit > 0 and delta[i] > 0 and (tonumber(used[i]) or 0) + delta[i] > limit then
    return {'quota', names[i], ARGV[15 + i]}
  end
end
redis.call('HSET', KEYS[1], 'thread_id', ARGV[1], 'incarnation', ARGV[2], 'strategy', ARGV[3],
  'strategy_key', ARGV[4], 'kind', ARGV[5], 'max_stored', ARGV[6], 'exclude_system', ARGV[7],
  'last_seq', ARGV[8], 'summarized_through_seq', ARGV[9], 'summary', ARGV[10],
  'summary_time', ARGV[11], 'create_time', ARGV[12], 'update_time', ARGV[13],
  'counted', '1', 'bytes', '0')
redis.call('ZADD', KEYS[3], 0, ARGV[1])
redis.call('DEL', KEYS[2])
for i = 24, #ARGV, 256 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 255, #ARGV)))
end
use(KEYS[5], KEYS[1], delta[1], delta[2], delta[3])
set_labels(KEYS[1], ARGV[1], ARGV[21])
if ARGV[22] ~= '' then
  redis.call('HSET', KEYS[1], 'ttl_ms', ARGV[22], 'expire_at', ARGV[23])
  redis.call('ZADD', label_base(KEYS[1], ARGV[1]) .. 'expiry', tonumber(ARGV[23]), ARGV[1])
end
if count > 0 then
  log_event(KEYS[4], ARGV[15], ARGV[1], ARGV[14], 'messages_added',
    'first_seq', ARGV[20], 'last_seq', ARGV[8])
end
return {'ok'}
`,
);

/**
 * Store.listThreads with labels. KEYS: the zset of each label of the filter.
 * ARGV: after ("" from the start), limit. Walks the smallest zset in byte
 * order from `after`, keeping the ids every other zset holds too; returns at
 * most `limit` ids. Costs the rarest label's threads, never the namespace.
 */
export const LIST_LABELED = script(
  "list_labeled",
  `
local limit = tonumber(ARGV[2])
local driver, size = 1, redis.call('ZCARD', KEYS[1])
for i = 2, #KEYS do
  local n = redis.call('ZCARD', KEYS[i])
  if n < size then driver, size = i, n end
end
local out = {}
if size == 0 or limit <= 0 then return out end
local chunk = math.max(limit, 64)
local from = '-'
if ARGV[1] ~= '' then from = '(' .. ARGV[1] end
while true do
  local ids = redis.call('ZRANGE', KEYS[driver], from, '+', 'BYLEX', 'LIMIT', 0, chunk)
  for _, id in ipairs(ids) do
    local all = true
    for i = 1, #KEYS do
      if i ~= driver and not redis.call('ZSCORE', KEYS[i], id) then all = false break end
    end
    if all then
      out[#out + 1] = id
      if #out >= limit then return out end
    end
  end
  if #ids < chunk then return out end
  from = '(' .. ids[#ids]
end
`,
);

/**
 * Removes one thread if it has expired. KEYS: thread, threads, events, usage.
 * ARGV: thread_id, now, event retention. Returns 1 if removed, else 0.
 */
export const EXPIRE_THREAD = script(
  "expire_thread",
  `
local now = tonumber(ARGV[2])
if not expired(KEYS[1], now) then return 0 end
remove_thread(label_base(KEYS[1], ARGV[1]), ARGV[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], now, 'expired')
return 1
`,
);

/**
 * Store.sweepExpired for one namespace. KEYS: expiry, threads, events, usage.
 * ARGV: key base, now, event retention, limit. Removes up to `limit` expired
 * threads, oldest expiry first; an entry whose thread was written since (or
 * is gone) is brought up to date instead. Returns how many were removed.
 */
export const EXPIRE_DUE = script(
  "expire_due",
  `
local now = tonumber(ARGV[2])
local ids = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[4]))
local removed = 0
for _, id in ipairs(ids) do
  local at = redis.call('HGET', ARGV[1] .. 't:' .. id, 'expire_at')
  if not at then
    redis.call('ZREM', KEYS[1], id)
  elseif tonumber(at) > now then
    redis.call('ZADD', KEYS[1], tonumber(at), id)
  else
    remove_thread(ARGV[1], id, KEYS[2], KEYS[3], KEYS[4], ARGV[3], now, 'expired')
    removed = removed + 1
  end
end
return removed
`,
);

export const ALL_SCRIPTS: readonly LuaScript[] = [
  EXPIRE_THREAD,
  EXPIRE_DUE,
  LIST_LABELED,
  IMPORT_THREAD,
  APPEND,
  READ,
  COMMIT_SUMMARY,
  RECORD_FOLD_FAILURE,
  ACQUIRE_LEASE,
  RELEASE_LEASE,
  CLEAR,
  CLEAR_CHUNK,
  READ_EVENTS,
  HEAD,
  ROTATE_INCARNATION,
];
