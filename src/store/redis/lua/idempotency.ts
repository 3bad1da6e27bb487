import { NUMBERS } from "./entries.js";
import { fragment } from "./fragment.js";

/**
 * Request-id records (keys.ts `B r:<thread>` and `B ri:<thread>`), shared by
 * Add and Rewind: one id names one request of the thread's incarnation. A
 * record is `"<time>\n<request hash>\n<result>"`; an Add's result is
 * `"<first_seq>\n<last_seq>\n<thread JSON>"`, a Rewind's
 * `"rewind\n<removed>\n<summary dropped 1/0>\n<thread JSON>"` (codec.ts).
 *
 * decide_replay mirrors core/idempotency.ts decideReplay, and
 * forget_request core/rewind.ts forgetRequest; the case tables
 * test/core/cases/replay.ts and test/core/cases/rewind.ts prove them, run
 * against the core (test/core/decision-cases.test.ts) and against this Lua
 * in a real redis-server (test/store/redis-lua-decisions.test.ts). Which
 * records to keep (core/idempotency.ts requestsToKeep) is decided outside:
 * the store passes its dropThrough and keepNewest to record_request.
 */
export const REQUESTS = fragment(
  "requests",
  [NUMBERS],
  `
-- core/idempotency.ts decideReplay over \`record\` (false: none): 'new',
-- 'replay' or 'reused' (another payload within retention: invalid_argument).
local function decide_replay(record, request_id, request_hash, now, retention_ms)
  if request_id == '' or not record then return 'new' end
  local a = string.find(record, '\\n', 1, true)
  local b = string.find(record, '\\n', a + 1, true)
  if now - tonumber(string.sub(record, 1, a - 1)) >= retention_ms then return 'new' end
  if string.sub(record, a + 1, b - 1) ~= request_hash then return 'reused' end
  return 'replay'
end

-- The first result a record holds.
local function recorded_result(record)
  local a = string.find(record, '\\n', 1, true)
  return string.sub(record, string.find(record, '\\n', a + 1, true) + 1)
end

local function is_rewind_result(result)
  return string.sub(result, 1, 7) == 'rewind\\n'
end

-- A Fork's record: "fork\\n<shared count>\\n<summary inherited 1/0>".
local function is_fork_result(result)
  return string.sub(result, 1, 5) == 'fork\\n'
end

-- 'add', 'rewind' or 'fork': the kind of request a recorded result answers.
local function result_kind(result)
  if is_rewind_result(result) then return 'rewind' end
  if is_fork_result(result) then return 'fork' end
  return 'add'
end

-- The reply to a request whose id was seen: {'replayed', first result} for
-- a retry of a request of this kind ('add', 'rewind' or 'fork'), {'request_id_reused'}
-- for another payload or the other kind; nil for a new request.
local function replay_reply(requests, request_id, request_hash, now, retention_ms, kind)
  if request_id == '' then return nil end
  local record = redis.call('HGET', requests, request_id)
  local seen = decide_replay(record, request_id, request_hash, now, retention_ms)
  if seen == 'new' then return nil end
  if seen == 'reused' then return {'request_id_reused'} end
  local result = recorded_result(record)
  -- One id names one request: an Add's is not a Rewind's.
  if result_kind(result) ~= kind then return {'request_id_reused'} end
  return {'replayed', result}
end

-- Records the request's first result, then forgets the records at or before
-- drop_through and all but the keep_newest newest (requestsToKeep's values).
local function record_request(requests, times, request_id, request_hash, now, result, drop_through, keep_newest)
  redis.call('HSET', requests, request_id, str(now) .. '\\n' .. request_hash .. '\\n' .. result)
  redis.call('ZADD', times, now, request_id)
  local expired = redis.call('ZCOUNT', times, '-inf', str(drop_through))
  local drop = math.max(expired, redis.call('ZCARD', times) - keep_newest)
  if drop > 0 then
    local ids = redis.call('ZRANGE', times, 0, drop - 1)
    redis.call('ZREMRANGEBYRANK', times, 0, drop - 1)
    for i = 1, #ids, 256 do
      redis.call('HDEL', requests, unpack(ids, i, math.min(i + 255, #ids)))
    end
  end
end

-- core/rewind.ts forgetRequest.
local function forget_request(recorded_last_seq, to_seq)
  return recorded_last_seq > to_seq
end

-- Forgets the records of the Adds a Rewind to \`to_seq\` undid part of. Reads
-- every record of the thread: at most keep_newest, and Rewinds are rare.
local function forget_rewound(requests, times, to_seq)
  local flat = redis.call('HGETALL', requests)
  local gone = {}
  for i = 1, #flat, 2 do
    local result = recorded_result(flat[i + 1])
    -- A Fork's record stands for last seq 0: no Rewind forgets it.
    if result_kind(result) == 'add' then
      local a = string.find(result, '\\n', 1, true)
      local last = tonumber(string.sub(result, a + 1, string.find(result, '\\n', a + 1, true) - 1))
      if forget_request(last, to_seq) then gone[#gone + 1] = flat[i] end
    end
  end
  for i = 1, #gone, 256 do
    redis.call('HDEL', requests, unpack(gone, i, math.min(i + 255, #gone)))
    redis.call('ZREM', times, unpack(gone, i, math.min(i + 255, #gone)))
  end
end
`,
);
