import { fragment } from "./fragment.js";

/**
 * Number formatting and the stored message entries as the scripts read
 * them (keys.ts: `"<seq> <bytes> <json>"`, or `"<seq> <json>"` as written
 * before quotas, the JSON starting with `{"role":"<role>",`).
 */

/** str(n): Lua numbers are doubles; `%d` keeps seqs and times from turning into `1e+15`. */
export const NUMBERS = fragment(
  "numbers",
  [],
  `
local function str(n) return string.format('%d', n) end
`,
);

/** seq_of, is_tool and entry_bytes of one entry. */
export const ENTRIES = fragment(
  "entries",
  [],
  `
local function seq_of(entry)
  return tonumber(string.sub(entry, 1, string.find(entry, ' ', 1, true) - 1))
end

-- The JSON starts at the first brace: "<seq> <bytes> {…}", or "<seq> {…}" as
-- written before quotas.
local function is_tool(entry)
  local brace = string.find(entry, '{', 1, true)
  return string.sub(entry, brace, brace + 14) == '{"role":"tool",'
end

-- The message's size as the byte quota counts it (quota.ts messageBytes, worked
-- out by the store when it wrote the entry); for an entry written before
-- quotas, the length of its JSON.
local function entry_bytes(entry)
  local space = string.find(entry, ' ', 1, true)
  local brace = string.find(entry, '{', 1, true)
  if brace == space + 1 then return #entry - space end
  return tonumber(string.sub(entry, space + 1, brace - 2))
end
`,
);
