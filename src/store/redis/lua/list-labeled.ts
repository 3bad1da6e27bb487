import { script } from "./fragment.js";

/**
 * Store.listThreads with labels. KEYS: the zset of each label of the filter.
 * ARGV: after ("" from the start), limit. Walks the smallest zset in byte
 * order from `after`, keeping the ids every other zset holds too; returns at
 * most `limit` ids. Costs the rarest label's threads, never the namespace.
 */
export const LIST_LABELED = script(
  "list_labeled",
  [],
  `
local limit = tonumber(ARGV[2])
local driver, size = 1, redis.call('ZCARD', KEYS[1])
for i = 2, #KEYS do
  local n = redis.call('ZCARD', KEYS[i])
  if n < size then driver, size = i, n end
end
local out = {}
if size == 0 or limit <= 0 then return out end
local chunk = math.max(limit, 64)
local from = '-'
if ARGV[1] ~= '' then from = '(' .. ARGV[1] end
while true do
  local ids = redis.call('ZRANGE', KEYS[driver], from, '+', 'BYLEX', 'LIMIT', 0, chunk)
  for _, id in ipairs(ids) do
    local all = true
    for i = 1, #KEYS do
      if i ~= driver and not redis.call('ZSCORE', KEYS[i], id) then all = false break end
    end
    if all then
      out[#out + 1] = id
      if #out >= limit then return out end
    end
  end
  if #ids < chunk then return out end
  from = '(' .. ids[#ids]
end
`,
);
