import { fragment, script } from "./fragment.js";
import { LINEAGE } from "./lineage.js";

/**
 * recall_size mirrors core/recall.ts recallSize; the case table
 * test/core/cases/recall-size.ts proves it, run against the core
 * (test/core/decision-cases.test.ts) and against this Lua in a real
 * redis-server (test/store/redis-lua-decisions.test.ts).
 */
export const RECALL_SIZE = fragment(
  "recall_size",
  [],
  `
-- core/recall.ts recallSize over the strategy (its JSON, decoded) and the
-- Get's limit (nil: the strategy's own size).
local function recall_size(strategy, limit)
  if limit then return limit end
  if strategy['kind'] == 'buffer' then return strategy['maxMessages'] end
  return strategy['window']
end
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
  [RECALL_SIZE, LINEAGE],
  `
local thread = redis.call('HGETALL', KEYS[1])
if #thread == 0 then return false end
local t = {}
for i = 1, #thread, 2 do t[thread[i]] = thread[i + 1] end
if t['lineage'] then
  -- A thread with frozen entries: the same window over its seqs, one LRANGE per segment.
  local entries = lineage_of(t['lineage'])
  local last_seq = tonumber(t['last_seq'])
  local head_len = redis.call('LLEN', KEYS[2])
  local floor = lineage_floor(entries, last_seq, head_len)
  local from = floor
  if ARGV[1] == 'view' then
    local strategy = cjson.decode(t['strategy'])
    local size = recall_size(strategy, tonumber(ARGV[2]))
    if size > 0 then from = math.max(floor, last_seq - size - tonumber(ARGV[3]) + 1) end
    if strategy['kind'] == 'summary' then
      from = math.min(from, math.max(floor, tonumber(t['summarized_through_seq']) + 1))
    end
  end
  local complete = 0
  if from == floor then complete = 1 end
  local base = string.sub(KEYS[1], 1, #KEYS[1] - #t['thread_id'] - 2)
  return {thread, read_seqs(base, KEYS[2], entries, last_seq, head_len, from, last_seq), complete}
end
local start = 0
if ARGV[1] == 'view' then
  local strategy = cjson.decode(t['strategy'])
  local size = recall_size(strategy, tonumber(ARGV[2]))
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
