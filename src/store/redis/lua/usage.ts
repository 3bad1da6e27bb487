import { fragment } from "./fragment.js";

/** The namespace's usage hash (keys.ts `B usage`), what the quotas count. */
export const USAGE = fragment(
  "usage",
  [],
  `
-- Adds to the namespace's usage hash (and the thread's bytes) what a change
-- did, for threads counted there (created by a version with quotas).
local function use(usage, thread, threads, messages, bytes)
  if threads ~= 0 then redis.call('HINCRBY', usage, 'threads', threads) end
  if messages ~= 0 then redis.call('HINCRBY', usage, 'messages', messages) end
  if bytes ~= 0 then
    redis.call('HINCRBY', usage, 'bytes', bytes)
    if thread then redis.call('HINCRBY', thread, 'bytes', bytes) end
  end
end
`,
);
