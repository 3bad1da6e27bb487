import { NUMBERS } from "./entries.js";
import { LOG_EVENT } from "./event-log.js";
import { script } from "./fragment.js";
import { TRIM } from "./trim.js";
import { USAGE } from "./usage.js";

/**
 * Store.commitSummary. KEYS: thread, messages, lease, events, usage. ARGV:
 * incarnation, lease token, from_seq, through_seq, summary, folded_count,
 * now, event retention, thread_id. Returns the thread hash, or nil when a
 * check fails (nothing written).
 */
export const COMMIT_SUMMARY = script(
  "commit_summary",
  [TRIM, USAGE, LOG_EVENT],
  `
local t = redis.call('HMGET', KEYS[1], 'incarnation', 'summarized_through_seq', 'kind', 'max_stored',
  'counted')
if t[1] ~= ARGV[1] then return false end
if tonumber(t[2]) ~= tonumber(ARGV[3]) or tonumber(ARGV[4]) <= tonumber(ARGV[3]) then return false end
if redis.call('GET', KEYS[3]) ~= ARGV[2] then return false end
redis.call('HSET', KEYS[1], 'summary', ARGV[5], 'summary_time', ARGV[7],
  'summarized_through_seq', ARGV[4], 'update_time', ARGV[7])
local dropped, bytes = trim(KEYS[2], t[3], tonumber(t[4]), tonumber(ARGV[4]))
if t[5] == '1' then use(KEYS[5], KEYS[1], 0, -dropped, -bytes) end
log_event(KEYS[4], ARGV[8], ARGV[9], ARGV[7], 'summary_updated',
  'summary', ARGV[5], 'summarized_through_seq', ARGV[4], 'folded_count', ARGV[6])
return redis.call('HGETALL', KEYS[1])
`,
);

/**
 * Store.recordFoldFailure. KEYS: thread, events. ARGV: incarnation, reason,
 * attempt, now, event retention, thread_id. Returns 1 when logged.
 */
export const RECORD_FOLD_FAILURE = script(
  "record_fold_failure",
  [LOG_EVENT],
  `
if redis.call('HGET', KEYS[1], 'incarnation') ~= ARGV[1] then return 0 end
log_event(KEYS[2], ARGV[5], ARGV[6], ARGV[4], 'summary_failed', 'reason', ARGV[2], 'attempt', ARGV[3])
return 1
`,
);

/**
 * Store.acquireFoldLease. KEYS: lease, lease-seq. ARGV: ttl ms. The counter
 * is per namespace and never deleted (not even by Clear), so tokens only grow.
 * Returns the token, or nil when the lease is held.
 */
export const ACQUIRE_LEASE = script(
  "acquire_lease",
  [NUMBERS],
  `
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], str(token), 'PX', ARGV[1])
return token
`,
);

/** Store.releaseFoldLease: compare-and-delete. KEYS: lease. ARGV: token. */
export const RELEASE_LEASE = script(
  "release_lease",
  [],
  `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`,
);
