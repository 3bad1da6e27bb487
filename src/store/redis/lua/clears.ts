import { NUMBERS } from "./entries.js";
import { LOG_EVENT } from "./event-log.js";
import { fragment, script } from "./fragment.js";
import { LABELS, TTL } from "./labels.js";
import { LINEAGE } from "./lineage.js";
import { USAGE } from "./usage.js";

/**
 * Removing threads: Store.clear, Store.clearAll's chunks, and expiry (an
 * Add meeting an expired thread, and Store.sweepExpired).
 */

/** Removing one thread with everything it has, as CLEAR does, logging thread_cleared. */
export const REMOVE_THREAD = fragment(
  "remove_thread",
  [NUMBERS, LABELS, USAGE, LOG_EVENT, LINEAGE],
  `
-- What removing a thread does to its segments and its parent's forks
-- index, given its hash's lineage and parent fields (false: none): one
-- reference less on each frozen entry (keys.ts), and the thread leaves
-- \`B fk:<parent>\`. Nothing for a thread that never forked.
local function release_thread(base, thread_id, usage, lineage, parent)
  if lineage then release_entries(base, usage, lineage_of(lineage)) end
  if parent then redis.call('ZREM', base .. 'fk:' .. cjson.decode(parent)['threadId'], thread_id) end
end

-- Removes a thread (as CLEAR does) and logs thread_cleared with \`reason\`
-- ("" none). B is the key base; usage and stream are the namespace's.
local function remove_thread(base, thread_id, threads, stream, usage, retention, now, reason)
  local key = base .. 't:' .. thread_id
  local t = redis.call('HMGET', key, 'counted', 'bytes', 'lineage', 'parent')
  local len = redis.call('LLEN', base .. 'm:' .. thread_id)
  release_thread(base, thread_id, usage, t[3], t[4])
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

`,
);

/**
 * Store.clear. KEYS: thread, messages, requests, request times, threads,
 * events, usage. ARGV: thread_id, now, event retention. The lease is left to expire:
 * a fold in flight can no longer commit (the incarnation is gone).
 */
export const CLEAR = script(
  "clear",
  [LABELS, USAGE, LOG_EVENT, REMOVE_THREAD],
  `
local t = redis.call('HMGET', KEYS[1], 'counted', 'bytes', 'lineage', 'parent')
local len = redis.call('LLEN', KEYS[2])
release_thread(label_base(KEYS[1], ARGV[1]), ARGV[1], KEYS[7], t[3], t[4])
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
  [LABELS, USAGE, LOG_EVENT, REMOVE_THREAD],
  `
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[4]) - 1)
local threads, messages, bytes = 0, 0, 0
for _, id in ipairs(ids) do
  local t = redis.call('HMGET', ARGV[1] .. 't:' .. id, 'counted', 'bytes', 'lineage', 'parent')
  if t[1] == '1' then
    threads = threads + 1
    messages = messages + redis.call('LLEN', ARGV[1] .. 'm:' .. id)
    bytes = bytes + (tonumber(t[2]) or 0)
  end
  release_thread(ARGV[1], id, KEYS[3], t[3], t[4])
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

/**
 * Removes one thread if it has expired. KEYS: thread, threads, events, usage.
 * ARGV: thread_id, now, event retention. Returns 1 if removed, else 0.
 */
export const EXPIRE_THREAD = script(
  "expire_thread",
  [TTL, REMOVE_THREAD],
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
  [REMOVE_THREAD],
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
