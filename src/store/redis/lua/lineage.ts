import { ENTRIES } from "./entries.js";
import { fragment } from "./fragment.js";
import { USAGE } from "./usage.js";

/**
 * A thread's segments in the scripts (core/lineage.ts is the model; keys.ts
 * the layout). A thread that forked or was forked from may hold, in its
 * hash's `lineage` field, the JSON array of its frozen entries
 * `[segment, low, through, first]` (`first`: the seq of the segment list's
 * first element, so seq s is at index s - first); its owned head is its
 * list `B m:<thread>` as for every thread, starting at the last entry's
 * through + 1 (without entries: last_seq - LLEN + 1, today's layout).
 * Frozen segment `x` is the list `B s:<x>` and the hash `B sg:<x>` (refs,
 * count, bytes); it is deleted when refs reaches 0, its count and bytes
 * leaving the namespace's usage then.
 *
 * lineage_trim_count mirrors core/fork.ts forkTrimCount (which equals
 * core/append.ts trimCountOf over consecutive seqs); ranges_for,
 * raise_floor and cut_lineage mirror core/lineage.ts rangesFor, raiseFloor
 * and cutLineage; the case
 * table test/core/cases/lineage.ts proves them, run against the core and
 * against this Lua (test/store/redis-lua-decisions.test.ts).
 */
export const LINEAGE = fragment(
  "lineage",
  [ENTRIES, USAGE],
  `
local function lineage_of(json)
  if not json or json == '' then return {} end
  return cjson.decode(json)
end

local function save_lineage(thread_key, entries)
  if #entries == 0 then redis.call('HDEL', thread_key, 'lineage')
  else redis.call('HSET', thread_key, 'lineage', cjson.encode(entries)) end
end

-- The owned head's first seq (above last_seq when it stores none).
local function head_low(entries, last_seq, head_len)
  if #entries > 0 then return entries[#entries][3] + 1 end
  return last_seq - head_len + 1
end

-- core/lineage.ts floorOf.
local function lineage_floor(entries, last_seq, head_len)
  if #entries > 0 then return entries[1][2] end
  return last_seq - head_len + 1
end

-- core/lineage.ts rangesFor: where seqs [from, to] are, oldest first, as
-- {segment, from, to, first} (segment false: the owned head).
local function ranges_for(entries, last_seq, head_len, from, to)
  local out = {}
  for _, e in ipairs(entries) do
    if e[2] > to then return out end
    local a, b = math.max(from, e[2]), math.min(to, e[3])
    if a <= b then out[#out + 1] = {e[1], a, b, e[4]} end
  end
  local low = head_low(entries, last_seq, head_len)
  local a, b = math.max(from, low), math.min(to, last_seq)
  if a <= b then out[#out + 1] = {false, a, b, low} end
  return out
end

-- The entries of seqs [from, to], oldest first: one LRANGE per segment touched.
local function read_seqs(base, head_key, entries, last_seq, head_len, from, to)
  local out = {}
  for _, r in ipairs(ranges_for(entries, last_seq, head_len, from, to)) do
    local key = head_key
    if r[1] then key = base .. 's:' .. r[1] end
    for _, x in ipairs(redis.call('LRANGE', key, r[2] - r[4], r[3] - r[4])) do out[#out + 1] = x end
  end
  return out
end

-- The entry of one seq (false: not stored).
local function entry_of_seq(base, head_key, entries, last_seq, head_len, seq)
  local got = read_seqs(base, head_key, entries, last_seq, head_len, seq, seq)
  return got[1] or false
end

-- core/fork.ts forkTrimCount: of \`length\` stored seqs from \`floor\`, how many
-- the strategy drops; tool_at(seq) says whether that seq is a tool result.
local function lineage_trim_count(kind, max_stored, through, floor, length, tool_at)
  local excess = length - max_stored
  if excess <= 0 then return 0 end
  local folded = length
  if kind == 'summary' then folded = through - floor + 1 end
  local n = math.max(0, math.min(excess, folded))
  if n == 0 then return 0 end
  while n < length and n < folded and tool_at(floor + n) do n = n + 1 end
  return n
end

-- core/lineage.ts raiseFloor over the entries: the kept (lows raised) and the released.
local function raise_floor(entries, new_floor)
  local kept, released = {}, {}
  for _, e in ipairs(entries) do
    if e[3] < new_floor then released[#released + 1] = e
    else
      if e[2] < new_floor then e = {e[1], new_floor, e[3], e[4]} end
      kept[#kept + 1] = e
    end
  end
  return kept, released
end

-- core/lineage.ts cutLineage over the entries (to_seq below last_seq).
local function cut_lineage(entries, to_seq)
  local kept, released = {}, {}
  for _, e in ipairs(entries) do
    if e[2] > to_seq then released[#released + 1] = e
    else
      if e[3] > to_seq then e = {e[1], e[2], to_seq, e[4]} end
      kept[#kept + 1] = e
    end
  end
  return kept, released
end

-- What releasing the entries frees: the count and bytes of the segments
-- whose last reference they are (nothing written).
local function freed_by(base, released)
  local count, bytes = 0, 0
  for _, e in ipairs(released) do
    local m = redis.call('HMGET', base .. 'sg:' .. e[1], 'refs', 'count', 'bytes')
    if tonumber(m[1]) <= 1 then
      count = count + tonumber(m[2])
      bytes = bytes + tonumber(m[3])
    end
  end
  return count, bytes
end

-- One reference less on each entry's segment; a segment at 0 is deleted
-- and leaves the usage.
local function release_entries(base, usage, released)
  for _, e in ipairs(released) do
    local key = base .. 'sg:' .. e[1]
    if redis.call('HINCRBY', key, 'refs', -1) <= 0 then
      local m = redis.call('HMGET', key, 'count', 'bytes')
      redis.call('UNLINK', key, base .. 's:' .. e[1])
      use(usage, false, 0, -(tonumber(m[1]) or 0), -(tonumber(m[2]) or 0))
    end
  end
end

-- The trim of a thread with entries (the head list followed by \`extra\`,
-- entries not written yet): seqs dropped, the new entries, those released,
-- how many of the head list's front to drop (extra included) and their bytes.
local function lineage_trim_plan(base, head_key, entries, last_seq, head_len, extra, kind, max_stored, through)
  local floor = lineage_floor(entries, last_seq, head_len)
  local length = last_seq - floor + 1 + #extra
  local low = head_low(entries, last_seq, head_len)
  local function stored_or_extra(seq)
    if seq > last_seq then return extra[seq - last_seq] end
    return entry_of_seq(base, head_key, entries, last_seq, head_len, seq)
  end
  local n = lineage_trim_count(kind, max_stored, through, floor, length, function(seq) return is_tool(stored_or_extra(seq)) end)
  if n == 0 then return 0, entries, {}, 0, 0 end
  local new_floor = floor + n
  local kept, released = raise_floor(entries, new_floor)
  local head_drop, bytes = 0, 0
  if new_floor > low then
    head_drop = new_floor - low
    for seq = low, new_floor - 1 do bytes = bytes + entry_bytes(stored_or_extra(seq)) end
  end
  return n, kept, released, head_drop, bytes
end
`,
);
