import { LOG_EVENT } from "./event-log.js";
import { FORK_SHARING } from "./fork.js";
import { fragment, script } from "./fragment.js";
import { LABELS } from "./labels.js";
import { QUOTA } from "./quota.js";
import { USAGE } from "./usage.js";

/**
 * What both imports write of the thread as the command gives it, from the
 * ARGV layout they share (IMPORT_THREAD's, below): its hash, parent origin,
 * labels and retention, and its messages_added event.
 */
const IMPORTED = fragment(
  "imported",
  [LABELS, LOG_EVENT],
  `
local function write_imported_state(thread_key)
  redis.call('HSET', thread_key, 'thread_id', ARGV[1], 'incarnation', ARGV[2], 'strategy', ARGV[3],
    'strategy_key', ARGV[4], 'kind', ARGV[5], 'max_stored', ARGV[6], 'exclude_system', ARGV[7],
    'last_seq', ARGV[8], 'summarized_through_seq', ARGV[9], 'summary', ARGV[10],
    'summary_time', ARGV[11], 'create_time', ARGV[12], 'update_time', ARGV[13],
    'counted', '1', 'bytes', '0')
  if ARGV[24] ~= '' then redis.call('HSET', thread_key, 'parent', ARGV[24]) end
  set_labels(thread_key, ARGV[1], ARGV[21])
  if ARGV[22] ~= '' then
    redis.call('HSET', thread_key, 'ttl_ms', ARGV[22], 'expire_at', ARGV[23])
    redis.call('ZADD', label_base(thread_key, ARGV[1]) .. 'expiry', tonumber(ARGV[23]), ARGV[1])
  end
end

-- messages_added from the thread's oldest stored seq to its last_seq.
local function log_imported(events)
  log_event(events, ARGV[15], ARGV[1], ARGV[14], 'messages_added',
    'first_seq', ARGV[20], 'last_seq', ARGV[8])
end
`,
);

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
  [USAGE, QUOTA, IMPORTED],
  `
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
local count = #ARGV - 24
local delta = {1, count, tonumber(ARGV[19])}
local used = redis.call('HMGET', KEYS[5], 'threads', 'messages', 'bytes')
local quota, limit = quota_refusal({ARGV[16], ARGV[17], ARGV[18]}, used, delta)
if quota then return {'quota', quota, limit} end
write_imported_state(KEYS[1])
redis.call('ZADD', KEYS[3], 0, ARGV[1])
redis.call('DEL', KEYS[2])
for i = 25, #ARGV, 256 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 255, #ARGV)))
end
if ARGV[24] ~= '' then
  redis.call('ZADD', label_base(KEYS[1], ARGV[1]) .. 'fk:' .. cjson.decode(ARGV[24])['threadId'], 0, ARGV[1])
end
use(KEYS[5], KEYS[1], delta[1], delta[2], delta[3])
if count > 0 then log_imported(KEYS[4]) end
return {'ok'}
`,
);

/**
 * Store.importThread with shareFrom, one script: the thread written as a
 * Fork of its parent at throughSeq would be (lua/fork.ts FORK_SHARING, on a
 * plan forks.ts importFork made on the parent as it read it), its own
 * messages after the copied ones in its head, its state as the command
 * gives it; no trim, no request record, no thread_forked.
 *
 * KEYS: parent thread, thread, threads, events, usage. ARGV 1 to 24 as
 * IMPORT_THREAD's (the messages' bytes: its own; the first stored seq: the
 * parent's oldest, which the thread shares), then the parent's id, its
 * head's length as read, "" (the core refused) or the plan's JSON (FORK's
 * head_low, copy_from, copy_to, head_frozen, entries, parent_entries), the
 * number n of fields of the parent's hash as read, those n (HGETALL, flat),
 * then its own message entries as IMPORT_THREAD's.
 *
 * Returns {"exists"} (checked first, as IMPORT_THREAD does) | {"retry"}
 * (the parent changed since it was read) | {"refused"} | {"quota", name,
 * limit} | {"ok"}.
 */
export const IMPORT_FORK = script(
  "import_fork",
  [USAGE, QUOTA, IMPORTED, FORK_SHARING],
  `
if redis.call('EXISTS', KEYS[2]) == 1 then return {'exists'} end
local base = label_base(KEYS[2], ARGV[1])
local parent_head = base .. 'm:' .. ARGV[25]
local head_len = redis.call('LLEN', parent_head)
local last_field = 28 + tonumber(ARGV[28])
if not parent_as_read(KEYS[1], head_len, tonumber(ARGV[26]), 29, last_field) then
  return {'retry'}
end
if ARGV[27] == '' then return {'refused'} end
local plan = cjson.decode(ARGV[27])

local head, bytes = copied_entries(parent_head, plan)
for i = last_field + 1, #ARGV do head[#head + 1] = ARGV[i] end
bytes = bytes + tonumber(ARGV[19])
do
  local used = redis.call('HMGET', KEYS[5], 'threads', 'messages', 'bytes')
  local quota, limit = quota_refusal({ARGV[16], ARGV[17], ARGV[18]}, used, {1, #head, bytes})
  if quota then return {'quota', quota, limit} end
end

local entries = share_segments(base, KEYS[1], parent_head, head_len, plan)
write_imported_state(KEYS[2])
link_fork(base, KEYS[2], KEYS[3], ARGV[1], ARGV[25], entries, head)
use(KEYS[5], KEYS[2], 1, #head, bytes)
log_imported(KEYS[4])
return {'ok'}
`,
);
