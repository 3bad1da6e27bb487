import { fragment } from "./fragment.js";

/** The namespace's event log (keys.ts `B log`, a stream). */
export const LOG_EVENT = fragment(
  "log_event",
  [],
  `
-- Appends an event, keeping at least retention of them. Trimming is done
-- here in batches (amortised O(1) per event) rather than with XADD MAXLEN ~,
-- because trimming does not move the stream's max-deleted-entry-id (Redis
-- 7.0 only moves it on XDEL), and that id is how a resume token whose next
-- events were dropped is told from a current one: XSETID records the newest
-- dropped id there.
local function log_event(stream, retention, thread_id, time, type, ...)
  -- One XLEN both finds a new log and sizes the trim. An emptied log looks
  -- new too: unlinking the earlier versions' key again changes nothing.
  local len = redis.call('XLEN', stream)
  if len == 0 then
    -- Same key base and hash tag: "<B>log" -> "<B>events".
    redis.call('UNLINK', string.sub(stream, 1, -4) .. 'events')
  end
  local id = redis.call('XADD', stream, '0-*', 'type', type, 'thread_id', thread_id, 'time', time, ...)
  local keep = tonumber(retention)
  local excess = len + 1 - keep
  if excess > 0 and excess >= math.max(64, math.floor(keep / 8)) then
    local dropped = redis.call('XRANGE', stream, '-', '+', 'COUNT', excess)
    redis.call('XTRIM', stream, 'MAXLEN', keep)
    redis.call('XSETID', stream, id, 'MAXDELETEDID', dropped[#dropped][1])
  end
  return id
end
`,
);
