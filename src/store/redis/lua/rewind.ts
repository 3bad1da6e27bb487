import { ENTRIES, NUMBERS } from "./entries.js";
import { LOG_EVENT } from "./event-log.js";
import { fragment, script } from "./fragment.js";
import { REQUESTS } from "./idempotency.js";
import { TTL } from "./labels.js";
import { LINEAGE } from "./lineage.js";
import { USAGE } from "./usage.js";

/**
 * Store.rewind in one script, so the decision, the drop, the forgotten
 * request ids, the fenced lease, the usage and the event are one atomic step.
 *
 * decide_rewind mirrors core/rewind.ts decideRewind; the case table
 * test/core/cases/rewind.ts proves it, run against the core
 * (test/core/decision-cases.test.ts) and against this Lua in a real
 * redis-server (test/store/redis-lua-decisions.test.ts). A refusal's words
 * are the core's: the store hands the state the script refused on to
 * decideRewind (src/store/redis/rewind.ts).
 */
export const DECIDE_REWIND = fragment(
  "decide_rewind",
  [],
  `
-- core/rewind.ts decideRewind over the thread's last_seq and
-- summarized_through_seq (last_seq false: no thread), the seq of its oldest
-- stored message (false: none stored), to_seq and expected_last_seq (false:
-- none). Returns 'not_found', 'last_seq_mismatch', 'out_of_range', 'trimmed'
-- or 'summary_holds' (refusals), 'unchanged', or 'plan' and whether the
-- summary is dropped.
local function decide_rewind(last_seq, through, oldest, to_seq, expected)
  if not last_seq then return 'not_found' end
  if expected and expected ~= last_seq then return 'last_seq_mismatch' end
  if to_seq > last_seq then return 'out_of_range' end
  if to_seq == last_seq then return 'unchanged' end
  local first = oldest or last_seq + 1
  if to_seq < first - 1 then return 'trimmed' end
  local dropped = through > to_seq
  if dropped and first > 1 then return 'summary_holds' end
  return 'plan', dropped
end
`,
);

/**
 * Store.rewind. KEYS: thread, messages, requests, request times, lease,
 * events, usage. ARGV: thread_id, now, request_id, request_hash, to_seq,
 * expected_last_seq ("" none), event retention, idempotency retention ms,
 * then core/idempotency.ts requestsToKeep's keepNewest and dropThrough
 * (decided outside). An expired thread is not found (left to the sweep).
 * Returns {"ok", result} | {"replayed", result} | {"request_id_reused"} |
 * {"refused", decision, thread hash (empty: none), oldest stored seq ("0":
 * none)}; a result is lua/idempotency.ts's Rewind result.
 *
 * The fold lease is ended (its key deleted): a fold that took it before
 * cannot commit (COMMIT_SUMMARY compares the token), and the next lease's
 * token, from the never-reset counter, is above it.
 */
export const REWIND = script(
  "rewind",
  [NUMBERS, ENTRIES, USAGE, REQUESTS, LOG_EVENT, TTL, DECIDE_REWIND, LINEAGE],
  `
local now = tonumber(ARGV[2])
local request_id = ARGV[3]
local exists = redis.call('EXISTS', KEYS[1]) == 1 and not expired(KEYS[1], now)
if exists then
  local replay = replay_reply(KEYS[3], request_id, ARGV[4], now, tonumber(ARGV[8]), 'rewind')
  if replay then return replay end
end

local t = {false, '0', false, false}
local oldest = false
-- A thread holding frozen segments (keys.ts): its oldest is its lineage's floor.
local lineage, head_len = false, 0
if exists then
  t = redis.call('HMGET', KEYS[1], 'last_seq', 'summarized_through_seq', 'counted', 'lineage')
  if t[4] then
    lineage = lineage_of(t[4])
    head_len = redis.call('LLEN', KEYS[2])
    local floor = lineage_floor(lineage, tonumber(t[1]), head_len)
    if floor <= tonumber(t[1]) then oldest = floor end
  else
    local first = redis.call('LINDEX', KEYS[2], 0)
    if first then oldest = seq_of(first) end
  end
end
local to_seq = tonumber(ARGV[5])
local expected = false
if ARGV[6] ~= '' then expected = tonumber(ARGV[6]) end
local decision, summary_dropped = decide_rewind(tonumber(t[1]) or false, tonumber(t[2]) or 0,
  oldest, to_seq, expected)
if decision ~= 'plan' and decision ~= 'unchanged' then
  local thread = {}
  if exists then thread = redis.call('HGETALL', KEYS[1]) end
  return {'refused', decision, thread, str(oldest or 0)}
end

local removed = 0
if decision == 'plan' then
  -- Seqs in the list are consecutive: those after to_seq are its tail.
  local keep = 0
  local low = oldest
  if lineage then low = head_low(lineage, tonumber(t[1]), head_len) end
  if low then keep = math.max(0, to_seq - low + 1) end
  local bytes = 0
  for _, entry in ipairs(redis.call('LRANGE', KEYS[2], keep, -1)) do
    removed = removed + 1
    bytes = bytes + entry_bytes(entry)
  end
  if keep == 0 then redis.call('DEL', KEYS[2]) elseif removed > 0 then redis.call('LTRIM', KEYS[2], 0, keep - 1) end
  local head_removed = removed
  if lineage then
    -- core/lineage.ts cutLineage: entries past to_seq released, the last cut short.
    local kept, released = cut_lineage(lineage, to_seq)
    release_entries(label_base(KEYS[1], ARGV[1]), KEYS[7], released)
    save_lineage(KEYS[1], kept)
    removed = tonumber(t[1]) - to_seq
  end
  redis.call('HSET', KEYS[1], 'last_seq', str(to_seq), 'update_time', ARGV[2])
  if summary_dropped then
    redis.call('HSET', KEYS[1], 'summary', '', 'summary_time', '0', 'summarized_through_seq', '0')
  end
  if t[3] == '1' then use(KEYS[7], KEYS[1], 0, -head_removed, -bytes) end
  forget_rewound(KEYS[3], KEYS[4], to_seq)
  redis.call('DEL', KEYS[5])
  log_event(KEYS[6], ARGV[7], ARGV[1], ARGV[2], 'thread_rewound', 'to_seq', str(to_seq),
    'removed_count', str(removed), 'summary_dropped', summary_dropped and '1' or '0')
end
local result = 'rewind\\n' .. str(removed) .. '\\n' .. (summary_dropped and '1' or '0') .. '\\n'
  .. cjson.encode(redis.call('HGETALL', KEYS[1]))
if request_id ~= '' then
  record_request(KEYS[3], KEYS[4], request_id, ARGV[4], now, result, tonumber(ARGV[10]), tonumber(ARGV[9]))
end
return {'ok', result}
`,
);
