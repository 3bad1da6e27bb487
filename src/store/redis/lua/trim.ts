import { ENTRIES } from "./entries.js";
import { fragment } from "./fragment.js";

/**
 * Trimming a thread's stored list to its strategy's max_stored.
 *
 * Mirrors core/append.ts trimCountOf (trim_count); the case table
 * test/core/cases/trim-count.ts proves it, run against the core
 * (test/core/decision-cases.test.ts) and against this Lua in a real
 * redis-server (test/store/redis-lua-decisions.test.ts).
 */
export const TRIM = fragment(
  "trim",
  [ENTRIES],
  `
-- core/append.ts trimCountOf over \`len\` entries, the i-th oldest (from 0)
-- being entry_at(i), asked for in order and only as far as the answer needs.
local function trim_count(kind, max_stored, through, len, entry_at)
  local excess = len - max_stored
  if excess <= 0 then return 0 end
  -- Summary threads may only lose what the summary already holds.
  local function may_drop(i) return kind ~= 'summary' or seq_of(entry_at(i)) <= through end
  local n = 0
  while n < excess and may_drop(n) do n = n + 1 end
  if n == 0 then return 0 end
  while n < len and is_tool(entry_at(n)) and may_drop(n) do n = n + 1 end
  return n
end

-- trim_count over the stored list followed by \`extra\` (entries not written
-- yet), reading only the entries it needs. Returns how many to drop and
-- their bytes; writes nothing.
local function trim_plan(key, len_old, extra, kind, max_stored, through)
  local excess = len_old + #extra - max_stored
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
  local n = trim_count(kind, max_stored, through, len_old + #extra, at)
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
`,
);
