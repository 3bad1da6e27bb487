import { NUMBERS } from "./entries.js";
import { fragment } from "./fragment.js";

/** Thread labels and retention, both indexed in zsets under the namespace's key base. */
export const LABELS = fragment(
  "labels",
  [],
  `
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
`,
);

/**
 * Retention. ttl_after_add mirrors core/ttl.ts ttlAfterAdd and is_expired
 * isExpired; the case tables test/core/cases/ttl.ts prove them, run against
 * the core (test/core/decision-cases.test.ts) and against this Lua in a real
 * redis-server (test/store/redis-lua-decisions.test.ts).
 */
export const TTL = fragment(
  "ttl",
  [NUMBERS, LABELS],
  `
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

-- core/ttl.ts isExpired over the thread hash's expire_at (false: none).
local function is_expired(expire_at, now)
  return expire_at ~= false and tonumber(expire_at) <= now
end

-- Whether the thread exists and has expired at \`now\`.
local function expired(thread_key, now)
  return is_expired(redis.call('HGET', thread_key, 'expire_at'), now)
end

-- core/ttl.ts ttlAfterAdd: the Add's ttl (\`requested\`, '' none), the
-- thread's (\`current\`, false none), whether the Add creates the thread,
-- and the server's default; 0: none.
local function ttl_after_add(requested, current, created, default_ttl)
  if requested ~= '' then return tonumber(requested) end
  if not created then return tonumber(current) or 0 end
  return tonumber(default_ttl) or 0
end
`,
);
