import { LOG_EVENT } from "./event-log.js";
import { script } from "./fragment.js";
import { LABELS } from "./labels.js";
import { QUOTA } from "./quota.js";
import { USAGE } from "./usage.js";

/**
 * Store.importThread. KEYS: thread, messages, threads, events, usage. ARGV:
 * thread_id, incarnation, strategy (json, key, kind, max_stored,
 * exclude_system), last_seq, summarized_through_seq, summary, summary_time,
 * create_time, update_time, now, event retention, the quotas (max threads,
 * messages, bytes; 0 none), the messages' bytes, the first stored seq (0:
 * none), the labels' JSON ("" none), the ttl and expire time ("" none), the
 * parent origin's JSON ("" none: kept as given, nothing shared), then the
 * message entries "<seq> <bytes> <json>", oldest first.
 * Returns {"exists"} | {"quota", quota name, limit} | {"ok"}. The quota
 * check is lua/quota.ts's.
 */
export const IMPORT_THREAD = script(
  "import_thread",
  [USAGE, QUOTA, LABELS, LOG_EVENT],
  `
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
local count = #ARGV - 24
local delta = {1, count, tonumber(ARGV[19])}
local used = redis.call('HMGET', KEYS[5], 'threads', 'messages', 'bytes')
local quota, limit = quota_refusal({ARGV[16], ARGV[17], ARGV[18]}, used, delta)
if quota then return {'quota', quota, limit} end
redis.call('HSET', KEYS[1], 'thread_id', ARGV[1], 'incarnation', ARGV[2], 'strategy', ARGV[3],
  'strategy_key', ARGV[4], 'kind', ARGV[5], 'max_stored', ARGV[6], 'exclude_system', ARGV[7],
  'last_seq', ARGV[8], 'summarized_through_seq', ARGV[9], 'summary', ARGV[10],
  'summary_time', ARGV[11], 'create_time', ARGV[12], 'update_time', ARGV[13],
  'counted', '1', 'bytes', '0')
redis.call('ZADD', KEYS[3], 0, ARGV[1])
redis.call('DEL', KEYS[2])
for i = 25, #ARGV, 256 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 255, #ARGV)))
end
if ARGV[24] ~= '' then
  redis.call('HSET', KEYS[1], 'parent', ARGV[24])
  redis.call('ZADD', label_base(KEYS[1], ARGV[1]) .. 'fk:' .. cjson.decode(ARGV[24])['threadId'], 0, ARGV[1])
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
