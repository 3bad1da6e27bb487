import { ENTRIES } from "./entries.js";
import { fragment } from "./fragment.js";

/**
 * Trimming a thread's stored list to its strategy's max_stored.
 */
export const TRIM = fragment(
  "trim",
  [ENTRIES],
  `
-- core/append.ts trimCount over the stored list followed by \`extra\` (entries
-- not written yet): drop the oldest beyond max_stored (summary threads: only
-- those folded, seq <= through), then tool results left at the front without
-- their call. Returns how many to drop and their bytes; writes nothing.
local function trim_plan(key, len_old, extra, kind, max_stored, through)
  local len = len_old + #extra
  local excess = len - max_stored
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
  local n = 0
  while n < excess and (kind ~= 'summary' or seq_of(at(n)) <= through) do n = n + 1 end
  if n == 0 then return 0, 0 end
  while n < len do
    local entry = at(n)
    if not is_tool(entry) or (kind == 'summary' and seq_of(entry) > through) then break end
    n = n + 1
  end
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
