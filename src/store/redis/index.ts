import { CLUSTER_SCHEME } from "../../config.js";
import type { Labels, MemoryEvent, ThreadState } from "../../core/types.js";
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
  Store,
  StoreHealth,
  StoreLimits,
  ThreadSnapshot,
} from "../store.js";
import { DEFAULT_STORE_LIMITS } from "../store.js";
import { clearAll, clearThread, sweepExpired } from "./clears.js";
import { clusterClients } from "./cluster.js";
import { DECODED_MESSAGES_KEPT, DecodedMessages } from "./codec.js";
import { Commands, connectWithin, sleep, withTimeout } from "./commands.js";
import { type RedisClients, type RedisConnection, redisClients } from "./connection.js";
import type { RedisContext } from "./context.js";
import { storeError } from "./errors.js";
import { headCursor, readEvents } from "./events.js";
import { fork } from "./forks.js";
import { RedisFunctions } from "./functions.js";
import { currentIncarnation, DEFAULT_INCARNATION_CHECK_MS, Incarnation } from "./incarnation.js";
import { DEFAULT_KEY_PREFIX, type KeyLayout, keyLayout } from "./keys.js";
import { acquireFoldLease, commitSummary, recordFoldFailure, releaseFoldLease } from "./leases.js";
import { ALL_SCRIPTS } from "./lua/index.js";
import { getThread, listThreads, READ_TAILS_KEPT, ReadTails, readThread } from "./reads.js";
import { ReplicaConfirmation } from "./replica-confirmation.js";
import { rewind } from "./rewind.js";
import { StreamReaders } from "./stream-readers.js";
import { append, importThread } from "./writes.js";

/** Options of {@link createRedisStore}. */
export interface RedisStoreOptions {
  /**
   * First part of every key (default "wm"), so several deployments, or
   * tests, can share one Redis database. Must not contain braces: the hash
   * tag that follows it must be the key's first one.
   */
  keyPrefix?: string;
  /**
   * Longest one command may take before the call fails with unavailable
   * (Redis hung or the network black-holed); default 5000. The command may
   * still have run: a client retries an Add with its request_id.
   */
  commandTimeoutMs?: number;
  /** How long start-up waits for Redis before giving up; default 5000. */
  connectWaitMs?: number;
  /**
   * How often each replica checks the store's incarnation besides every
   * reconnect and every Watch read, in ms; default 1000.
   */
  incarnationCheckMs?: number;
  /**
   * Replicas that must have an Add, import, Rewind, Fork or Clear before it is
   * acknowledged (WAIT after it); default 0, acknowledged once the primary
   * ran it. Summary commits, fold leases and failure records are not waited
   * for: a summary lost in a failover is folded again from the messages.
   */
  minReplicas?: number;
  /** Longest such a write waits for its replicas, then unavailable; default 1000. */
  replicaWaitMs?: number;
  /**
   * Shards each namespace is split into (keys.ts; `--redis-namespace-shards`),
   * default 1: a namespace is one hash slot. Fixed for a key prefix: the
   * first start records it, and a start with another count fails.
   */
  namespaceShards?: number;
}

/**
 * The Redis store: several server replicas share every thread, fold lease
 * and event, so a thread can be written through one replica and read,
 * folded or watched through another. Needs Redis 7.0 or later (for a stream's
 * max-deleted-entry-id in XINFO STREAM and XSETID, which is how a trimmed
 * resume token is told from a current one).
 *
 * Atomicity: every mutation (append with its seqs, trim, idempotency record
 * and event; rewind; commit with its incarnation, coverage and fencing
 * checks; clear; lease take and release; fork and an import sharing its
 * parent's prefix, after reading the parent's hash and head length, forks.ts)
 * is one Lua script run by EVALSHA (lua/), or for the Add by FCALL as a
 * Redis Function (functions.ts), so it is atomic on the server and costs one
 * round trip. Scripts and functions are loaded at start-up; after a Redis
 * restart the first NOSCRIPT reply falls back to EVAL, which loads it, and
 * a missing function to the script while it is loaded again (commands.ts). A Get's read is the READ script the
 * first time a replica reads a thread, then (on one node, where one
 * connection carries a MULTI) the thread hash and the list's tail in one
 * MULTI, no Lua: Redis copies a script's replies through Lua at several
 * times the cost of the commands (reads.ts readTail).
 *
 * Where things are: the key layout (one hash tag per namespace, for Redis
 * Cluster, or one per shard of a namespace split by --redis-namespace-shards)
 * in keys.ts; forks in forks.ts (within a shard) and forks-across-shards.ts,
 * their scripts' shared arguments and replies in fork-calls.ts; entry and reply formats in codec.ts; the event log
 * and its cursors in events.ts, subscriptions in stream-readers.ts; what
 * happens when Redis loses its data in incarnation.ts. The client is the
 * store's own pipelined RESP2 connection for one node (one primary, or a
 * proxy in front of a cluster; resp-connection.ts) or, for
 * redis+sentinel://, node-redis's sentinel client, which follows the primary
 * the sentinels name through failovers (connection.ts); for
 * redis-cluster:// it is node-redis's cluster client (cluster.ts). Writes are confirmed with WAIT on the primary that
 * took them when options.minReplicas asks for it (replica-confirmation.ts).
 *
 * Failures: the client does not queue commands while disconnected, so with
 * Redis unreachable every call fails at once with unavailable, while the
 * client reconnects in the background with backoff; nothing needs a restart.
 * Errors and messages never include the URL (it may carry a password).
 */
export async function createRedisStore(
  url: string,
  limits: Partial<StoreLimits> = {},
  options: RedisStoreOptions = {},
): Promise<Store> {
  const clustered = url.startsWith(CLUSTER_SCHEME);
  const keys = keyLayout(
    options.keyPrefix ?? DEFAULT_KEY_PREFIX,
    clustered,
    options.namespaceShards ?? 1,
  );
  // Single node or Sentinel (connection.ts), or a cluster (cluster.ts);
  // `redis.duplicate()` gives the readers theirs.
  const redis = clustered ? clusterClients(url) : redisClients(url);
  const client: RedisConnection = redis.main;
  // The clients emit every connection failure as an event; the calls report
  // them (as unavailable), so the events are only noted here, for start-up.
  let lastError: Error | undefined;
  client.on("error", (err) => {
    lastError = err;
  });
  await connectWithin(client, options.connectWaitMs ?? 5000, redis.target, () => lastError);
  const functions = new RedisFunctions(
    (library) => redis.eachPrimary(["FUNCTION", "LOAD", "REPLACE", library]),
    options.commandTimeoutMs ?? 5000,
  );
  let incarnation: string;
  try {
    incarnation = await prepare(redis, keys, functions);
  } catch (err) {
    client.destroy();
    throw err;
  }
  return new RedisStore(
    redis,
    keys,
    { ...DEFAULT_STORE_LIMITS, ...limits },
    options,
    incarnation,
    functions,
  );
}

/** Checks the server's version, loads the scripts and functions, returns the incarnation in force. */
async function prepare(
  redis: RedisClients,
  keys: KeyLayout,
  functions: RedisFunctions,
): Promise<string> {
  const client = redis.main;
  const target = redis.target;
  const info = String(await client.sendCommand(["INFO", "server"]));
  const version = /redis_version:(\d+)\.(\d+)/.exec(info);
  if (version === null || Number(version[1]) < 7) {
    throw new Error(
      `redis store: ${target} runs Redis ${version === null ? "of unknown version" : `${version[1]}.${version[2]}`}; 7.0 or later is needed`,
    );
  }
  for (const s of ALL_SCRIPTS) await redis.eachPrimary(["SCRIPT", "LOAD", s.source]);
  await functions.loadAll(ALL_SCRIPTS);
  await checkNamespaceShards(keys, (args) => client.sendCommand(args));
  return currentIncarnation(keys.incarnation, (args) => client.sendCommand(args));
}

/**
 * Records the shard count of the key prefix at its first start, and fails
 * a start with another count: the keys of a namespace's threads depend on
 * it (keys.ts), so another count would not find them. A prefix that has
 * data from before the count was recorded (its incarnation key exists) was
 * laid out unsharded: it records 1.
 */
async function checkNamespaceShards(
  keys: KeyLayout,
  send: (args: string[]) => Promise<unknown>,
): Promise<void> {
  let recorded = await send(["GET", keys.namespaceShards]);
  if (recorded === null) {
    const earlier = Number(await send(["EXISTS", keys.incarnation])) === 1;
    await send(["SET", keys.namespaceShards, String(earlier ? 1 : keys.shards), "NX"]);
    recorded = await send(["GET", keys.namespaceShards]);
  }
  if (String(recorded) !== String(keys.shards)) {
    throw new Error(
      `--redis-namespace-shards / WINDLASS_REDIS_NAMESPACE_SHARDS: this Redis deployment (key prefix) keeps each namespace in ${String(recorded)} shard(s), not ${keys.shards}; start with ${String(recorded)} (another count needs an export, and an import into a fresh deployment)`,
    );
  }
}

class RedisStore implements Store {
  readonly #ctx: RedisContext;
  readonly #redis: RedisClients;
  readonly #streams: StreamReaders;
  readonly #incarnationTimer: NodeJS.Timeout;

  constructor(
    redis: RedisClients,
    keys: KeyLayout,
    lim: StoreLimits,
    options: RedisStoreOptions,
    incarnation: string,
    functions: RedisFunctions,
  ) {
    this.#redis = redis;
    const io = new Commands(redis.target, redis.main, options.commandTimeoutMs ?? 5000, functions);
    const decoded = new DecodedMessages(DECODED_MESSAGES_KEPT);
    const minReplicas = options.minReplicas ?? 0;
    this.#ctx = {
      io,
      keys,
      lim,
      decoded,
      readTails: new ReadTails(READ_TAILS_KEPT, io.atomicSupported),
      incarnation: new Incarnation(
        io,
        keys.incarnation,
        incarnation,
        () => {
          decoded.clear();
          this.#streams.restartAll();
        },
        keys.markerRegistry,
      ),
      replicas:
        minReplicas > 0
          ? new ReplicaConfirmation(
              {
                open: (key) => redis.openPrimarySession(key),
                primaryOf: (key) => redis.primaryOf(key),
                moved: (key) => redis.moved(key),
              },
              io.send.bind(io),
              {
                replicas: minReplicas,
                waitMs: options.replicaWaitMs ?? 1000,
                commandTimeoutMs: io.timeoutMs,
              },
            )
          : undefined,
      unconfirmed: { link: redis.main, confirm: async () => {} },
    };
    this.#streams = new StreamReaders(this.#ctx, () => redis.duplicate());
    const check = this.#ctx.incarnation;
    // The client reconnects by itself; the store it reaches may not hold the data it left.
    redis.onReady(() => {
      check.checked = false;
      check.check().catch(() => {});
    });
    this.#incarnationTimer = setInterval(() => {
      check.check().catch(() => {});
    }, options.incarnationCheckMs ?? DEFAULT_INCARNATION_CHECK_MS);
    this.#incarnationTimer.unref();
  }

  append(cmd: AppendCommand): Promise<AppendResult> {
    return append(this.#ctx, cmd);
  }

  rewind(cmd: RewindCommand): Promise<RewindResult> {
    return rewind(this.#ctx, cmd);
  }

  fork(cmd: ForkCommand): Promise<ForkResult> {
    return fork(this.#ctx, cmd);
  }

  read(namespace: string, threadId: string, view?: ReadView): Promise<ThreadSnapshot | undefined> {
    return readThread(this.#ctx, namespace, threadId, view);
  }

  getThread(namespace: string, threadId: string): Promise<ThreadState | undefined> {
    return getThread(this.#ctx, namespace, threadId);
  }

  clear(namespace: string, threadId: string, now: number): Promise<boolean> {
    return clearThread(this.#ctx, namespace, threadId, now);
  }

  listThreads(
    namespace: string,
    after: string,
    limit: number,
    labels?: Labels,
    forksOf?: string,
  ): Promise<string[]> {
    return listThreads(this.#ctx, namespace, after, limit, labels, forksOf);
  }

  commitSummary(cmd: CommitSummaryCommand): Promise<ThreadState | undefined> {
    return commitSummary(this.#ctx, cmd);
  }

  recordFoldFailure(cmd: FoldFailureCommand): Promise<void> {
    return recordFoldFailure(this.#ctx, cmd);
  }

  acquireFoldLease(
    namespace: string,
    threadId: string,
    ttlMs: number,
  ): Promise<number | undefined> {
    return acquireFoldLease(this.#ctx, namespace, threadId, ttlMs);
  }

  releaseFoldLease(namespace: string, threadId: string, token: number): Promise<void> {
    return releaseFoldLease(this.#ctx, namespace, threadId, token);
  }

  readEvents(namespace: string, cursor: string, limit: number): Promise<MemoryEvent[]> {
    return readEvents(this.#ctx, namespace, cursor, limit);
  }

  headCursor(namespace: string): Promise<string> {
    return headCursor(this.#ctx, namespace);
  }

  compareCursors(a: string, b: string): number {
    const tokens = this.#ctx.incarnation.tokens;
    if (this.#ctx.keys.shards === 1) return tokens.positionOf(a) - tokens.positionOf(b);
    // A sharded namespace's cursors along one Watch each move one shard on:
    // ordered by how many events they have passed.
    const passed = (c: string) => sumOf(c.split(".")[1]?.split("_").map(Number) ?? []);
    return passed(a) - passed(b);
  }

  subscribe(namespace: string, listener: (events: MemoryEvent[]) => void): () => void {
    return this.#streams.subscribe(namespace, listener);
  }

  importThread(cmd: ImportThreadCommand): Promise<boolean> {
    return importThread(this.#ctx, cmd);
  }

  clearAll(namespace: string, now: number): Promise<number> {
    return clearAll(this.#ctx, namespace, now);
  }

  sweepExpired(now: number, limit: number): Promise<number> {
    return sweepExpired(this.#ctx, now, limit);
  }

  async health(timeoutMs: number): Promise<StoreHealth> {
    const { io, incarnation } = this.#ctx;
    if (io.closed) return { serving: false, reason: "the redis store is closed" };
    try {
      // Reaching Redis is not enough: the replica must run the incarnation it holds.
      await withTimeout(incarnation.check(), timeoutMs, io.target);
      return incarnation.checked
        ? { serving: true }
        : { serving: false, reason: "the redis store's incarnation is being checked" };
    } catch (err) {
      return { serving: false, reason: storeError(err, io.target).message };
    }
  }

  async close(): Promise<void> {
    const { io, replicas } = this.#ctx;
    if (io.closed) return;
    io.close();
    clearInterval(this.#incarnationTimer);
    await replicas?.close();
    this.#streams.close();
    const client = this.#redis.main;
    if (client.isOpen) {
      // close() lets commands in flight finish; a Redis that is away cannot answer them.
      await Promise.race([client.close().catch(() => {}), sleep(1000)]);
    }
    client.destroy();
  }
}

function sumOf(values: number[]): number {
  return values.reduce((a, b) => a + b, 0);
}
