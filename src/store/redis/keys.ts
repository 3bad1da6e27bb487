/**
 * The Redis store's key layout. Every key of a namespace starts with the
 * namespace's key base `B` = `<prefix>:{ns-<namespace as base64url>}:`, so
 * they all share one hash tag: an append changes the thread's keys, the
 * namespace's thread index and its event stream in one atomic script, and
 * on Redis Cluster they all hash to one slot (a namespace is the unit of
 * sharding). The namespace is encoded because it may contain braces, and
 * prefixed with "ns-" so an empty namespace still makes a non-empty tag
 * (Redis ignores `{}`). Scripts that derive per-thread keys from the base
 * (CLEAR_CHUNK, EXPIRE_DUE) stay in that slot for the same reason.
 *
 * Per thread:
 * - `B t:<thread>` hash: the thread: thread_id, incarnation, strategy (JSON),
 *   strategy_key (core/strategy.ts strategyKey, what decideAppend compares),
 *   kind, max_stored, exclude_system ("1"/"0"), last_seq,
 *   summarized_through_seq, summary, summary_time, create_time, update_time,
 *   bytes (of its stored messages), counted ("1": counted in `B usage`;
 *   threads written before quotas are not, until their next Add), labels
 *   (JSON), ttl_ms and expire_at; numbers as decimal text;
 * - `B m:<thread>` list: the stored messages, oldest first, each
 *   `"<seq> <bytes> <json>"` (bytes: quota.ts messageBytes; entries written
 *   before quotas are `"<seq> <json>"`) where the JSON starts with
 *   `{"role":"<role>",` (codec.ts writes `role` first, so a script can tell
 *   a tool result without parsing JSON);
 * - `B r:<thread>` hash request_id -> `"<time>\n<request hash>\n<result>"`, and
 *   `B ri:<thread>` zset request_id by time (idempotency retention);
 * - `B l:<thread>` string: the fold lease's fencing token, with a TTL.
 *
 * A thread that forked or was forked from also has, in its hash, `parent`
 * (JSON of its ForkOrigin, on a fork) and `lineage` (JSON array of its
 * frozen segment entries `[segment, low, through, first]`, oldest first:
 * it holds seqs low..through of segment `segment`, whose list starts at
 * seq `first`); its list `B m:<thread>` is then its owned head, holding
 * the seqs after the last entry's through (core/lineage.ts). A thread
 * without `lineage` has today's layout: its list is all it stores.
 * Frozen segment `x`: the list `B s:<x>` (a former owned head, RENAMEd
 * there when a Fork froze it) and the hash `B sg:<x>` (refs: the lineage
 * entries naming it; count, bytes: what it holds in the usage), both
 * UNLINKed when refs reaches 0. `B seg-seq` numbers the segments, so no id
 * is ever used twice; `B fk:<thread>` is the zset of the ids of the forks
 * of that thread id, scored 0 (a fork leaves it when it is removed).
 *
 * Per namespace:
 * - `B usage` hash: threads, messages, bytes (the quotas);
 * - `B threads` zset of thread ids, all scored 0 (so ZRANGE is byte order);
 * - `B expiry` zset of thread ids by expire_at (the TTL sweep);
 * - `B lb:<key>=<value>` zset of the ids carrying that label, scored 0;
 * - `B log` stream: the event log, entry ids "0-1", "0-2" … (the
 *   namespace's own count); `B lease-seq` the fencing counter. (`B events`
 *   was the log of earlier versions, with ids from the clock: deleted by
 *   log_event when `B log` is first written.)
 *
 * Per deployment (key prefix): `<prefix>:resume-token-key` (the
 * incarnation, incarnation.ts), `<prefix>:ttl-namespaces` (the set of
 * namespaces that have had a thread with a ttl: what the sweep walks;
 * written before the Add that sets the ttl, so no expiring thread is ever
 * missed) and `<prefix>:replication-fence` (a counter each WAIT increments
 * first, replica-confirmation.ts).
 *
 * On Redis Cluster (redis-cluster://) the deployment keys live in slots of
 * their own, so no script reads one beside a namespace's keys (that would
 * be CROSSSLOT). Two keys move into the namespace's slot instead:
 * - `B replication-fence`: the fence of a WAIT after a write to this
 *   namespace, so the INCR runs on the primary that took the write
 *   (`{<prefix>:ttl-namespaces}:replication-fence` likewise for the sweep's set);
 * and the incarnation gets a copy in every hash slot,
 * `<prefix>:{<tag of slot s>}:resume-token-key` (key-slot.ts slotTags: a
 * tag that hashes to slot s), which READ_EVENTS and HEAD read in place of
 * the deployment key, in the namespace's slot. A slot's copy is made by
 * the first head read of a namespace in it, after the slot is recorded in
 * `{<prefix>:resume-token-key}:slot-copies`; a primary that restarts
 * empty loses the copies of its slots with their data, and the first read
 * that misses a recorded one rotates the incarnation (incarnation.ts), so
 * no token of the lost history resumes into the new one.
 *
 * Namespace shards (`--redis-namespace-shards N`, N > 1; keyLayout's
 * `shards`): a namespace is split into N shards by thread id (shardIndex),
 * each with its own key base `B_k` =
 * `<prefix>:{<tag of slot (s + k * 16384 / N) mod 16384>}:ns-<base64url>.<k>:`
 * (shardBases; s the slot of `ns-<base64url>`) and under it every key
 * above, per thread and per namespace alike: each shard has its own thread
 * index, usage, expiry set, labels, forks index, segments and event log,
 * so every script still runs in one slot. What spans a namespace (listing,
 * Clear all, the sweep, Watch, quotas) visits every shard (README "Namespace
 * shards"). `<prefix>:namespace-shards` records N (index.ts
 * checkNamespaceShards).
 */

import { crc16, keySlot, SLOTS, slotTags } from "./key-slot.js";

export const DEFAULT_KEY_PREFIX = "wm";

/** The keys of one namespace, and of its threads. */
export interface NamespaceKeys {
  readonly base: string;
  /** Which shard of its namespace these keys are (0 when it is one shard). */
  readonly shard: number;
  /**
   * The key that holds the incarnation for this namespace's scripts: the
   * deployment's key on one node, its slot's marker on a cluster (see above).
   */
  readonly incarnationMarker: string;
  /** The counter a WAIT for this namespace's writes increments first (on its primary). */
  readonly replicationFence: string;
  readonly threads: string;
  readonly events: string;
  readonly usage: string;
  readonly leaseSeq: string;
  readonly expiry: string;
  thread(id: string): string;
  messages(id: string): string;
  requests(id: string): string;
  requestTimes(id: string): string;
  lease(id: string): string;
  label(key: string, value: string): string;
  /** The zset of the ids of the forks of thread `id`. */
  forks(id: string): string;
  /** The list of frozen segment `id`. */
  segment(id: string): string;
}

/** The keys of one deployment. */
export interface KeyLayout {
  /** Whether the keys are laid out for Redis Cluster (per-slot fences and epochs). */
  readonly clustered: boolean;
  readonly incarnation: string;
  readonly ttlNamespaces: string;
  /** The fence of a WAIT after a write of `ttlNamespaces` (in its slot on a cluster). */
  readonly ttlFence: string;
  /**
   * Redis Cluster: the set of the slot copies of the incarnation ever made
   * (in the incarnation key's slot, so lost with it); undefined on one node.
   */
  readonly markerRegistry: string | undefined;
  /**
   * The shards each namespace is split into (`--redis-namespace-shards`,
   * recorded in `namespaceShards` by the first start); 1: a namespace is one
   * slot, today's layout.
   */
  readonly shards: number;
  /** The record of `shards` (a string, in a slot of its own). */
  readonly namespaceShards: string;
  /** The keys of a namespace that is one shard (shards = 1); throws otherwise. */
  namespace(namespace: string): NamespaceKeys;
  /** The keys of the shard that holds thread `threadId` of `namespace` (shardIndex). */
  forThread(namespace: string, threadId: string): NamespaceKeys;
  /** The keys of every shard of `namespace`, shard 0 first. */
  shardsOf(namespace: string): readonly NamespaceKeys[];
}

/**
 * The layout under `prefix`, which must be non-empty and brace-free (its
 * hash tag must come first); `clustered` for Redis Cluster; `shards` the
 * shards per namespace (1 to MAX_NAMESPACE_SHARDS).
 */
export function keyLayout(prefix: string, clustered = false, shards = 1): KeyLayout {
  if (prefix === "" || /[{}]/.test(prefix)) {
    throw new Error("redis store: the key prefix must be non-empty and contain no braces");
  }
  if (!Number.isInteger(shards) || shards < 1 || shards > MAX_NAMESPACE_SHARDS) {
    throw new Error(`redis store: shards per namespace must be 1 to ${MAX_NAMESPACE_SHARDS}`);
  }
  const fence = `${prefix}:replication-fence`;
  const incarnation = `${prefix}:resume-token-key`;
  const marker = (tag: string) => `${prefix}:{${tag}}:resume-token-key`;
  const keysAt = (base: string, shard: number) =>
    clustered
      ? namespaceKeys(
          base,
          shard,
          marker(slotTags()[keySlot(base)] ?? ""),
          `${base}replication-fence`,
        )
      : namespaceKeys(base, shard, incarnation, fence);
  // Recent namespaces' keys: every call needs them, and making them costs a
  // base64 of the namespace and an object of a dozen strings and closures
  // (on one shard, about 1 KB of garbage per Add when made per call).
  const recent = new Map<string, readonly NamespaceKeys[]>();
  const shardsOf = (namespace: string): readonly NamespaceKeys[] => {
    let found = recent.get(namespace);
    if (found === undefined) {
      found =
        shards === 1
          ? [keysAt(`${prefix}:{${namespaceTag(namespace)}}:`, 0)]
          : shardBases(prefix, namespace, shards).map(keysAt);
      if (recent.size >= RECENT_NAMESPACES) recent.clear();
      recent.set(namespace, found);
    }
    return found;
  };
  const one = (namespace: string) => shardsOf(namespace)[0] as NamespaceKeys;
  return {
    clustered,
    incarnation,
    ttlNamespaces: `${prefix}:ttl-namespaces`,
    // `{K}x` hashes like the key K when K has no braces: the same slot.
    ttlFence: clustered ? `{${prefix}:ttl-namespaces}:replication-fence` : fence,
    markerRegistry: clustered ? `{${incarnation}}:slot-copies` : undefined,
    shards,
    namespaceShards: `${prefix}:namespace-shards`,
    namespace: (namespace) => {
      if (shards !== 1) throw new Error("redis store: a sharded namespace has no single key base");
      return one(namespace);
    },
    forThread: (namespace, threadId) =>
      shards === 1
        ? one(namespace)
        : (shardsOf(namespace)[shardIndex(threadId, shards)] as NamespaceKeys),
    shardsOf,
  };
}

/** Most shards a namespace may be split into. */
export const MAX_NAMESPACE_SHARDS = 64;
const RECENT_NAMESPACES = 4096;

/** The hash tag of a namespace that is one shard: `ns-<base64url>` (never empty). */
function namespaceTag(namespace: string): string {
  return `ns-${Buffer.from(namespace, "utf8").toString("base64url")}`;
}

/**
 * The shard of a thread: CRC16 of its id (UTF-8, key-slot.ts's CRC, not
 * its hash-tag rule) mod the shard count. Every key of a thread, its fold
 * lease and its idempotency records are in its shard.
 */
export function shardIndex(threadId: string, shards: number): number {
  return shards === 1 ? 0 : crc16(Buffer.from(threadId, "utf8")) % shards;
}

/**
 * The key bases of a sharded namespace: shard k sits in slot (s + k *
 * 16384 / N) mod 16384, s the slot of the namespace's own tag, so the N
 * shards are spread evenly over the slot space (and so over the primaries
 * of a cluster whose slots are split in even ranges: with N = the number of
 * primaries, one shard each). The slot's tag (key-slot.ts slotTags) comes
 * first; the namespace and the shard follow it, so namespaces whose shards
 * share a slot keep apart: `<prefix>:{<slot tag>}:ns-<base64url>.<k>:`.
 */
function shardBases(prefix: string, namespace: string, shards: number): string[] {
  const tag = namespaceTag(namespace);
  const first = keySlot(tag);
  const tags = slotTags();
  return Array.from({ length: shards }, (_, k) => {
    const slot = (first + Math.floor((k * SLOTS) / shards)) % SLOTS;
    return `${prefix}:{${tags[slot] ?? ""}}:${tag}.${k}:`;
  });
}

function namespaceKeys(
  base: string,
  shard: number,
  incarnationMarker: string,
  fence: string,
): NamespaceKeys {
  return {
    base,
    shard,
    incarnationMarker,
    replicationFence: fence,
    threads: `${base}threads`,
    events: `${base}log`,
    usage: `${base}usage`,
    leaseSeq: `${base}lease-seq`,
    expiry: `${base}expiry`,
    thread: (id) => `${base}t:${id}`,
    messages: (id) => `${base}m:${id}`,
    requests: (id) => `${base}r:${id}`,
    requestTimes: (id) => `${base}ri:${id}`,
    lease: (id) => `${base}l:${id}`,
    label: (key, value) => `${base}lb:${key}=${value}`,
    forks: (id) => `${base}fk:${id}`,
    segment: (id) => `${base}s:${id}`,
  };
}
