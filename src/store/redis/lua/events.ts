import { fragment, script } from "./fragment.js";

/** The event log's reads (Store.readEvents, headCursor) and the incarnation's rotation. */

/** Positions in the namespace's stream: compare ids, read the head and the trimmed point. */
const STREAM_POSITION = fragment(
  "stream_position",
  [],
  `local function cmp_num(a, b)
  if #a ~= #b then if #a < #b then return -1 else return 1 end end
  if a == b then return 0 end
  if a < b then return -1 else return 1 end
end
-- Stream ids "<ms>-<seq>" in canonical decimal, compared as numbers.
local function cmp_id(a, b)
  local ad, bd = string.find(a, '-', 1, true), string.find(b, '-', 1, true)
  local c = cmp_num(string.sub(a, 1, ad - 1), string.sub(b, 1, bd - 1))
  if c ~= 0 then return c end
  return cmp_num(string.sub(a, ad + 1), string.sub(b, bd + 1))
end
-- last-generated-id and max-deleted-entry-id (Redis 7.0+), "0-0" for no stream.
local function position(key)
  local last, deleted = '0-0', '0-0'
  if redis.call('EXISTS', key) == 1 then
    local info = redis.call('XINFO', 'STREAM', key)
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then last = info[i + 1]
      elseif info[i] == 'max-deleted-entry-id' then deleted = info[i + 1] end
    end
  end
  return last, deleted
end
`,
);

/**
 * Store.readEvents. KEYS: events, the incarnation key. ARGV: cursor
 * (canonical stream id), count, the incarnation the cursor was issued in.
 * Returns {"lost", incarnation or false} when the incarnation key no longer
 * holds that incarnation (the data was lost, or another replica rotated it),
 * {"ahead"} for a cursor after the newest id ever generated, {"gone"} when an
 * event after the cursor was trimmed (its id is below max-deleted-entry-id),
 * else {"ok", entries}. The incarnation is checked in the same atomic step as
 * the read, so no cursor of a lost history is ever read in a new one.
 */
export const READ_EVENTS = script(
  "read_events",
  [STREAM_POSITION],
  `
local incarnation = redis.call('GET', KEYS[2])
if incarnation ~= ARGV[3] then return {'lost', incarnation} end
local last, deleted = position(KEYS[1])
if cmp_id(ARGV[1], last) > 0 then return {'ahead'} end
if cmp_id(ARGV[1], deleted) < 0 then return {'gone'} end
if ARGV[1] == last then return {'ok', {}} end
return {'ok', redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])}
`,
);

/**
 * Store.headCursor. KEYS: events, the incarnation key. Returns {last
 * generated id ("0-0" for none), the incarnation (false when the key is
 * gone)}, read in one atomic step.
 */
export const HEAD = script(
  "head",
  [STREAM_POSITION],
  `
local last = position(KEYS[1])
return {last, redis.call('GET', KEYS[2])}
`,
);

/**
 * Replaces the incarnation when it still is ARGV[1] (a replica found the
 * history shorter than a cursor it issued: events were lost). KEYS: the
 * incarnation key. ARGV: the incarnation found wanting, the new one.
 * Returns the incarnation in force afterwards.
 */
export const ROTATE_INCARNATION = script(
  "rotate_incarnation",
  [],
  `
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] or not current then
  redis.call('SET', KEYS[1], ARGV[2])
  return ARGV[2]
end
return current
`,
);

/**
 * Redis Cluster: sets one slot's copy of the incarnation (keys.ts) to
 * ARGV[2] when it is missing or still ARGV[1] (the incarnation replaced;
 * "" when none is), so a late writer of an older one never overwrites a
 * newer one. KEYS: the slot's marker.
 */
export const MARK_SLOT = script(
  "mark_slot",
  [],
  `
local current = redis.call('GET', KEYS[1])
if not current or current == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) end
return 1
`,
);
