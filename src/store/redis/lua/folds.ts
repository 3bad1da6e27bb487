import { NUMBERS } from "./entries.js";
import { LOG_EVENT } from "./event-log.js";
import { fragment, script } from "./fragment.js";
import { LABELS } from "./labels.js";
import { LINEAGE } from "./lineage.js";
import { TRIM } from "./trim.js";
import { USAGE } from "./usage.js";

/**
 * Fold leases and summary commits, fenced across replicas.
 *
 * may_commit_summary mirrors core/fold-commit.ts mayCommitSummary (case
 * table test/core/cases/fold-commit.ts); ACQUIRE_LEASE mirrors mayTakeLease
 * and nextLeaseToken (case table test/core/cases/lease-take.ts), the lease's
 * expiry being the key's own TTL (Redis drops it at expiresAt, so a lease is
 * held while its key exists). Both tables run against the core
 * (test/core/decision-cases.test.ts) and against this Lua in a real
 * redis-server (test/store/redis-lua-decisions.test.ts).
 */
export const FOLD_COMMIT = fragment(
  "fold_commit",
  [],
  `
-- core/fold-commit.ts mayCommitSummary over the thread hash's incarnation and
-- summarized_through_seq and the lease key's token (false: absent).
local function may_commit_summary(thread_incarnation, thread_through, lease_token, incarnation, token, from_seq, through_seq)
  return thread_incarnation ~= false and thread_incarnation == incarnation
    and tonumber(thread_through) == from_seq and through_seq > from_seq
    and lease_token ~= false and tonumber(lease_token) == token
end
`,
);

/**
 * Store.commitSummary. KEYS: thread, messages, lease, events, usage. ARGV:
 * incarnation, lease token, from_seq, through_seq, summary, folded_count,
 * now, event retention, thread_id. Returns the thread hash, or nil when a
 * check fails (nothing written).
 */
export const COMMIT_SUMMARY = script(
  "commit_summary",
  [FOLD_COMMIT, TRIM, USAGE, LOG_EVENT, LABELS, LINEAGE],
  `
local t = redis.call('HMGET', KEYS[1], 'incarnation', 'summarized_through_seq', 'kind', 'max_stored',
  'counted', 'lineage', 'last_seq')
if not may_commit_summary(t[1], t[2], redis.call('GET', KEYS[3]), ARGV[1], tonumber(ARGV[2]),
    tonumber(ARGV[3]), tonumber(ARGV[4])) then
  return false
end
redis.call('HSET', KEYS[1], 'summary', ARGV[5], 'summary_time', ARGV[7],
  'summarized_through_seq', ARGV[4], 'update_time', ARGV[7])
local dropped, bytes
if t[6] then
  -- A thread holding frozen segments (keys.ts) trims across them.
  local base = label_base(KEYS[1], ARGV[9])
  local lineage = lineage_of(t[6])
  local n, kept, released
  n, kept, released, dropped, bytes = lineage_trim_plan(base, KEYS[2], lineage, tonumber(t[7]),
    redis.call('LLEN', KEYS[2]), {}, t[3], tonumber(t[4]), tonumber(ARGV[4]))
  if dropped > 0 then redis.call('LTRIM', KEYS[2], dropped, -1) end
  if n > 0 then
    release_entries(base, KEYS[5], released)
    save_lineage(KEYS[1], kept)
  end
else
  dropped, bytes = trim(KEYS[2], t[3], tonumber(t[4]), tonumber(ARGV[4]))
end
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
-- core/fold-commit.ts mayTakeLease: held while expiresAt > now. Redis keeps
-- the key through its expiry millisecond, so EXISTS would hold it 1 ms
-- longer; PTTL is 0 then (and -2 with no lease).
if redis.call('PTTL', KEYS[1]) > 0 then return false end
-- core/fold-commit.ts nextLeaseToken: the counter is never reset.
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
