import type { Labels, MemoryEvent, ThreadState } from "../core/types.js";
import type {
  AppendCommand,
  AppendResult,
  CommitSummaryCommand,
  FoldFailureCommand,
  ForkCommand,
  ForkResult,
  ImportThreadCommand,
  ReadView,
  RewindCommand,
  RewindResult,
  StoreHealth,
  ThreadSnapshot,
} from "./store-commands.js";

/**
 * The Store contract: everything the service keeps, for one or many server
 * replicas, as four narrow interfaces (each with its contract suite under
 * test/store/contract/, run against every backend). Every method is atomic
 * on its own.
 *
 * Events: every mutation appends its event (messages_added, summary_updated,
 * thread_cleared, summary_failed, thread_rewound, thread_forked) to the namespace's log in
 * the same atomic step, so the log and the state never disagree.
 *
 * The decisions behind the methods (idempotency, trimming, TTL, quotas,
 * fold-commit checks, rewind) are pure functions in src/core/ that every
 * backend calls; a backend provides storage and atomicity only.
 */
export interface Store extends ThreadStore, FoldStore, EventLog, StoreAdmin {}

/**
 * Threads and their messages: what Add, Get, Rewind, Clear and ListThreads
 * read and write.
 */
export interface ThreadStore {
  /**
   * Appends messages atomically with consecutive seqs, trims to the strategy's
   * max_stored (see core/append.ts trimCount), records the idempotency key and
   * logs messages_added (when at least one message was added).
   *
   * A request_id seen before for this thread incarnation (within retention)
   * with the same requestHash returns the first result with `replayed: true`
   * and changes nothing; with another hash it throws invalid_argument.
   * Otherwise runs core/append.ts decideAppend (aborted, failed_precondition),
   * then the namespace quotas (resource_exhausted; see StoreLimits).
   */
  append(cmd: AppendCommand): Promise<AppendResult>;

  /**
   * Drops the thread's stored messages after cmd.toSeq as core/rewind.ts
   * decideRewind plans it, in one atomic step: writes the planned thread,
   * forgets the request ids core/rewind.ts forgetRequest names, advances the
   * fold lease's token (ending any lease, so a running fold cannot commit),
   * gives the quota room back and logs thread_rewound. Idempotent on
   * request_id like append (the same records: one id names one request, an
   * Add or a Rewind; another payload is invalid_argument). An expired thread
   * is not found.
   */
  rewind(cmd: RewindCommand): Promise<RewindResult>;

  /**
   * Creates cmd.newThreadId holding cmd.threadId's messages up to atSeq,
   * shared, not copied (core/lineage.ts: the cost is independent of the
   * parent's length), in one atomic step, checking in this order (nothing
   * written on any refusal): a request_id recorded on the new thread (the
   * same requestHash replays the first result with `replayed: true`, even if
   * the parent changed since; another is invalid_argument, as Add), the new
   * id taken (core/fork.ts forkTargetExistsError; an expired thread of that
   * id is removed first, logging thread_cleared "expired"), core/fork.ts
   * decideFork on the parent (an expired parent is not found), the lineage
   * bound (core/lineage.ts planForkLineage), the namespace quotas (one
   * thread more, and the messages copied). Then writes the new thread under
   * a new incarnation with the plan's state and its `parent` origin, its
   * lineage (frozen references; a copied head), the request record (last
   * seq 0, so no Rewind of the fork forgets it), the forks index entry, the
   * fork's own trim when its strategy stores fewer (core/fork.ts
   * forkTrimCount), and logs thread_forked on the new thread. The parent's
   * state, update time, expire time and leases do not change.
   */
  fork(cmd: ForkCommand): Promise<ForkResult>;

  /**
   * The thread and its stored messages, oldest first; undefined if it does
   * not exist. With `view`, the store may leave out older messages that a Get
   * with that limit cannot return: it still returns at least the newest
   * `recallSize(strategy, view.limit) + READ_SLACK` messages (every message
   * when that size is 0 or less) and, for the summary strategy, every message
   * after summarized_through_seq; `complete` says whether anything was left
   * out. Without `view`, every stored message.
   */
  read(namespace: string, threadId: string, view?: ReadView): Promise<ThreadSnapshot | undefined>;

  /** The thread without its messages; undefined if it does not exist. */
  getThread(namespace: string, threadId: string): Promise<ThreadState | undefined>;

  /** Removes one thread; logs thread_cleared. Returns whether it existed. */
  clear(namespace: string, threadId: string, now: number): Promise<boolean>;

  /**
   * Thread ids of the namespace greater than `after`, ascending (byte order),
   * at most `limit`. Costs O(log n + limit): each store keeps the ids ordered.
   *
   * With `labels` (not empty), only threads carrying every one of them
   * (equality, AND). Each store indexes threads by label, so this costs the
   * threads carrying one of the labels (the rarest, where the store can
   * tell), never a scan of the namespace.
   *
   * With `forksOf` (not empty), only the direct forks of that thread id
   * (ThreadState.parent.threadId, whatever incarnation of it they came
   * from), combined with `labels` (AND); each store indexes forks by parent
   * id, like a label.
   */
  listThreads(
    namespace: string,
    after: string,
    limit: number,
    labels?: Labels,
    forksOf?: string,
  ): Promise<string[]>;
}

/** Fold leases and summaries: what the fold scheduler needs across replicas. */
export interface FoldStore {
  /**
   * Writes a new summary if the thread still has `incarnation`, its
   * summarized_through_seq still equals `fromSeq`, and `leaseToken` is the
   * current fold lease (fencing). Then trims folded messages beyond max_stored
   * and logs summary_updated. Returns the thread after the commit, or
   * undefined (nothing written) when any check fails.
   */
  commitSummary(cmd: CommitSummaryCommand): Promise<ThreadState | undefined>;

  /** Logs summary_failed for the thread if it still has `incarnation`. */
  recordFoldFailure(cmd: FoldFailureCommand): Promise<void>;

  /**
   * Takes the thread's fold lease for `ttlMs` if nobody holds it; returns a
   * fencing token (strictly increasing per thread) or undefined.
   */
  acquireFoldLease(namespace: string, threadId: string, ttlMs: number): Promise<number | undefined>;

  /** Releases the lease if `token` still holds it. */
  releaseFoldLease(namespace: string, threadId: string, token: number): Promise<void>;
}

/** The per-namespace event log: what Watch reads and waits on. */
export interface EventLog {
  /**
   * Events of the namespace after `cursor` (exclusive), oldest first, at most
   * `limit`. Cursors are resume-token.ts tokens: the namespace's own event
   * number (numbered per namespace, so one tenant's cursors say nothing about
   * another's writes) signed for this database and namespace. Throws
   * out_of_range when events after `cursor` were already dropped from the
   * retained history, or the cursor is another database's (or of a format
   * from before an upgrade); invalid_argument (field resume_token) when it is
   * malformed, edited, truncated, issued for another namespace, or ahead of
   * the namespace's newest event in a store whose history cannot be put
   * back (memory). SQLite and Redis answer a signed cursor ahead of the
   * newest event with out_of_range instead: only a history put back to an
   * older state since (a restored file, a rewound Redis) can produce one.
   */
  readEvents(namespace: string, cursor: string, limit: number): Promise<MemoryEvent[]>;

  /** The cursor of the newest event of the namespace ("from now on"). */
  headCursor(namespace: string): Promise<string>;

  /**
   * Negative, zero or positive as cursor a is before, equal to or after b;
   * for cursors of one namespace that this store issued (the MAC is not
   * checked here).
   */
  compareCursors(a: string, b: string): number;

  /**
   * Calls `listener` with every event of the namespace logged after this call,
   * in log order, each once, until the returned function is called. An empty
   * batch means "look again": the store changed incarnation (its history was
   * lost), so what the listener knows of the log may no longer hold; a
   * Watch stream reads from its cursor and is refused with out_of_range.
   * On a Redis namespace split into shards (redis/keys.ts) the order holds
   * per shard (so per thread), and the events carry an empty cursor: a
   * cursor there names every shard's position (take cursors from readEvents).
   */
  subscribe(namespace: string, listener: (events: MemoryEvent[]) => void): () => void;
}

/** Administration and lifecycle: import, clear all, the TTL sweep, health, close. */
export interface StoreAdmin {
  /**
   * Writes a whole thread as given (`windlass-memory import`, src/portability)
   * if the namespace has no thread of that id: its strategy, summary,
   * summarized_through_seq, last_seq, times and stored messages with their
   * seqs and create times, under a new incarnation, counted by the namespace
   * quotas (resource_exhausted, nothing written), and logs messages_added for
   * the stored seqs (when there are any). Returns true when written; false,
   * changing nothing, when the thread already exists. The caller has checked
   * the snapshot (portability/thread-line.ts): stored seqs consecutive and
   * ending at last_seq, summarized_through_seq at most last_seq.
   *
   * With `shareFrom` (an export's thread.v2 line: a fork whose shared prefix
   * the file holds once, in its parent's line), `messages` are only the
   * thread's own (seqs throughSeq + 1 to lastSeq, possibly none) and the
   * thread is written as a Fork of the parent at throughSeq would write it
   * (core/lineage.ts planForkLineage: the parent's frozen segments shared,
   * its head frozen or at most FORK_COPY_MAX of it copied), followed by its
   * own messages, all in the same atomic step; everything else (strategy,
   * summary, times, labels, retention, origin) is taken from the command,
   * no trim runs and no request is recorded. It holds the parent's stored
   * messages from the parent's oldest through throughSeq, then its own; the
   * quotas charge one thread, the copied messages and its own. Refused with
   * failed_precondition, nothing written (core/fork.ts checkImportShare),
   * when the parent is not live, its last_seq is not parentLastSeq, or it
   * does not store throughSeq. messages_added is logged for every stored
   * seq, shared ones included (from the parent's oldest to lastSeq).
   */
  importThread(cmd: ImportThreadCommand): Promise<boolean>;

  /**
   * Removes every thread of the namespace; one thread_cleared each. Returns
   * the count. Works in batches of at most CLEAR_BATCH threads, smallest ids
   * first, each batch atomic on its own, and lets other calls run between
   * batches, so clearing a large namespace never blocks the process (or
   * Redis) for long nor holds one huge transaction. So the whole is not one
   * atomic step: a thread created while it runs may be cleared too or may
   * survive; every thread that existed when it was called is gone when it
   * returns (unless written again meanwhile).
   */
  clearAll(namespace: string, now: number): Promise<number>;

  /**
   * Removes up to `limit` threads whose expire time is at or before `now`,
   * oldest expiry first, each with thread_cleared {reason: "expired"} in the
   * same atomic step, and returns how many. A thread written since (its
   * expire time moved on) stays. Called off the hot path by the service's
   * sweeper (service/ttl-sweeper.ts), on every replica; until it runs, read,
   * getThread and append already treat an expired thread as gone (append
   * removes it first, logging the same event).
   */
  sweepExpired(now: number, limit: number): Promise<number>;

  /**
   * Whether the store can serve now, for gRPC health and GET /readyz: it
   * answers within `timeoutMs`, runs the incarnation this replica has
   * adopted (Redis), and can take writes (SQLite: its write worker answers,
   * is not stuck on a lock, and its disk is not full). Never throws; a store
   * that cannot tell within `timeoutMs` is reported not serving.
   */
  health(timeoutMs: number): Promise<StoreHealth>;

  /**
   * Releases connections and timers. Writes already handed to the store may
   * finish within `graceMs` (a store's own default when absent); after it,
   * those left are refused with unavailable and close resolves.
   */
  close(graceMs?: number): Promise<void>;
}

// The methods' inputs, results and limits live in store-commands.ts; callers import them from here.
export type * from "./store-commands.js";
export { CLEAR_BATCH, DEFAULT_STORE_LIMITS, READ_SLACK } from "./store-commands.js";
