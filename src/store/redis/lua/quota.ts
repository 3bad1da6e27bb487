import { fragment } from "./fragment.js";

/**
 * The namespace quotas, checked inside the script that writes (an Add, an
 * import), against the usage hash (keys.ts `B usage`) as it is then.
 *
 * Mirrors core/quota.ts checkQuotas (quota_refusal); the case table
 * test/core/cases/quota.ts proves it, run against the core
 * (test/core/decision-cases.test.ts) and against this Lua in a real
 * redis-server (test/store/redis-lua-decisions.test.ts).
 */
export const QUOTA = fragment(
  "quota",
  [],
  `
-- core/quota.ts checkQuotas: \`limits\` (decimal text, 0: unlimited), \`used\`
-- (HMGET of threads, messages, bytes; false: none yet) and \`delta\`, in
-- QUOTAS order. Returns the first quota the change grows past its limit, as
-- its name and limit, or nil when every quota passes.
local function quota_refusal(limits, used, delta)
  local names = {'max_threads_per_namespace', 'max_messages_per_namespace', 'max_bytes_per_namespace'}
  for i = 1, 3 do
    local limit = tonumber(limits[i])
    if limit > 0 and delta[i] > 0 and (tonumber(used[i]) or 0) + delta[i] > limit then
      return names[i], limits[i]
    end
  end
  return nil
end
`,
);
