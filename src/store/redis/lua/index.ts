import { APPEND } from "./append.js";
import { CLEAR, CLEAR_CHUNK, EXPIRE_DUE, EXPIRE_THREAD } from "./clears.js";
import { HEAD, MARK_SLOT, READ_EVENTS, ROTATE_INCARNATION } from "./events.js";
import { ACQUIRE_LEASE, COMMIT_SUMMARY, RECORD_FOLD_FAILURE, RELEASE_LEASE } from "./folds.js";
import { FORK, FORK_COPY } from "./fork.js";
import type { LuaScript } from "./fragment.js";
import { IMPORT_FORK, IMPORT_THREAD } from "./import.js";
import { LIST_LABELED } from "./list-labeled.js";
import { READ } from "./read.js";
import { REWIND } from "./rewind.js";

/*
 * The Redis store's Lua. Where a script must make one of the core's
 * decisions inside itself, for atomicity, the module holding it names at
 * its top the core function it mirrors and the case table (test/core/cases/)
 * that proves it against both: append.ts (decideAppend, keepsSummary),
 * trim.ts (trimCount), idempotency.ts (decideReplay, forgetRequest),
 * quota.ts (checkQuotas), folds.ts (mayCommitSummary, mayTakeLease,
 * nextLeaseToken), rewind.ts (decideRewind), read.ts (recallSize),
 * lineage.ts (raiseFloor, cutLineage, forkTrimCount). Which request records
 * to keep (requestsToKeep) is decided outside and passed in; so are a
 * Fork's decisions and an imported fork's (fork.ts, import.ts IMPORT_FORK:
 * the core's, checked against the parent as the script finds it). The
 * other modules only store and read.
 */

/** Every script, loaded at start-up (SCRIPT LOAD) so the first EVALSHA finds it. */
export const ALL_SCRIPTS: readonly LuaScript[] = [
  EXPIRE_THREAD,
  EXPIRE_DUE,
  LIST_LABELED,
  IMPORT_THREAD,
  IMPORT_FORK,
  APPEND,
  FORK,
  FORK_COPY,
  REWIND,
  READ,
  COMMIT_SUMMARY,
  RECORD_FOLD_FAILURE,
  ACQUIRE_LEASE,
  RELEASE_LEASE,
  CLEAR,
  CLEAR_CHUNK,
  READ_EVENTS,
  HEAD,
  ROTATE_INCARNATION,
  MARK_SLOT,
];
