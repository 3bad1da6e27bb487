import { createClient } from "redis";
import { afterEach, describe, expect, it } from "vitest";
import { Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { CallFailed, type Driver, grpcDriver } from "../integration/drivers.js";
import { ask, QUICK_REPLICATION } from "../support/redis-replication.js";
import {
  MASTER_NAME,
  type SentinelDeployment,
  startSentinelDeployment,
} from "../support/redis-sentinel.js";
import type { RedisServer } from "../support/redis-server.js";
import { type Replica, startReplica } from "../support/replica-process.js";

/**
 * Fork, Rewind and Clear (and Adds on forks) on the Redis store across
 * Sentinel failovers, with real processes: a primary, one replica and three
 * sentinels; the compiled server on `redis+sentinel://…` with
 * `--redis-min-replicas 1`; six writers over gRPC, each on a family of
 * threads of its own (roots, forks of them, forks of forks), every call
 * with a request_id and retried with it after UNAVAILABLE or
 * DEADLINE_EXCEEDED until it answers. The primary is killed with SIGKILL
 * (the sentinels promote the replica; the old primary comes back empty as
 * its replica), twice, then a graceful SENTINEL FAILOVER. Each writer keeps
 * a ledger of what was acknowledged and what each of its threads must hold.
 *
 * Afterwards, through the service: every acknowledged Add still owed (not
 * taken back by a later acknowledged Rewind or Clear) is there once, at its
 * seq; every thread reads exactly its ledger (contiguous seqs up to
 * last_seq, the messages it shares with its parent included), its parent
 * and fork point (Get, ListThreads forks_of). And on the last primary's
 * keys (auditKeys, itself checked on a corrupted copy): each frozen
 * segment's refs equal the lineage entries naming it, no orphan segment or
 * list, the usage equals what is stored, one thread_forked per
 * acknowledged Fork.
 */

const WRITERS = 6;
/** Operations acknowledged before the first fault, and after each. */
const BEFORE = 250;
const BETWEEN = 150;
const CALL_DEADLINE_MS = 5000;
/** A call still failing after this long fails the test (the service never came back). */
const GIVE_UP_MS = 45_000;
const MAX_LIVE = 10;
const STRATEGY = { kind: { case: "buffer" as const, value: {} }, maxStored: 10_000 };
const RETRYABLE = new Set(["UNAVAILABLE", "DEADLINE_EXCEEDED"]);

let deployment: SentinelDeployment | undefined;
let server: Replica | undefined;
let client: Driver | undefined;
afterEach(async () => {
  client?.close();
  client = undefined;
  await server?.kill();
  server = undefined;
  await deployment?.stop();
  deployment = undefined;
}, 60_000);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What a thread must hold: contents[i] is seq i + 1. */
interface ThreadLedger {
  id: string;
  contents: string[];
  parent: { threadId: string; atSeq: number } | undefined;
  live: boolean;
}

interface AckedAdd {
  threadId: string;
  firstSeq: number;
  contents: string[];
}

/** Everything the writers had acknowledged, and what went wrong on the way. */
class Ledger {
  readonly threads = new Map<string, ThreadLedger>();
  readonly adds: AckedAdd[] = [];
  readonly forks: string[] = [];
  /** Adds acknowledged on forks (and forks of forks). */
  addsOnForks = 0;
  rewinds = 0;
  clears = 0;
  /** Definite refusals the ledger allows (a Fork past 63 lineage entries). */
  refusals = 0;
  /** Attempts that failed with a retryable code and were retried. */
  retries = 0;
  /** Calls answered only after one or more retries. */
  readonly retried = new Map<string, number>();
  readonly violations: string[] = [];
  acked(): number {
    return this.adds.length + this.forks.length + this.rewinds + this.clears;
  }
}

/** A small seeded generator (mulberry32), so a failing run's choices can be told. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Outcome<T> = { ok: T; attempts: number } | { err: CallFailed; attempts: number };

/** One call, retried with the same request (request_id included) until it answers definitely. */
async function definite<T>(
  ledger: Ledger,
  kind: string,
  call: () => Promise<T>,
): Promise<Outcome<T>> {
  const began = Date.now();
  for (let attempts = 1; ; attempts++) {
    try {
      const ok = await call();
      if (attempts > 1) ledger.retried.set(kind, (ledger.retried.get(kind) ?? 0) + 1);
      return { ok, attempts };
    } catch (err) {
      if (!(err instanceof CallFailed)) throw err;
      if (!RETRYABLE.has(err.code)) return { err, attempts };
      if (Date.now() - began > GIVE_UP_MS) {
        throw new Error(`still failing after ${GIVE_UP_MS} ms: ${err.message}`);
      }
      ledger.retries++;
      await sleep(Math.min(200, 20 * attempts));
    }
  }
}

interface Writers {
  readonly ledger: Ledger;
  waitForAcked(count: number, timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

function startWriters(driver: Driver, seed: number): Writers {
  const ledger = new Ledger();
  let stopping = false;

  async function writer(w: number): Promise<void> {
    const rng = random(seed + w);
    const pick = <T>(xs: T[]): T => xs[Math.floor(rng() * xs.length)] as T;
    const mine: ThreadLedger[] = [];
    let n = 0;
    const fail = (what: string) => {
      ledger.violations.push(`writer ${w}: ${what}`);
      throw new Error(what);
    };

    const add = async (t: ThreadLedger, count: number, strategy: boolean) => {
      const requestId = `w${w}-${n++}`;
      const contents = Array.from({ length: count }, (_, i) => `${requestId}.${i}`);
      const out = await definite(ledger, "Add", () =>
        driver.add(
          {
            threadId: t.id,
            requestId,
            messages: contents.map((content) => ({ role: Role.USER, content })),
            ...(strategy ? { strategy: STRATEGY } : {}),
          },
          { timeoutMs: CALL_DEADLINE_MS },
        ),
      );
      if ("err" in out) return fail(`Add ${requestId} to ${t.id}: ${out.err.message}`);
      const first = t.contents.length + 1;
      if (Number(out.ok.firstSeq) !== first || Number(out.ok.lastSeq) !== first + count - 1) {
        fail(
          `Add ${requestId} to ${t.id} (last_seq ${t.contents.length}) acknowledged at ${out.ok.firstSeq}..${out.ok.lastSeq}`,
        );
      }
      t.contents.push(...contents);
      ledger.adds.push({ threadId: t.id, firstSeq: first, contents });
      if (t.parent !== undefined) ledger.addsOnForks++;
    };

    const fork = async (p: ThreadLedger) => {
      const requestId = `w${w}-${n++}`;
      const id = `w${w}-f${n}`;
      const last = p.contents.length;
      // At the end (a long head is frozen, a short one copied), near it, or anywhere.
      const r = rng();
      const atSeq =
        r < 0.4
          ? undefined
          : r < 0.7
            ? Math.max(0, last - Math.floor(rng() * 4))
            : Math.floor(rng() * (last + 1));
      const out = await definite(ledger, "Fork", () =>
        driver.fork(
          {
            threadId: p.id,
            newThreadId: id,
            requestId,
            ...(atSeq === undefined ? {} : { atSeq: BigInt(atSeq) }),
          },
          { timeoutMs: CALL_DEADLINE_MS },
        ),
      );
      if ("err" in out) {
        // Past 63 lineage entries (docs/forks.md 1.3): refused, nothing written.
        if (out.err.code === "FAILED_PRECONDITION" && /segments/.test(out.err.message)) {
          ledger.refusals++;
          return;
        }
        return fail(`Fork ${requestId} of ${p.id} at ${atSeq}: ${out.err.message}`);
      }
      const at = atSeq ?? last;
      const got = out.ok.thread;
      if (
        Number(got?.lastSeq) !== at ||
        got?.parent?.threadId !== p.id ||
        Number(got.parent.atSeq) !== at ||
        out.ok.sharedCount !== at
      ) {
        fail(
          `Fork ${requestId} of ${p.id} at ${at} acknowledged as last_seq ${got?.lastSeq}, parent ${got?.parent?.threadId}@${got?.parent?.atSeq}, shared ${out.ok.sharedCount}`,
        );
      }
      const t: ThreadLedger = {
        id,
        contents: p.contents.slice(0, at),
        parent: { threadId: p.id, atSeq: at },
        live: true,
      };
      ledger.threads.set(id, t);
      mine.push(t);
      ledger.forks.push(id);
    };

    const rewind = async (t: ThreadLedger) => {
      const requestId = `w${w}-${n++}`;
      const last = t.contents.length;
      // Mostly the last few; sometimes deep, below fork points and frozen segments.
      const toSeq =
        rng() < 0.6 ? Math.max(0, last - 1 - Math.floor(rng() * 3)) : Math.floor(rng() * last);
      const out = await definite(ledger, "Rewind", () =>
        driver.rewind(
          { threadId: t.id, toSeq: BigInt(toSeq), expectedLastSeq: BigInt(last), requestId },
          { timeoutMs: CALL_DEADLINE_MS },
        ),
      );
      if ("err" in out)
        return fail(`Rewind ${requestId} of ${t.id} to ${toSeq}: ${out.err.message}`);
      if (Number(out.ok.thread?.lastSeq) !== toSeq || out.ok.removedCount !== last - toSeq) {
        fail(
          `Rewind ${requestId} of ${t.id} from ${last} to ${toSeq} acknowledged as last_seq ${out.ok.thread?.lastSeq}, removed ${out.ok.removedCount}`,
        );
      }
      t.contents.length = toSeq;
      ledger.rewinds++;
    };

    const clear = async (t: ThreadLedger) => {
      const out = await definite(ledger, "Clear", () =>
        driver.clear({ threadId: t.id }, { timeoutMs: CALL_DEADLINE_MS }),
      );
      if ("err" in out) return fail(`Clear of ${t.id}: ${out.err.message}`);
      // A retry after the first attempt cleared it finds nothing to clear.
      if (out.ok.clearedThreads !== 1 && !(out.attempts > 1 && out.ok.clearedThreads === 0)) {
        fail(`Clear of ${t.id} cleared ${out.ok.clearedThreads} threads`);
      }
      t.live = false;
      mine.splice(mine.indexOf(t), 1);
      ledger.clears++;
    };

    let roots = 0;
    while (!stopping) {
      if (mine.length < 2) {
        const t: ThreadLedger = {
          id: `w${w}-r${roots++}`,
          contents: [],
          parent: undefined,
          live: true,
        };
        ledger.threads.set(t.id, t);
        mine.push(t);
        // Long enough that a Fork at the end freezes the head (more than 128 messages).
        await add(t, 130 + Math.floor(rng() * 60), true);
        continue;
      }
      const r = rng();
      const t = pick(mine);
      if (r < 0.45)
        await add(
          t,
          rng() < 0.25 ? 100 + Math.floor(rng() * 120) : 1 + Math.floor(rng() * 3),
          false,
        );
      else if (r < 0.68 && mine.length < MAX_LIVE) await fork(t);
      else if (r < 0.88 && t.contents.length > 0) await rewind(t);
      else if (r >= 0.88 && mine.length > 3) await clear(t);
      else await add(t, 1, false);
    }
  }

  const done = Promise.all(Array.from({ length: WRITERS }, (_, w) => writer(w)));
  done.catch(() => {});
  return {
    ledger,
    async waitForAcked(count, timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      while (ledger.acked() < count) {
        if (ledger.violations.length > 0) throw new Error(ledger.violations.join("\n"));
        if (Date.now() > deadline) {
          throw new Error(`only ${ledger.acked()} of ${count} operations acknowledged in time`);
        }
        await Promise.race([done, sleep(50)]);
      }
    },
    async stop() {
      stopping = true;
      await done;
    },
  };
}

// ---------------------------------------------------------------- faults

/** The deployment's two servers: [the one the sentinels name primary, the other]. */
async function roles(redis: SentinelDeployment): Promise<[RedisServer, RedisServer]> {
  const port = await redis.primaryPort();
  return port === redis.primary.port
    ? [redis.primary, redis.replica]
    : [redis.replica, redis.primary];
}

/** SIGKILL of the primary; the sentinels promote the replica; the old primary back, empty, as its replica. */
async function killPrimary(redis: SentinelDeployment): Promise<void> {
  const [primary, replica] = await roles(redis);
  await primary.kill();
  await redis.waitForPrimary(replica.port, 40_000);
  await primary.restart([...QUICK_REPLICATION, "--replicaof", "127.0.0.1", String(replica.port)]);
  await redis.waitForReplicaLink(primary, 40_000);
}

/** SENTINEL FAILOVER: the replica promoted, the primary demoted to its replica by the sentinels. */
async function gracefulFailover(redis: SentinelDeployment): Promise<void> {
  const [primary, replica] = await roles(redis);
  const sentinel = redis.sentinelPorts[0] ?? 0;
  // A sentinel refuses while it has no replica it calls good yet; it comes.
  const deadline = Date.now() + 30_000;
  for (;;) {
    const reply = await ask(sentinel, ["SENTINEL", "FAILOVER", MASTER_NAME]).catch(
      (e: unknown) => e,
    );
    if (reply === "OK") break;
    console.log(`SENTINEL FAILOVER: ${String(reply)}`);
    if (Date.now() > deadline) throw new Error(`SENTINEL FAILOVER: ${String(reply)}`);
    await sleep(200);
  }
  await redis.waitForPrimary(replica.port, 40_000);
  await redis.waitForReplicaLink(primary, 40_000);
}

// ---------------------------------------------------------------- the key audit

/** The keys of the one namespace the service wrote (namespace "" without auth), as read. */
interface KeySnapshot {
  base: string;
  /** `B threads`. */
  listed: string[];
  /** `B t:<id>`. */
  threads: Map<string, Record<string, string>>;
  /** `B m:<id>` (the owned heads). */
  heads: Map<string, string[]>;
  /** `B s:<x>`: lengths. */
  segmentLists: Map<string, number>;
  /** `B sg:<x>`. */
  segments: Map<string, Record<string, string>>;
  /** `B fk:<id>`. */
  forkSets: Map<string, string[]>;
  /** Ids having `B r:<id>` or `B ri:<id>`. */
  records: Set<string>;
  usage: Record<string, string>;
  /** thread_forked events per thread id. */
  forkEvents: Map<string, number>;
  firstEventId: string | undefined;
  /** `B seg-seq`: the frozen segments ever made. */
  segmentsMade: number;
}

async function snapshotKeys(port: number): Promise<KeySnapshot> {
  const redis = createClient({ socket: { host: "127.0.0.1", port, reconnectStrategy: false } });
  redis.on("error", () => {});
  await redis.connect();
  try {
    const keys: string[] = [];
    for await (const batch of redis.scanIterator({ MATCH: "wm:*", COUNT: 1000 })) {
      keys.push(...(Array.isArray(batch) ? batch : [batch]));
    }
    const bases = [...new Set(keys.map((k) => /^(wm:\{ns-[^}]*\}:)/.exec(k)?.[1]))].filter(
      (b): b is string => b !== undefined,
    );
    if (bases.length !== 1) throw new Error(`expected one namespace, found ${bases.join(", ")}`);
    const base = bases[0] as string;
    const snap: KeySnapshot = {
      base,
      listed: await redis.zRange(`${base}threads`, 0, -1),
      threads: new Map(),
      heads: new Map(),
      segmentLists: new Map(),
      segments: new Map(),
      forkSets: new Map(),
      records: new Set(),
      usage: await redis.hGetAll(`${base}usage`),
      forkEvents: new Map(),
      firstEventId: undefined,
      segmentsMade: Number(await redis.get(`${base}seg-seq`)),
    };
    for (const key of keys) {
      if (!key.startsWith(base)) continue;
      const rest = key.slice(base.length);
      const m = /^(t|m|s|sg|fk|r|ri):(.*)$/.exec(rest);
      if (m === null) continue;
      const [, kind, id = ""] = m;
      if (kind === "t") snap.threads.set(id, await redis.hGetAll(key));
      else if (kind === "m") snap.heads.set(id, await redis.lRange(key, 0, -1));
      else if (kind === "s") snap.segmentLists.set(id, await redis.lLen(key));
      else if (kind === "sg") snap.segments.set(id, await redis.hGetAll(key));
      else if (kind === "fk") snap.forkSets.set(id, await redis.zRange(key, 0, -1));
      else snap.records.add(id);
    }
    const events = (await redis.xRange(`${base}log`, "-", "+")) ?? [];
    snap.firstEventId = events[0]?.id;
    for (const e of events) {
      if (e.message.type !== "thread_forked") continue;
      const id = e.message.thread_id ?? "";
      snap.forkEvents.set(id, (snap.forkEvents.get(id) ?? 0) + 1);
    }
    return snap;
  } finally {
    redis.destroy();
  }
}

/** What is wrong with the keys (empty: nothing); `forks` are the acknowledged Forks' new ids. */
function auditKeys(s: KeySnapshot, forks: readonly string[]): string[] {
  const problems: string[] = [];
  const listed = new Set(s.listed);
  for (const id of listed) if (!s.threads.has(id)) problems.push(`listed ${id} has no hash`);
  for (const id of s.threads.keys()) if (!listed.has(id)) problems.push(`${id} is not listed`);
  for (const id of s.heads.keys()) if (!s.threads.has(id)) problems.push(`orphan head m:${id}`);
  for (const id of s.records) if (!s.threads.has(id)) problems.push(`orphan requests of ${id}`);

  const named = new Map<string, number>();
  let threads = 0;
  let messages = 0;
  let bytes = 0;
  for (const [id, t] of s.threads) {
    const entries = (t.lineage === undefined ? [] : JSON.parse(t.lineage)) as [
      string,
      number,
      number,
      number,
    ][];
    const head = s.heads.get(id) ?? [];
    const lastSeq = Number(t.last_seq);
    // Entries contiguous, then the head up to last_seq.
    let next = entries[0]?.[1] ?? lastSeq - head.length + 1;
    for (const [segment, low, through, first] of entries) {
      named.set(segment, (named.get(segment) ?? 0) + 1);
      if (low !== next || through < low)
        problems.push(`${id}: entry ${segment} ${low}..${through}`);
      const length = s.segmentLists.get(segment) ?? 0;
      if (low < first || through - first >= length) {
        problems.push(
          `${id}: entry ${segment} ${low}..${through} outside its list (${first}+${length})`,
        );
      }
      next = through + 1;
    }
    if (next + head.length - 1 !== lastSeq) {
      problems.push(
        `${id}: head of ${head.length} from ${next} does not end at last_seq ${lastSeq}`,
      );
    }
    let held = 0;
    head.forEach((entry, i) => {
      const [seq, size] = entry.split(" ");
      if (Number(seq) !== next + i) problems.push(`${id}: head holds seq ${seq} at ${next + i}`);
      held += Number(size);
    });
    if (held !== Number(t.bytes)) problems.push(`${id}: bytes ${t.bytes}, its head holds ${held}`);
    if (t.counted === "1") {
      threads++;
      messages += head.length;
      bytes += Number(t.bytes);
    }
    if (t.parent !== undefined && t.parent !== "") {
      const parent = (JSON.parse(t.parent) as { threadId: string }).threadId;
      if (!(s.forkSets.get(parent) ?? []).includes(id)) problems.push(`${id} not in fk:${parent}`);
    }
  }
  for (const [parent, ids] of s.forkSets) {
    for (const id of ids) {
      const t = s.threads.get(id);
      const origin = t?.parent ? (JSON.parse(t.parent) as { threadId: string }).threadId : "";
      if (origin !== parent) problems.push(`fk:${parent} names ${id}, a fork of "${origin}"`);
    }
  }
  for (const [segment, sg] of s.segments) {
    const refs = Number(sg.refs);
    if (refs !== (named.get(segment) ?? 0)) {
      problems.push(
        `segment ${segment}: refs ${refs}, named by ${named.get(segment) ?? 0} entries`,
      );
    }
    if (!s.segmentLists.has(segment)) problems.push(`segment ${segment} has no list`);
    else if (s.segmentLists.get(segment) !== Number(sg.count)) {
      problems.push(
        `segment ${segment}: count ${sg.count}, list of ${s.segmentLists.get(segment)}`,
      );
    }
    messages += Number(sg.count);
    bytes += Number(sg.bytes);
  }
  for (const segment of named.keys()) {
    if (!s.segments.has(segment)) problems.push(`segment ${segment} is named but has no hash`);
  }
  for (const segment of s.segmentLists.keys()) {
    if (!s.segments.has(segment)) problems.push(`orphan segment list s:${segment}`);
  }
  const used = { threads: s.usage.threads, messages: s.usage.messages, bytes: s.usage.bytes };
  const stored = { threads: String(threads), messages: String(messages), bytes: String(bytes) };
  if (JSON.stringify(used) !== JSON.stringify(stored)) {
    problems.push(`usage ${JSON.stringify(used)}, stored ${JSON.stringify(stored)}`);
  }
  if (s.firstEventId !== "0-1") problems.push(`the event log starts at ${s.firstEventId}`);
  for (const id of forks) {
    if (s.forkEvents.get(id) !== 1) {
      problems.push(`${s.forkEvents.get(id) ?? 0} thread_forked events for ${id}`);
    }
  }
  const events = [...s.forkEvents.values()].reduce((a, b) => a + b, 0);
  if (events !== forks.length)
    problems.push(`${events} thread_forked events, ${forks.length} Forks`);
  return problems;
}

/** A copy of the snapshot with one thing changed. */
function corrupted(s: KeySnapshot, change: (copy: KeySnapshot) => void): KeySnapshot {
  const copy: KeySnapshot = {
    ...s,
    segments: new Map([...s.segments].map(([k, v]) => [k, { ...v }])),
    usage: { ...s.usage },
  };
  change(copy);
  return copy;
}

// ---------------------------------------------------------------- reads through the service

interface ReadCheck {
  /** Acknowledged Adds with a message still owed, and those whose owed messages all read back. */
  owed: number;
  present: number;
  owedMessages: number;
  messages: number;
  problems: string[];
}

async function checkThroughService(driver: Driver, ledger: Ledger): Promise<ReadCheck> {
  const problems: string[] = [];
  const read = new Map<string, Map<number, string>>();
  let messages = 0;
  const call = async <T>(what: string, f: () => Promise<T>): Promise<T> => {
    const out = await definite(ledger, "read", f);
    if ("err" in out) throw new Error(`${what}: ${out.err.message}`);
    return out.ok;
  };
  for (const t of ledger.threads.values()) {
    const out = await definite(ledger, "read", () =>
      driver.get({ threadId: t.id, limit: 0 }, { timeoutMs: CALL_DEADLINE_MS }),
    );
    if ("err" in out) {
      if (!t.live && out.err.code === "NOT_FOUND") continue;
      throw new Error(`Get ${t.id}: ${out.err.message}`);
    }
    const got = out.ok;
    const bySeq = new Map<number, string>();
    const contents: string[] = [];
    for (const m of got.messages) {
      bySeq.set(Number(m.seq), m.content);
      contents.push(m.content);
    }
    read.set(t.id, bySeq);
    if (!t.live) {
      if (got.messages.length > 0)
        problems.push(`cleared ${t.id} reads ${got.messages.length} messages`);
      continue;
    }
    messages += got.messages.length;
    const seqs = got.messages.map((m) => Number(m.seq));
    const lastSeq = Number(got.thread?.lastSeq ?? 0);
    if (lastSeq !== t.contents.length)
      problems.push(`${t.id}: last_seq ${lastSeq}, owed ${t.contents.length}`);
    if (seqs.some((seq, i) => seq !== i + 1)) problems.push(`${t.id}: seqs not contiguous from 1`);
    if (JSON.stringify(contents) !== JSON.stringify(t.contents)) {
      const at = contents.findIndex((c, i) => c !== t.contents[i]);
      problems.push(
        `${t.id}: reads ${contents.length} messages, owed ${t.contents.length}; first difference at seq ${at + 1}`,
      );
    }
    const parent = got.thread?.parent;
    const origin =
      parent === undefined ? undefined : { threadId: parent.threadId, atSeq: Number(parent.atSeq) };
    if (JSON.stringify(origin) !== JSON.stringify(t.parent)) {
      problems.push(
        `${t.id}: parent ${JSON.stringify(origin)}, forked from ${JSON.stringify(t.parent)}`,
      );
    }
  }

  // Every acknowledged Add still owed (some message of it not taken back): at its seq, once.
  const copies = new Map<string, Map<string, number>>();
  for (const [id, bySeq] of read) {
    const n = new Map<string, number>();
    for (const c of bySeq.values()) n.set(c, (n.get(c) ?? 0) + 1);
    copies.set(id, n);
  }
  let owed = 0;
  let present = 0;
  let owedMessages = 0;
  for (const a of ledger.adds) {
    const t = ledger.threads.get(a.threadId);
    let mine = 0;
    let there = 0;
    a.contents.forEach((content, i) => {
      const seq = a.firstSeq + i;
      if (t?.live !== true || t.contents[seq - 1] !== content) return;
      mine++;
      const times = copies.get(a.threadId)?.get(content) ?? 0;
      if (read.get(a.threadId)?.get(seq) === content && times === 1) there++;
      else problems.push(`Add of ${content} to ${a.threadId} at ${seq}: ${times} copies`);
    });
    owedMessages += mine;
    if (mine > 0) owed++;
    if (mine > 0 && there === mine) present++;
  }

  // ListThreads: every thread, and each parent's forks with their fork points.
  const ids: string[] = [];
  let pageToken = "";
  do {
    const page = await call("ListThreads", () =>
      driver.listThreads({ pageSize: 1000, pageToken }, { timeoutMs: CALL_DEADLINE_MS }),
    );
    ids.push(...page.threadIds);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  const live = [...ledger.threads.values()].filter((t) => t.live);
  const sorted = (xs: string[]) => [...xs].sort().join(",");
  if (sorted(ids) !== sorted(live.map((t) => t.id))) {
    problems.push(`ListThreads lists ${ids.length} threads, ${live.length} live`);
  }
  const parents = new Set(live.flatMap((t) => (t.parent === undefined ? [] : [t.parent.threadId])));
  for (const p of parents) {
    const page = await call(`ListThreads forks_of ${p}`, () =>
      driver.listThreads(
        { pageSize: 1000, forksOf: p, includeThreads: true },
        { timeoutMs: CALL_DEADLINE_MS },
      ),
    );
    const listed = page.threads.map(
      (t) => `${t.threadId}@${t.parent?.threadId}:${t.parent?.atSeq}`,
    );
    const expected = live
      .filter((t) => t.parent?.threadId === p)
      .map((t) => `${t.id}@${p}:${t.parent?.atSeq}`);
    if (sorted(listed) !== sorted(expected)) {
      problems.push(`forks_of ${p}: ${sorted(listed)}, expected ${sorted(expected)}`);
    }
  }
  return { owed, present, owedMessages, messages, problems };
}

// ---------------------------------------------------------------- the test

describe("Redis Sentinel failover under Forks, Rewinds and Clears", () => {
  it("loses no acknowledged Fork, Rewind, Clear or Add, and leaves the segments' counts, usage and events consistent", async () => {
    const started = Date.now();
    const redis = await startSentinelDeployment();
    deployment = redis;
    server = await startReplica([
      "--store",
      redis.url,
      "--redis-min-replicas",
      "1",
      "--redis-replica-wait-ms",
      "2000",
      "--event-retention",
      "1000000",
    ]);
    client = grpcDriver(server.grpcPort);
    const seed = Date.now() % 1_000_000;
    const run = startWriters(client, seed);
    const faults: string[] = [];
    try {
      await run.waitForAcked(BEFORE);
      for (const [name, fault] of [
        ["kill -9", killPrimary],
        ["kill -9", killPrimary],
        ["SENTINEL FAILOVER", gracefulFailover],
      ] as const) {
        const began = Date.now();
        await fault(redis);
        faults.push(`${name} ${((Date.now() - began) / 1000).toFixed(1)} s`);
        await run.waitForAcked(run.ledger.acked() + BETWEEN);
      }
    } finally {
      await run.stop().catch(() => {});
    }
    const ledger = run.ledger;
    expect(ledger.violations).toEqual([]);

    const reads = await checkThroughService(client, ledger);
    const [primary] = await roles(redis);
    const snap = await snapshotKeys(primary.port);
    const problems = auditKeys(snap, ledger.forks);

    // The audit sees a count that is off, and a usage that is.
    const segment = [...snap.segments.keys()][0];
    expect(segment, "no frozen segment was made: the run shares nothing").toBeDefined();
    const off = corrupted(snap, (c) => {
      const sg = c.segments.get(segment ?? "");
      if (sg !== undefined) sg.refs = String(Number(sg.refs) + 1);
    });
    expect(auditKeys(off, ledger.forks).join("\n")).toContain(`segment ${segment}: refs`);
    const usage = corrupted(snap, (c) => {
      c.usage.messages = String(Number(c.usage.messages) - 1);
    });
    expect(auditKeys(usage, ledger.forks).join("\n")).toContain("usage");

    const live = [...ledger.threads.values()].filter((t) => t.live).length;
    console.log(
      `redis fork failover (seed ${seed}; ${faults.join(", ")}): acked ${ledger.adds.length} Adds (${ledger.addsOnForks} on forks), ${ledger.forks.length} Forks, ${ledger.rewinds} Rewinds, ${ledger.clears} Clears (${ledger.refusals} Forks refused, answered after ${ledger.retries} retries: ${[...ledger.retried].map(([k, v]) => `${v} ${k}`).join(", ")}); ${reads.owed} Adds owed, ${reads.present} present (${reads.owedMessages} messages); ${reads.messages} messages read in ${live} live threads; ${snap.segments.size} frozen segments (${snap.segmentsMade} made), ${snap.threads.size} threads, ${[...snap.forkEvents.values()].reduce((a, b) => a + b, 0)} fork events; ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
    expect(reads.problems).toEqual([]);
    expect(problems).toEqual([]);
    expect(reads.present).toBe(reads.owed);
    expect(ledger.retries).toBeGreaterThan(0);
  }, 180_000);
});
