import { randomUUID } from "node:crypto";
import { ErrorReply } from "redis";
import {
  lastSeqMismatchError,
  requestIdReusedError,
  strategyMismatchError,
} from "../core/append.js";
import { MemoryError } from "../core/errors.js";
import { messageBytes, type QuotaName, quotaExceededError } from "../core/quota.js";
import { strategyKey } from "../core/strategy.js";
import { isExpired } from "../core/ttl.js";
import type { Labels, MemoryEvent, ThreadState } from "../core/types.js";
import { livePage } from "./live-page.js";
import {
  asArray,
  asString,
  DECODED_MESSAGES_KEPT,
  DecodedMessages,
  decodeEvent,
  decodeResult,
  decodeThread,
  encodeMessage,
  strategyArgs,
  streamPosition,
} from "./redis/codec.js";
import {
  type AcknowledgedWrite,
  type RedisConnection,
  ReplicaConfirmation,
  redisClients,
} from "./redis/connection.js";
import {
  currentIncarnation,
  DEFAULT_INCARNATION_CHECK_MS,
  HISTORY_LOST,
  historyLost,
  tokensOf,
} from "./redis/incarnation.js";
import {
  ACQUIRE_LEASE,
  ALL_SCRIPTS,
  APPEND,
  CLEAR,
  CLEAR_CHUNK,
  COMMIT_SUMMARY,
  EXPIRE_DUE,
  EXPIRE_THREAD,
  HEAD,
  IMPORT_THREAD,
  LIST_LABELED,
  type LuaScript,
  READ,
  READ_EVENTS,
  RECORD_FOLD_FAILURE,
  RELEASE_LEASE,
  ROTATE_INCARNATION,
} from "./redis/scripts.js";
import { newStoreId, newTokenSecret, type ResumeTokens } from "./resume-token.js";
import { rewindPending } from "./rewind-pending.js";
import type {
  AppendCommand,
  AppendResult,
  CommitSummaryCommand,
  FoldFailureCommand,
  ImportThreadCommand,
  ReadView,
  Store,
  StoreHealth,
  StoreLimits,
  ThreadSnapshot,
} from "./store.js";
import { CLEAR_BATCH, DEFAULT_STORE_LIMITS, READ_SLACK } from "./store.js";

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
   * Replicas that must have an Add, import or Clear before it is
   * acknowledged (WAIT after it); default 0, acknowledged once the primary
   * ran it. Summary commits, fold leases and failure records are not waited
   * for: a summary lost in a failover is folded again from the messages.
   */
  minReplicas?: number;
  /** Longest such a write waits for its replicas, then unavailable; default 1000. */
  replicaWaitMs?: number;
}

type Listener = (events: MemoryEvent[]) => void;

/** An event read from a stream, with its position there (numbered per namespace). */
interface LoggedEvent {
  position: number;
  event: MemoryEvent;
}

interface Subscription {
  listener: Listener;
  /** Deliver only events after this position; undefined until the head read answers. */
  after: number | undefined;
  /** Events read before `after` was known (bounded; see BUFFER_LIMIT). */
  buffered: LoggedEvent[];
  active: boolean;
}

/** One XREAD BLOCK loop per namespace on its own connection, shared by its subscribers. */
interface StreamReader {
  namespace: string;
  subscriptions: Set<Subscription>;
  /** Id of the last entry read; undefined until the first subscriber's head is known. */
  cursor: string | undefined;
  /** The incarnation `cursor` belongs to. */
  incarnation: string;
  /** Set when the reader must find its place again (a reconnect, another incarnation). */
  resync: boolean;
  running: boolean;
  connection: RedisConnection | undefined;
  stopped: boolean;
  lingerTimer: NodeJS.Timeout | undefined;
}

const DEFAULT_KEY_PREFIX = "wm";
const XREAD_BLOCK_MS = 5000;
const XREAD_COUNT = 512;
/** A reader left without subscribers stays caught up this long, for the next Get that waits. */
const READER_LINGER_MS = 30_000;
/** Events held for a subscription whose start is not known yet (Redis slow or away). */
const BUFFER_LIMIT = 10_000;
/**
 * The set of namespaces that have had a thread with a ttl, under the key
 * prefix: what the sweep (every replica) walks. Written before the Add that
 * sets the ttl, so no expiring thread is ever missed by the sweep.
 */
const TTL_NAMESPACES_KEY = "ttl-namespaces";
/** A counter each WAIT increments first (ReplicaConfirmation), under the key prefix. */
const REPLICATION_FENCE_KEY = "replication-fence";
/** The key holding "<store id>.<secret>" of the resume tokens, under the key prefix. */
const TOKEN_KEY = "resume-token-key";
/** Server replies that mean "not now" rather than "wrong": the call may be retried. */
const TRANSIENT_REPLY =
  /^(LOADING|BUSY|MASTERDOWN|READONLY|CLUSTERDOWN|TRYAGAIN|NOREPLICAS|MISCONF|OOM)\b/;

/**
 * The Redis store: several server replicas share every thread, fold lease
 * and event, so a thread can be written through one replica and read,
 * folded or watched through another. Needs Redis 7.0 or later (for a stream's
 * max-deleted-entry-id in XINFO STREAM and XSETID, which is how a trimmed
 * resume token is told from a current one).
 *
 * Atomicity: every mutation (append with its seqs, trim, idempotency record
 * and event; commit with its incarnation, coverage and fencing checks; clear;
 * lease take and release) is one Lua script run by EVALSHA, so it is atomic on
 * the server and costs one round trip. Scripts are loaded at start-up; after a
 * Redis restart the first NOSCRIPT reply falls back to EVAL, which loads it.
 * The layout and the scripts are in src/store/redis/scripts.ts.
 *
 * Key layout: `<prefix>:{ns-<namespace as base64url>}:` then `t:<thread>`,
 * `m:<thread>`, `r:<thread>`, `ri:<thread>`, `l:<thread>` per thread and
 * `threads`, `log`, `lease-seq` per namespace. Every key of a namespace
 * shares that one hash tag, because an append changes the thread's keys, the
 * namespace's thread index and its event stream in one atomic step: on Redis
 * Cluster they all hash to one slot (a namespace is the unit of sharding).
 * The namespace is encoded because it may contain braces, and prefixed with
 * "ns-" so an empty namespace still makes a non-empty tag (Redis ignores
 * `{}`). The client is a single-node client (one primary, or a proxy in
 * front of a cluster) or, for redis+sentinel://, follows the primary the
 * sentinels name through failovers (src/store/redis/connection.ts, which
 * also confirms writes with WAIT when options.minReplicas asks for it).
 *
 * Events: one stream per namespace (`log`), keeping at least eventRetention
 * entries (trimmed in batches of at least 64 or an eighth of that). Entry ids
 * are "0-<n>" (XADD 0-*): n counts the namespace's own events, with no clock
 * in it. A cursor (resume-token.ts) is n signed with the store's
 * incarnation, "<store id>.<secret>" kept in Redis under
 * `<prefix>:resume-token-key` (created with SET NX by whichever replica
 * finds it missing), so it means the same on every replica, which is what
 * makes Watch resume tokens portable. Trimming records the newest dropped id as the
 * stream's max-deleted-entry-id (XSETID; Redis 7.0 does not do it on trim),
 * so a cursor below it has lost events after it: out_of_range, never a skip.
 * Streams of earlier versions (`events`, ids from the clock) are deleted when
 * their namespace logs its first event into `log`; their tokens are out_of_range.
 *
 * Incarnation: the key vanishes with the data (a restart without
 * persistence, FLUSHALL, a failover to a copy without it). Every replica
 * checks it on every reconnect, every second, and atomically inside every
 * event read and head read (scripts.ts READ_EVENTS, HEAD); on a change it
 * adopts the new one (see adopt below): cursors of the old history are
 * out_of_range, caches are dropped, stream readers start the new history
 * from its first event, open Watch streams end with out_of_range. A signed
 * cursor beyond the head means the history was rewound with the key kept
 * (an append-only file that lost its last second, a failover to a replica
 * that lagged): the replica that meets it rotates the incarnation
 * (ROTATE_INCARNATION), with the same effect on every replica.
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
  const lim = { ...DEFAULT_STORE_LIMITS, ...limits };
  const prefix = options.keyPrefix ?? DEFAULT_KEY_PREFIX;
  if (prefix === "" || /[{}]/.test(prefix)) {
    throw new Error("redis store: the key prefix must be non-empty and contain no braces");
  }
  const commandTimeoutMs = options.commandTimeoutMs ?? 5000;
  const decoded = new DecodedMessages(DECODED_MESSAGES_KEPT);
  // Single node or Sentinel (src/store/redis/connection.ts); `redis.duplicate()` gives the readers theirs.
  const redis = redisClients(url);
  const target = redis.target;
  const client: RedisConnection = redis.main;
  // node-redis emits every connection failure as an event; the calls report
  // them (as unavailable), so the events are only noted here, for start-up.
  let lastError: Error | undefined;
  client.on("error", (err) => {
    lastError = err;
  });
  await connectWithin(client, options.connectWaitMs ?? 5000, target, () => lastError);
  const incarnationKey = `${prefix}:${TOKEN_KEY}`;
  /** The incarnation this replica has adopted: "<store id>.<secret>" of the resume tokens. */
  let incarnation = "";
  let codec: ResumeTokens;
  try {
    const info = String(await client.sendCommand(["INFO", "server"]));
    const version = /redis_version:(\d+)\.(\d+)/.exec(info);
    if (version === null || Number(version[1]) < 7) {
      throw new Error(
        `redis store: ${target} runs Redis ${version === null ? "of unknown version" : `${version[1]}.${version[2]}`}; 7.0 or later is needed`,
      );
    }
    for (const s of ALL_SCRIPTS) await client.sendCommand(["SCRIPT", "LOAD", s.source]);
    incarnation = await currentIncarnation(incarnationKey, (args) => client.sendCommand(args));
    codec = tokensOf(incarnation, "it refers to the history of another database");
  } catch (err) {
    client.destroy();
    throw err;
  }

  let closed = false;
  const readers = new Map<string, StreamReader>();

  function keys(namespace: string) {
    const base = `${prefix}:{ns-${Buffer.from(namespace, "utf8").toString("base64url")}}:`;
    return {
      base,
      threads: `${base}threads`,
      events: `${base}log`,
      usage: `${base}usage`,
      leaseSeq: `${base}lease-seq`,
      thread: (id: string) => `${base}t:${id}`,
      messages: (id: string) => `${base}m:${id}`,
      requests: (id: string) => `${base}r:${id}`,
      requestTimes: (id: string) => `${base}ri:${id}`,
      lease: (id: string) => `${base}l:${id}`,
    };
  }

  function unavailable(cause: unknown): MemoryError {
    return new MemoryError("unavailable", `the redis store at ${target} is unreachable`, {
      cause,
    });
  }

  /** Maps a client or server failure to the domain's errors. */
  function storeError(err: unknown): Error {
    if (err instanceof MemoryError) return err;
    if (err instanceof CommandTimeout) {
      return new MemoryError("unavailable", err.message, { cause: err });
    }
    if (err instanceof ErrorReply) {
      const word = TRANSIENT_REPLY.exec(err.message)?.[1];
      if (word !== undefined) {
        return new MemoryError("unavailable", `the redis store cannot serve now (${word})`, {
          cause: err,
        });
      }
      // A script or protocol error: a bug, reported as internal.
      return new Error(`redis store: ${err.message}`, { cause: err });
    }
    return unavailable(err);
  }

  function send(connection: RedisConnection, args: readonly string[], timeoutMs: number) {
    if (closed) return Promise.reject(new MemoryError("unavailable", "the store is closed"));
    return withTimeout(connection.sendCommand(args), timeoutMs, target);
  }

  async function command(args: readonly string[], via: RedisConnection = client): Promise<unknown> {
    try {
      return await send(via, args, commandTimeoutMs);
    } catch (err) {
      throw storeError(err);
    }
  }

  /** One script call: EVALSHA, or EVAL when Redis lost its script cache (restart, SCRIPT FLUSH). */
  async function run(
    script: LuaScript,
    scriptKeys: readonly string[],
    args: readonly string[],
    via: RedisConnection = client,
  ): Promise<unknown> {
    const tail = [String(scriptKeys.length), ...scriptKeys, ...args];
    try {
      return await send(via, ["EVALSHA", script.sha, ...tail], commandTimeoutMs);
    } catch (err) {
      if (!(err instanceof ErrorReply && err.message.startsWith("NOSCRIPT"))) throw storeError(err);
    }
    try {
      return await send(via, ["EVAL", script.source, ...tail], commandTimeoutMs);
    } catch (err) {
      throw storeError(err);
    }
  }

  const minReplicas = options.minReplicas ?? 0;
  const replicas =
    minReplicas > 0
      ? new ReplicaConfirmation(() => redis.openPrimarySession(), send, {
          replicas: minReplicas,
          waitMs: options.replicaWaitMs ?? 1000,
          commandTimeoutMs,
          fenceKey: `${prefix}:${REPLICATION_FENCE_KEY}`,
        })
      : undefined;
  const unconfirmed: AcknowledgedWrite = { link: client, confirm: async () => {} };

  /**
   * Where an Add, import or Clear goes when replicas must confirm it (a
   * session one WAIT confirms). Callers use `unconfirmed` without awaiting
   * when they need not, so the write is queued in the call, as before.
   */
  async function beginWrite(): Promise<AcknowledgedWrite> {
    if (replicas === undefined) return unconfirmed;
    try {
      return await replicas.begin();
    } catch (err) {
      throw storeError(err);
    }
  }

  // --- Incarnation ---------------------------------------------------------

  /**
   * Whether this replica may vouch for its view of the store: false from a
   * reconnect until the incarnation has been checked on it (health reports
   * not serving meanwhile).
   */
  let incarnationChecked = true;
  let checking: Promise<void> | undefined;

  /**
   * Reads the incarnation key (creating it if the data was lost) and adopts
   * what it holds. One check at a time; callers share it.
   */
  function checkIncarnation(): Promise<void> {
    checking ??= (async () => {
      try {
        adopt(
          await currentIncarnation(incarnationKey, (args) => send(client, args, commandTimeoutMs)),
        );
        incarnationChecked = true;
      } finally {
        checking = undefined;
      }
    })();
    return checking;
  }

  /**
   * Moves this replica to `value` if it is not the incarnation in force here:
   * every cursor of the old one is refused from now on (out_of_range), the
   * decoded-message cache is dropped, every stream reader starts again at
   * the new head, and every subscriber is told to look again (an empty
   * batch), so open Watch streams read, find their cursor refused and end
   * with out_of_range: never a silent skip, never a resume into another
   * history.
   */
  function adopt(value: string): void {
    if (value === incarnation) return;
    incarnation = value;
    codec = tokensOf(value, HISTORY_LOST);
    decoded.clear();
    for (const reader of readers.values()) {
      reader.resync = true;
      // Ends an XREAD blocked on a position of the old history.
      reader.connection?.destroy();
      reader.connection = undefined;
      for (const sub of reader.subscriptions) {
        sub.buffered = [];
        notify(sub, []);
      }
    }
  }

  /**
   * A cursor this replica issued lies beyond the namespace's history: events
   * were lost (a restart that kept an older copy, a failover to a replica
   * that lagged). The incarnation is replaced, once across every replica,
   * so that the cursors of the longer history are all refused.
   */
  async function rotateIncarnation(found: string): Promise<void> {
    const next = `${newStoreId()}.${newTokenSecret()}`;
    adopt(asString(await run(ROTATE_INCARNATION, [incarnationKey], [found, next])));
  }

  // node-redis reconnects by itself; the store it reaches may not hold the data it left.
  redis.onReady(() => {
    incarnationChecked = false;
    checkIncarnation().catch(() => {});
  });
  const incarnationTimer = setInterval(() => {
    checkIncarnation().catch(() => {});
  }, options.incarnationCheckMs ?? DEFAULT_INCARNATION_CHECK_MS);
  incarnationTimer.unref();

  // --- Watch: subscriptions ------------------------------------------------

  function notify(sub: Subscription, events: MemoryEvent[]): void {
    try {
      sub.listener(events);
    } catch {
      // A listener's failure is its own; the others still get the events.
    }
  }

  function deliver(sub: Subscription, logged: LoggedEvent[]): void {
    if (!sub.active || logged.length === 0) return;
    const last = logged[logged.length - 1];
    if (last !== undefined) sub.after = last.position;
    notify(
      sub,
      logged.map((l) => l.event),
    );
  }

  function dispatch(reader: StreamReader, logged: LoggedEvent[]): void {
    for (const sub of [...reader.subscriptions]) {
      if (sub.after === undefined) {
        sub.buffered.push(...logged);
        if (sub.buffered.length > BUFFER_LIMIT) {
          sub.buffered.splice(0, sub.buffered.length - BUFFER_LIMIT);
        }
      } else {
        const after = sub.after;
        deliver(
          sub,
          logged.filter((l) => l.position > after),
        );
      }
    }
  }

  /** The namespace's head and the incarnation it belongs to, adopting a changed one. */
  async function head(namespace: string): Promise<string> {
    const [last, found] = asArray(await run(HEAD, [keys(namespace).events, incarnationKey], []));
    if (found !== incarnation) {
      await checkIncarnation();
      return head(namespace);
    }
    return asString(last);
  }

  /**
   * Learns where a subscription starts: the head as Redis has it when the
   * command sent at subscribe() time runs, so every event logged after that
   * is delivered, and none before. Events the reader meets meanwhile are held
   * and sorted out here. Retried while Redis is away.
   */
  async function startSubscription(reader: StreamReader, sub: Subscription): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        // The first attempt's command is queued synchronously, inside subscribe().
        const position = streamPosition(await head(reader.namespace));
        if (!sub.active) return;
        sub.after = position;
        const held = sub.buffered;
        sub.buffered = [];
        deliver(
          sub,
          held.filter((l) => l.position > position),
        );
        if (!reader.running) {
          // The reader starts where this subscriber does, so it misses nothing.
          reader.running = true;
          reader.cursor = `0-${position}`;
          reader.incarnation = incarnation;
          void readLoop(reader);
        }
        return;
      } catch {
        if (!sub.active || closed) return;
        await sleep(backoffMs(attempt));
      }
    }
  }

  async function readerConnection(reader: StreamReader): Promise<RedisConnection> {
    if (reader.connection !== undefined) return reader.connection;
    // A dedicated connection: XREAD BLOCK would hold up every other command.
    const connection: RedisConnection = redis.duplicate();
    connection.on("error", () => {});
    reader.connection = connection;
    try {
      await connection.connect();
    } catch (err) {
      connection.destroy();
      if (reader.connection === connection) reader.connection = undefined;
      throw err;
    }
    return connection;
  }

  /**
   * Finds the reader's place again after a reconnect or a change of
   * incarnation. In the same incarnation it goes on where it was, unless the
   * head is now behind that: the store lost events, so the incarnation
   * rotates (and subscribers look again).
   */
  async function resync(reader: StreamReader): Promise<void> {
    const at = await head(reader.namespace);
    if (reader.cursor !== undefined && reader.incarnation === incarnation) {
      if (streamPosition(at) < streamPosition(reader.cursor)) {
        await rotateIncarnation(incarnation);
        return; // adopt() asked for another resync, at the new incarnation's head
      }
      reader.resync = false;
      return; // the same history: go on from where the reader was
    }
    // Another incarnation: every event in it is new to every subscriber (each
    // was told to look again), so the reader starts at its beginning.
    reader.cursor = "0-0";
    reader.incarnation = incarnation;
    reader.resync = false;
    for (const sub of reader.subscriptions) {
      if (sub.after !== undefined) sub.after = 0;
    }
  }

  /** Follows the namespace's stream from `reader.cursor` until the reader is stopped. */
  async function readLoop(reader: StreamReader): Promise<void> {
    const stream = keys(reader.namespace).events;
    for (let failures = 0; !reader.stopped && !closed; ) {
      try {
        if (reader.resync) await resync(reader);
        const cursor = reader.cursor ?? "0-0";
        const readingIn = reader.incarnation;
        const connection = await readerConnection(reader);
        const reply = await send(
          connection,
          [
            "XREAD",
            "COUNT",
            String(XREAD_COUNT),
            "BLOCK",
            String(XREAD_BLOCK_MS),
            "STREAMS",
            stream,
            cursor,
          ],
          XREAD_BLOCK_MS + commandTimeoutMs,
        );
        failures = 0;
        // Read in a history this replica has left since: dropped, resync follows.
        if (reply === null || reader.stopped || reader.resync || readingIn !== incarnation) {
          continue;
        }
        const [entry] = asArray(reply);
        const [, entries] = asArray(entry);
        const raw = asArray(entries);
        const last = raw[raw.length - 1];
        if (last === undefined) continue;
        const logged = raw.map((e) => ({
          position: streamPosition(asString(asArray(e)[0])),
          event: decodeEvent(e, reader.namespace, codec),
        }));
        reader.cursor = asString(asArray(last)[0]);
        dispatch(reader, logged);
      } catch (err) {
        if (reader.stopped || closed) return;
        if (err instanceof CommandTimeout || reader.connection?.isOpen === false) {
          // The connection stopped answering, or was closed: start over on a fresh one.
          reader.connection?.destroy();
          reader.connection = undefined;
        }
        // After an outage the store may hold another history (or a shorter one).
        reader.resync = true;
        await sleep(backoffMs(failures++));
      }
    }
  }

  function stopReader(reader: StreamReader): void {
    reader.stopped = true;
    clearTimeout(reader.lingerTimer);
    reader.connection?.destroy();
    reader.connection = undefined;
    if (readers.get(reader.namespace) === reader) readers.delete(reader.namespace);
  }

  /** One APPEND call (see scripts.ts APPEND for its replies). */
  function appendOnce(cmd: AppendCommand, via: RedisConnection): Promise<unknown> {
    const k = keys(cmd.namespace);
    const id = cmd.threadId;
    return run(
      APPEND,
      [
        k.thread(id),
        k.messages(id),
        k.requests(id),
        k.requestTimes(id),
        k.threads,
        k.events,
        k.usage,
      ],
      [
        id,
        String(cmd.now),
        cmd.requestId,
        cmd.requestHash,
        cmd.expectedLastSeq === undefined ? "" : String(cmd.expectedLastSeq),
        cmd.replaceStrategy ? "1" : "0",
        randomUUID(),
        String(lim.eventRetention),
        String(lim.idempotencyRetentionMs),
        String(lim.idempotencyMaxPerThread),
        ...strategyArgs(cmd.strategy),
        ...strategyArgs(cmd.defaultStrategy),
        String(lim.maxThreadsPerNamespace),
        String(lim.maxMessagesPerNamespace),
        String(lim.maxBytesPerNamespace),
        cmd.labels === undefined ? "" : JSON.stringify(cmd.labels),
        cmd.ttlMs === undefined ? "" : String(cmd.ttlMs),
        String(cmd.defaultTtlMs ?? 0),
        ...cmd.messages.map((m) => `${messageBytes(m)} ${encodeMessage(m, cmd.now)}`),
      ],
      via,
    );
  }

  // --- The Store -----------------------------------------------------------

  return {
    rewind: rewindPending,
    async append(cmd: AppendCommand): Promise<AppendResult> {
      const k = keys(cmd.namespace);
      const id = cmd.threadId;
      const write = replicas === undefined ? unconfirmed : await beginWrite();
      // The caller has given up: an Add stored now would be one it was told had failed.
      if (cmd.deadline !== undefined && Date.now() >= cmd.deadline) {
        throw new MemoryError(
          "deadline_exceeded",
          "the call's deadline passed before the Add reached Redis; nothing was stored",
        );
      }
      if ((cmd.ttlMs ?? 0) > 0 || (cmd.defaultTtlMs ?? 0) > 0) {
        await command(["SADD", `${prefix}:${TTL_NAMESPACES_KEY}`, cmd.namespace], write.link);
      }
      let reply = await appendOnce(cmd, write.link);
      if (asArray(reply)[0] === "expired") {
        // Removed (with its event) in its own atomic step, then the Add goes to a new thread.
        await run(
          EXPIRE_THREAD,
          [k.thread(id), k.threads, k.events, k.usage],
          [id, String(cmd.now), String(lim.eventRetention)],
          write.link,
        );
        reply = await appendOnce(cmd, write.link);
      }
      const [status, value] = asArray(reply);
      switch (status) {
        case "ok":
          await write.confirm();
          return decodeResult(asString(value), false);
        case "replayed":
          // The first attempt may not have reached the replicas (its WAIT fell short).
          await write.confirm();
          return decodeResult(asString(value), true);
        case "request_id_reused":
          throw requestIdReusedError();
        case "last_seq_mismatch":
          throw lastSeqMismatchError(Number(asString(value)), cmd.expectedLastSeq ?? 0);
        case "strategy_mismatch":
          if (cmd.strategy === undefined) break;
          throw strategyMismatchError(asString(value), strategyKey(cmd.strategy));
        case "quota": {
          const [, quota, limit] = asArray(reply);
          throw quotaExceededError(asString(quota) as QuotaName, Number(asString(limit)));
        }
      }
      throw new Error(`redis store: unexpected append reply ${String(status)}`);
    },

    async read(
      namespace: string,
      threadId: string,
      view?: ReadView,
    ): Promise<ThreadSnapshot | undefined> {
      const k = keys(namespace);
      const args =
        view === undefined
          ? [""]
          : ["view", view.limit === undefined ? "" : String(view.limit), String(READ_SLACK)];
      const reply = await run(READ, [k.thread(threadId), k.messages(threadId)], args);
      if (reply === null) return undefined;
      const [thread, entries, complete] = asArray(reply);
      const state = decodeThread(thread);
      if (isExpired(state, Date.now())) return undefined;
      return {
        thread: state,
        messages: asArray(entries).map((e) => decoded.get(state.incarnation, asString(e))),
        complete: complete === 1,
      };
    },

    async getThread(namespace: string, threadId: string): Promise<ThreadState | undefined> {
      const fields = asArray(await command(["HGETALL", keys(namespace).thread(threadId)]));
      const thread = fields.length === 0 ? undefined : decodeThread(fields);
      return thread === undefined || isExpired(thread, Date.now()) ? undefined : thread;
    },

    async commitSummary(cmd: CommitSummaryCommand): Promise<ThreadState | undefined> {
      const k = keys(cmd.namespace);
      const id = cmd.threadId;
      const reply = await run(
        COMMIT_SUMMARY,
        [k.thread(id), k.messages(id), k.lease(id), k.events, k.usage],
        [
          cmd.incarnation,
          String(cmd.leaseToken),
          String(cmd.fromSeq),
          String(cmd.throughSeq),
          cmd.summary,
          String(cmd.foldedCount),
          String(cmd.now),
          String(lim.eventRetention),
          id,
        ],
      );
      return reply === null ? undefined : decodeThread(reply);
    },

    async recordFoldFailure(cmd: FoldFailureCommand): Promise<void> {
      const k = keys(cmd.namespace);
      await run(
        RECORD_FOLD_FAILURE,
        [k.thread(cmd.threadId), k.events],
        [
          cmd.incarnation,
          cmd.reason,
          String(cmd.attempt),
          String(cmd.now),
          String(lim.eventRetention),
          cmd.threadId,
        ],
      );
    },

    async acquireFoldLease(namespace, threadId, ttlMs) {
      const k = keys(namespace);
      const reply = await run(
        ACQUIRE_LEASE,
        [k.lease(threadId), k.leaseSeq],
        [String(Math.max(1, Math.ceil(ttlMs)))],
      );
      return reply === null ? undefined : Number(reply);
    },

    async releaseFoldLease(namespace, threadId, token) {
      await run(RELEASE_LEASE, [keys(namespace).lease(threadId)], [String(token)]);
    },

    async clear(namespace: string, threadId: string, now: number): Promise<boolean> {
      const k = keys(namespace);
      const write = replicas === undefined ? unconfirmed : await beginWrite();
      const reply = await run(
        CLEAR,
        [
          k.thread(threadId),
          k.messages(threadId),
          k.requests(threadId),
          k.requestTimes(threadId),
          k.threads,
          k.events,
          k.usage,
        ],
        [threadId, String(now), String(lim.eventRetention)],
        write.link,
      );
      await write.confirm();
      return reply === 1;
    },

    async clearAll(namespace: string, now: number): Promise<number> {
      const k = keys(namespace);
      // Chunks keep each script short, so one big namespace never blocks Redis
      // for long; each chunk is atomic on its own.
      let total = 0;
      const write = replicas === undefined ? unconfirmed : await beginWrite();
      for (;;) {
        const n = Number(
          await run(
            CLEAR_CHUNK,
            [k.threads, k.events, k.usage],
            [k.base, String(now), String(lim.eventRetention), String(CLEAR_BATCH)],
            write.link,
          ),
        );
        total += n;
        if (n < CLEAR_BATCH) {
          await write.confirm();
          return total;
        }
      }
    },

    async listThreads(
      namespace: string,
      after: string,
      limit: number,
      labels?: Labels,
    ): Promise<string[]> {
      if (limit <= 0) return [];
      const k = keys(namespace);
      const fetch =
        labels !== undefined && Object.keys(labels).length > 0
          ? async (from: string, n: number) =>
              asArray(
                await run(
                  LIST_LABELED,
                  Object.entries(labels).map(([key, v]) => `${k.base}lb:${key}=${v}`),
                  [from, String(n)],
                ),
              ).map(asString)
          : async (from: string, n: number) =>
              asArray(
                await command([
                  "ZRANGE",
                  k.threads,
                  from === "" ? "-" : `(${from}`,
                  "+",
                  "BYLEX",
                  "LIMIT",
                  "0",
                  String(n),
                ]),
              ).map(asString);
      const now = Date.now();
      return livePage(after, limit, fetch, async (ids) => {
        // Expire times of the page's threads (nil: no ttl), from the sorted
        // set the sweep reads: one more command per page.
        const scores = asArray(await command(["ZMSCORE", `${k.base}expiry`, ...ids]));
        return scores.map((v) => v !== null && Number(asString(v)) <= now);
      });
    },

    async readEvents(namespace: string, cursor: string, limit: number): Promise<MemoryEvent[]> {
      const position = codec.open(namespace, cursor);
      const issuedIn = incarnation;
      const reply = await run(
        READ_EVENTS,
        [keys(namespace).events, incarnationKey],
        [`0-${position}`, String(Math.max(1, limit)), issuedIn],
      );
      const [status, entries] = asArray(reply);
      if (status === "lost") {
        // The key no longer holds the incarnation the cursor was checked against.
        await checkIncarnation();
        throw historyLost();
      }
      if (status === "ahead") {
        // Signed here, so this history once reached it: events were lost since.
        await rotateIncarnation(issuedIn);
        throw historyLost();
      }
      if (status === "gone") {
        throw new MemoryError(
          "out_of_range",
          "resume_token: the events after it are no longer retained; re-read with Get and watch from now",
          { field: "resume_token" },
        );
      }
      return asArray(entries)
        .map((e) => decodeEvent(e, namespace, codec))
        .slice(0, Math.max(0, limit));
    },

    async headCursor(namespace: string): Promise<string> {
      const at = await head(namespace);
      return codec.issue(namespace, streamPosition(at));
    },

    compareCursors(a: string, b: string): number {
      return codec.positionOf(a) - codec.positionOf(b);
    },

    subscribe(namespace: string, listener: Listener): () => void {
      if (closed) return () => {};
      let reader = readers.get(namespace);
      if (reader === undefined) {
        reader = {
          namespace,
          subscriptions: new Set(),
          cursor: undefined,
          incarnation,
          resync: false,
          running: false,
          connection: undefined,
          stopped: false,
          lingerTimer: undefined,
        };
        readers.set(namespace, reader);
      }
      const r = reader;
      clearTimeout(r.lingerTimer);
      r.lingerTimer = undefined;
      const sub: Subscription = {
        listener,
        after: undefined,
        buffered: [],
        active: true,
      };
      r.subscriptions.add(sub);
      void startSubscription(r, sub);
      return () => {
        if (!sub.active) return;
        sub.active = false;
        sub.buffered = [];
        r.subscriptions.delete(sub);
        if (r.subscriptions.size === 0 && !r.stopped) {
          r.lingerTimer = setTimeout(() => {
            if (r.subscriptions.size === 0) stopReader(r);
          }, READER_LINGER_MS);
          r.lingerTimer.unref();
        }
      };
    },

    async sweepExpired(now: number, limit: number): Promise<number> {
      let removed = 0;
      let cursor = "0";
      do {
        const [next, names] = asArray(
          await command(["SSCAN", `${prefix}:${TTL_NAMESPACES_KEY}`, cursor, "COUNT", "100"]),
        );
        cursor = asString(next);
        for (const namespace of asArray(names).map(asString)) {
          if (removed >= limit) return removed;
          const k = keys(namespace);
          removed += Number(
            await run(
              EXPIRE_DUE,
              [`${k.base}expiry`, k.threads, k.events, k.usage],
              [k.base, String(now), String(lim.eventRetention), String(limit - removed)],
            ),
          );
        }
      } while (cursor !== "0");
      return removed;
    },

    async importThread(cmd: ImportThreadCommand): Promise<boolean> {
      const k = keys(cmd.namespace);
      const id = cmd.threadId;
      const ttl =
        cmd.ttlMs === undefined || cmd.expireTime === undefined
          ? undefined
          : { ttlMs: cmd.ttlMs, expireTime: cmd.expireTime };
      const write = replicas === undefined ? unconfirmed : await beginWrite();
      if (ttl !== undefined) {
        await command(["SADD", `${prefix}:${TTL_NAMESPACES_KEY}`, cmd.namespace], write.link);
      }
      let bytes = 0;
      const entries = cmd.messages.map((m) => {
        const b = messageBytes(m);
        bytes += b;
        return `${m.seq} ${b} ${encodeMessage(m, m.createTime)}`;
      });
      const reply = await run(
        IMPORT_THREAD,
        [k.thread(id), k.messages(id), k.threads, k.events, k.usage],
        [
          id,
          randomUUID(),
          ...strategyArgs(cmd.strategy),
          String(cmd.lastSeq),
          String(cmd.summarizedThroughSeq),
          cmd.summary,
          String(cmd.summaryTime),
          String(cmd.createTime),
          String(cmd.updateTime),
          String(cmd.now),
          String(lim.eventRetention),
          String(lim.maxThreadsPerNamespace),
          String(lim.maxMessagesPerNamespace),
          String(lim.maxBytesPerNamespace),
          String(bytes),
          String(cmd.messages[0]?.seq ?? 0),
          cmd.labels === undefined ? "" : JSON.stringify(cmd.labels),
          ttl === undefined ? "" : String(ttl.ttlMs),
          ttl === undefined ? "" : String(ttl.expireTime),
          ...entries,
        ],
        write.link,
      );
      const [status, quota, limit] = asArray(reply);
      switch (status) {
        case "ok":
          await write.confirm();
          return true;
        case "exists":
          await write.confirm();
          return false;
        case "quota":
          throw quotaExceededError(asString(quota) as QuotaName, Number(asString(limit)));
      }
      throw new Error(`redis store: unexpected import reply ${String(status)}`);
    },

    async health(timeoutMs: number): Promise<StoreHealth> {
      if (closed) return { serving: false, reason: "the redis store is closed" };
      try {
        // Reaching Redis is not enough: the replica must run the incarnation it holds.
        await withTimeout(checkIncarnation(), timeoutMs, target);
        return incarnationChecked
          ? { serving: true }
          : { serving: false, reason: "the redis store's incarnation is being checked" };
      } catch (err) {
        return { serving: false, reason: storeError(err).message };
      }
    },

    async close(): Promise<void> {
      if (closed) return;
      closed = true;
      clearInterval(incarnationTimer);
      await replicas?.close();
      for (const reader of [...readers.values()]) {
        for (const sub of reader.subscriptions) sub.active = false;
        stopReader(reader);
      }
      if (client.isOpen) {
        // close() lets commands in flight finish; a Redis that is away cannot answer them.
        await Promise.race([client.close().catch(() => {}), sleep(1000)]);
      }
      client.destroy();
    },
  };
}

// --- Plumbing ------------------------------------------------------------------

class CommandTimeout extends Error {
  override readonly name = "CommandTimeout";
}

function withTimeout<T>(promise: Promise<T>, ms: number, target: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new CommandTimeout(`redis at ${target} did not answer within ${ms} ms`)),
      ms,
    );
  });
  // The command may still settle after the timeout; nobody waits for it then.
  promise.catch(() => {});
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Connects, or gives up after `waitMs` (start-up should not hang on a Redis that is not there). */
async function connectWithin(
  client: RedisConnection,
  waitMs: number,
  target: string,
  lastError: () => Error | undefined,
): Promise<void> {
  const connecting = client.connect();
  connecting.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), waitMs);
  });
  try {
    const outcome = await Promise.race([connecting, gaveUp]);
    if (outcome === "timeout") {
      client.destroy();
      // Redis's own words (ECONNREFUSED, WRONGPASS …) never contain the password.
      const why = lastError()?.message ?? "no answer";
      throw new MemoryError(
        "unavailable",
        `the redis store at ${target} is unreachable (no connection within ${waitMs} ms: ${why})`,
        { cause: lastError() },
      );
    }
  } catch (err) {
    client.destroy();
    if (err instanceof MemoryError) throw err;
    throw new MemoryError("unavailable", `the redis store at ${target} is unreachable`, {
      cause: err,
    });
  } finally {
    clearTimeout(timer);
  }
}

function backoffMs(attempt: number): number {
  return Math.min(2000, 50 * 2 ** Math.min(attempt, 10)) + Math.random() * 50;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
