import { ENTRIES, NUMBERS } from "./entries.js";
import { LOG_EVENT } from "./event-log.js";
import { fragment, script } from "./fragment.js";
import { REQUESTS } from "./idempotency.js";
import { LABELS, TTL } from "./labels.js";
import { LINEAGE } from "./lineage.js";
import { QUOTA } from "./quota.js";
import { USAGE } from "./usage.js";

/**
 * What a Fork and an imported fork (lua/import.ts IMPORT_FORK) write alike,
 * from a plan the store made on the parent as it read it (the plan's
 * fields are FORK's, below): the check that the parent is still that, the
 * copy of at most FORK_COPY_MAX of its head, the freeze of its head, the
 * references on the shared segments, and the new thread's lineage, head
 * and index entries.
 */
export const FORK_SHARING = fragment(
  "fork_sharing",
  [NUMBERS, ENTRIES, LINEAGE],
  `
-- Whether the parent is still as the store read it: its head's length and
-- its whole hash (ARGV[first..last], flat). Compared as fields, not as a
-- sequence: HGETALL's order is the hash's own.
local function parent_as_read(parent_key, head_len, read_len, first, last)
  if head_len ~= read_len then return false end
  local seen = redis.call('HGETALL', parent_key)
  if #seen ~= last - first + 1 then return false end
  local read = {}
  for i = first, last, 2 do read[ARGV[i]] = ARGV[i + 1] end
  for i = 1, #seen, 2 do
    if read[seen[i]] ~= seen[i + 1] then return false end
  end
  return true
end

-- The entries of the parent's head the plan copies, and their bytes.
local function copied_entries(parent_head, plan)
  local copied, bytes = {}, 0
  if plan.copy_to >= plan.copy_from then
    copied = redis.call('LRANGE', parent_head, plan.copy_from - plan.head_low, plan.copy_to - plan.head_low)
    for _, x in ipairs(copied) do bytes = bytes + entry_bytes(x) end
  end
  return copied, bytes
end

-- Freezes the parent's head when the plan says so and takes a reference on
-- every segment the new thread's entries name; returns those entries, the
-- frozen head ("" in the plan) named.
local function share_segments(base, parent_key, parent_head, head_len, plan)
  local entries = plan.entries
  if plan.head_frozen then
    -- The parent's head becomes a frozen segment: renamed, not copied (O(1)).
    local seg = str(redis.call('INCR', base .. 'seg-seq'))
    local p = redis.call('HMGET', parent_key, 'counted', 'bytes')
    local count, held = head_len, tonumber(p[2]) or 0
    -- A parent written before quotas is not in the usage: neither are its segments.
    if p[1] ~= '1' then count, held = 0, 0 end
    redis.call('RENAME', parent_head, base .. 's:' .. seg)
    redis.call('HSET', base .. 'sg:' .. seg, 'refs', '1', 'count', str(count), 'bytes', str(held))
    redis.call('HSET', parent_key, 'bytes', '0')
    local function named(list)
      for _, e in ipairs(list) do if e[1] == '' then e[1] = seg end end
      return list
    end
    save_lineage(parent_key, named(plan.parent_entries))
    entries = named(entries)
  end
  for _, e in ipairs(entries) do redis.call('HINCRBY', base .. 'sg:' .. e[1], 'refs', 1) end
  return entries
end

-- The new thread's lineage and owned head (\`head\`, entries oldest first),
-- and its place in the namespace's threads and in its parent's forks.
local function link_fork(base, thread_key, threads, id, parent_id, entries, head)
  save_lineage(thread_key, entries)
  for i = 1, #head, 256 do
    redis.call('RPUSH', base .. 'm:' .. id, unpack(head, i, math.min(i + 255, #head)))
  end
  redis.call('ZADD', threads, 0, id)
  redis.call('ZADD', base .. 'fk:' .. parent_id, 0, id)
end
`,
);

/**
 * What FORK and FORK_COPY do alike, from their shared ARGV 1 to 13 (FORK's):
 * the checks on the new thread, which come first (store.ts orders them),
 * and the writes of the new thread's hash, labels, ttl, request record and
 * thread_forked from the plan.
 */
const FORK_TARGET = fragment(
  "fork_target",
  [NUMBERS, REQUESTS, LOG_EVENT, LABELS, TTL],
  `
-- Nil when the new id is free, else the reply: expired, replayed, request_id_reused or exists.
local function fork_target_refusal(thread_key, base, now)
  if redis.call('EXISTS', thread_key) == 0 then return nil end
  if expired(thread_key, now) then return {'expired'} end
  local replay = replay_reply(base .. 'r:' .. ARGV[2], ARGV[4], ARGV[5], now, tonumber(ARGV[8]), 'fork')
  if replay and replay[1] == 'replayed' then
    return {'replayed', replay[2], redis.call('HGETALL', thread_key)}
  end
  if replay then return replay end
  return {'exists'}
end

-- The new thread's hash as the plan has it (before its messages are counted into it).
local function write_fork_state(thread_key, plan, strategy, summary, parent)
  redis.call('HSET', thread_key, 'thread_id', ARGV[2], 'incarnation', ARGV[6], 'strategy', strategy,
    'strategy_key', plan.key, 'kind', plan.kind, 'max_stored', str(plan.max_stored),
    'exclude_system', plan.exclude, 'last_seq', str(plan.last_seq),
    'summarized_through_seq', str(plan.through), 'summary', summary,
    'summary_time', str(plan.summary_time), 'create_time', ARGV[3], 'update_time', ARGV[3],
    'counted', '1', 'bytes', '0', 'parent', parent)
end

-- Its labels, ttl, request record and thread_forked; returns the {"ok", hash} reply.
local function finish_fork(thread_key, base, events, plan, labels, now)
  set_labels(thread_key, ARGV[2], labels)
  if plan.ttl > 0 then set_ttl(thread_key, ARGV[2], plan.ttl, now) end
  local inherited = '0'
  if plan.inherited then inherited = '1' end
  if ARGV[4] ~= '' then
    record_request(base .. 'r:' .. ARGV[2], base .. 'ri:' .. ARGV[2], ARGV[4], ARGV[5], now,
      'fork\\n' .. str(plan.shared) .. '\\n' .. inherited, tonumber(ARGV[10]), tonumber(ARGV[9]))
  end
  log_event(events, ARGV[7], ARGV[2], ARGV[3], 'thread_forked', 'parent_thread_id', ARGV[1],
    'at_seq', str(plan.at_seq), 'shared_count', str(plan.shared), 'summary_inherited', inherited)
  return {'ok', redis.call('HGETALL', thread_key)}
end
`,
);

/**
 * Store.fork, one script. The decisions (core/fork.ts decideFork and
 * forkTrimCount, core/lineage.ts planForkLineage and raiseFloor) are the
 * core's own, made by the store (forks.ts) on the parent as it read it; the
 * script checks, atomically, that the parent is still exactly that (its
 * whole hash and its head's length), so it writes what the core decided
 * about the parent as it is, or answers {"retry"} and writes nothing. The
 * checks on the new thread come first, as store.ts orders them.
 *
 * KEYS: parent thread, new thread, threads, events, usage (every other key
 * is derived from the key base, in the same slot). ARGV: parent id, new
 * id, now, request_id, request_hash, new incarnation, event retention,
 * idempotency retention ms, keepNewest, dropThrough, the quotas (threads,
 * messages, bytes), the parent head's length as read, "" (the core refused:
 * only the new thread's checks and the parent's sameness) or the plan's
 * JSON (below), the summary, the labels' JSON, the parent origin's JSON,
 * the strategy's JSON, then the parent's hash as read (HGETALL, flat).
 *
 * The plan: key, kind, max_stored, exclude (the strategy's), last_seq,
 * through, summary_time, ttl (0 none), at_seq, shared, inherited, head_low
 * (the parent's), copy_from/copy_to (seqs of the parent's head to copy;
 * from > to: none), head_frozen, entries (the fork's, `[segment, low,
 * through, first]`, segment "" for the parent's head once frozen) and
 * parent_entries (the parent's after the freeze).
 *
 * Returns {"ok", new thread hash} | {"replayed", record result, thread hash} |
 * {"request_id_reused"} | {"exists"} | {"expired"} (the new id names an
 * expired thread: the store removes it and calls again) | {"retry"} |
 * {"refused"} | {"quota", name, limit}.
 */
export const FORK = script(
  "fork",
  [NUMBERS, USAGE, QUOTA, FORK_TARGET, FORK_SHARING],
  `
local now = tonumber(ARGV[3])
local base = label_base(KEYS[2], ARGV[2])
local FIRST_FIELD = 20
local taken = fork_target_refusal(KEYS[2], base, now)
if taken then return taken end
local parent_head = base .. 'm:' .. ARGV[1]
local head_len = redis.call('LLEN', parent_head)
if not parent_as_read(KEYS[1], head_len, tonumber(ARGV[14]), FIRST_FIELD, #ARGV) then
  return {'retry'}
end
if ARGV[15] == '' then return {'refused'} end
local plan = cjson.decode(ARGV[15])

local copied, bytes = copied_entries(parent_head, plan)
do
  local used = redis.call('HMGET', KEYS[5], 'threads', 'messages', 'bytes')
  local quota, limit = quota_refusal({ARGV[11], ARGV[12], ARGV[13]}, used, {1, #copied, bytes})
  if quota then return {'quota', quota, limit} end
end

local entries = share_segments(base, KEYS[1], parent_head, head_len, plan)

write_fork_state(KEYS[2], plan, ARGV[19], ARGV[16], ARGV[18])
link_fork(base, KEYS[2], KEYS[3], ARGV[2], ARGV[1], entries, copied)
use(KEYS[5], KEYS[2], 1, #copied, bytes)
return finish_fork(KEYS[2], base, KEYS[4], plan, ARGV[17], now)
`,
);

/**
 * Store.fork of a sharded namespace (keys.ts) whose new thread is in
 * another shard than its parent: no script may touch both, so nothing is
 * shared. The store reads the parent in one READ (an atomic snapshot in its
 * shard), the core decides on that snapshot, and this script writes the
 * fork in its own shard with copies of the messages it keeps: the checks
 * on the new thread first, as FORK's, then the quotas (one thread, the
 * copies), the thread, its head, its index entries (the forks index
 * `fk:<parent>` in the fork's shard: ListThreads reads it in every shard),
 * the request record and thread_forked.
 *
 * KEYS: new thread, threads, events, usage. ARGV 1 to 13 as FORK's, then
 * "" (the core refused) or the plan's JSON (FORK's key, kind, max_stored,
 * exclude, last_seq, through, summary_time, ttl, at_seq, shared,
 * inherited), the summary, the labels' JSON, the parent origin's JSON, the
 * strategy's JSON, then the copied entries "<seq> <bytes> <json>", oldest
 * first. Returns FORK's replies but {"retry"}.
 */
export const FORK_COPY = script(
  "fork_copy",
  [NUMBERS, ENTRIES, USAGE, QUOTA, FORK_TARGET],
  `
local now = tonumber(ARGV[3])
local base = label_base(KEYS[1], ARGV[2])
local FIRST_ENTRY = 19
local taken = fork_target_refusal(KEYS[1], base, now)
if taken then return taken end
if ARGV[14] == '' then return {'refused'} end
local plan = cjson.decode(ARGV[14])

local bytes = 0
for i = FIRST_ENTRY, #ARGV do bytes = bytes + entry_bytes(ARGV[i]) end
local count = #ARGV - FIRST_ENTRY + 1
do
  local used = redis.call('HMGET', KEYS[4], 'threads', 'messages', 'bytes')
  local quota, limit = quota_refusal({ARGV[11], ARGV[12], ARGV[13]}, used, {1, count, bytes})
  if quota then return {'quota', quota, limit} end
end

write_fork_state(KEYS[1], plan, ARGV[18], ARGV[15], ARGV[17])
for i = FIRST_ENTRY, #ARGV, 256 do
  redis.call('RPUSH', base .. 'm:' .. ARGV[2], unpack(ARGV, i, math.min(i + 255, #ARGV)))
end
redis.call('ZADD', KEYS[2], 0, ARGV[2])
redis.call('ZADD', base .. 'fk:' .. ARGV[1], 0, ARGV[2])
use(KEYS[4], KEYS[1], 1, count, bytes)
return finish_fork(KEYS[1], base, KEYS[3], plan, ARGV[16], now)
`,
);
