import { NUMBERS } from "./entries.js";
import { fragment } from "./fragment.js";

/**
 * Request-id records (keys.ts `B r:<thread>` and `B ri:<thread>`): one id
 * names one request of the thread's incarnation. A record is
 * `"<time>\n<request hash>\n<result>"`; an Add's result is
 * `"<first_seq>\n<last_seq>\n<thread JSON>"` (codec.ts).
 *
 * decide_replay mirrors core/idempotency.ts decideReplay; the case table
 * test/core/cases/replay.ts proves it, run
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
`,
);
