import fc from "fast-check";
import { afterEach, beforeEach, expect, it } from "vitest";
import { MemoryError } from "../../../src/core/errors.js";
import type { ChatMessage, StoredMessage, Strategy, ThreadState } from "../../../src/core/types.js";
import type {
  ForkCommand,
  ImportThreadCommand,
  RewindCommand,
  Store,
  StoreLimits,
  ThreadSnapshot,
} from "../../../src/store/store.js";
import { appendCommands, summary, user, window20 } from "../fixtures.js";

/**
 * What the contract suites share: the backend they run against, a fresh
 * store per case, commands, expectations and the property tests' inputs.
 * Nothing here knows a backend.
 */

/** One backend the contract suites run against (test/store/contract/backends.ts lists them). */
export interface ContractBackend {
  readonly name: string;
  /** Starts what its stores need (a server, a directory), once before its suites. */
  start(): Promise<void>;
  /** Stops it, once after its suites, when every store it opened is closed. */
  stop(): Promise<void>;
  /** A fresh, empty store with the limits a case needs, sharing nothing with any other. */
  open(limits: Partial<StoreLimits>): Promise<Store>;
  /**
   * Set for a Redis store whose namespaces are split into this many shards
   * (store/redis/keys.ts), where the contract says less: each shard
   * enforces its share of a namespace quota (its cases are in
   * test/store/redis-namespace-shards.test.ts instead), events of threads
   * in different shards are ordered by time only, and subscribers' events
   * carry no cursor.
   */
  readonly namespaceShards?: number;
}

/**
 * `it` for a case of whole-namespace quotas; on a backend that enforces
 * them per shard (namespaceShards) the case is not registered: its share
 * rule has cases of its own (test/store/redis-namespace-shards.test.ts).
 */
export function quotaCase(backend: ContractBackend): typeof it {
  return backend.namespaceShards === undefined ? it : ((() => {}) as unknown as typeof it);
}

/**
 * A backend whose stores live on one server it starts (`startServer`) before
 * its suites and stops after them; `open` makes each store on it.
 */
export function serverBackend<S extends { stop(): Promise<void> }>(
  name: string,
  startServer: () => Promise<S>,
  open: (server: S, limits: Partial<StoreLimits>) => Promise<Store>,
): ContractBackend {
  let server: S | undefined;
  return {
    name,
    start: async () => {
      server = await startServer();
    },
    stop: async () => {
      await server?.stop();
      server = undefined;
    },
    open: (limits) => {
      if (server === undefined)
        throw new Error(`${name}: a store opened before the server started`);
      return open(server, limits);
    },
  };
}

/**
 * The store of the running case: a fresh, empty one from `backend` opened
 * before every case and closed after it. What this returns forwards each
 * call to it, so a suite's cases share one name for a store they never share.
 */
export function storeOfEachCase(backend: ContractBackend): Store {
  let current: Store | undefined;
  beforeEach(async () => {
    current = await backend.open({});
  });
  afterEach(async () => {
    await current?.close();
    current = undefined;
  });
  return new Proxy({} as Store, {
    get(_, method) {
      if (current === undefined) throw new Error(`${backend.name}: no store outside a case`);
      const value: unknown = Reflect.get(current, method);
      return typeof value === "function" ? value.bind(current) : value;
    },
  });
}

/** An Add of one user message "a" to thread "t" of namespace "ns", changed by `over`. */
export const cmd = appendCommands(window20);

/** A Rewind of thread "t" of namespace "ns" to `toSeq` at time 2000, changed by `over`. */
export function rewindCmd(toSeq: number, over: Partial<RewindCommand> = {}): RewindCommand {
  return {
    namespace: "ns",
    threadId: "t",
    toSeq,
    expectedLastSeq: undefined,
    requestId: "",
    requestHash: "",
    now: 2000,
    ...over,
  };
}

/**
 * A Fork of thread "t" of namespace "ns" into `newThreadId` at its last seq
 * at time 2000, inheriting everything, changed by `over`.
 */
export function forkCmd(newThreadId = "f", over: Partial<ForkCommand> = {}): ForkCommand {
  return {
    namespace: "ns",
    threadId: "t",
    newThreadId,
    atSeq: undefined,
    expectedLastSeq: undefined,
    strategy: undefined,
    labels: undefined,
    ttlMs: undefined,
    requestId: "",
    requestHash: "",
    now: 2000,
    ...over,
  };
}

/** Expects `p` to be refused with a MemoryError of `code`, and returns it. */
export async function rejects(p: Promise<unknown>, code: string): Promise<MemoryError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(MemoryError);
    expect((err as MemoryError).code).toBe(code);
    return err as MemoryError;
  }
  throw new Error(`expected a ${code} error`);
}

/** Expects `p` to be refused with `code`, naming `field` (undefined: none). */
export async function refused(
  p: Promise<unknown>,
  code: string,
  field: string | undefined,
): Promise<void> {
  const err = await rejects(p, code);
  expect(err.field).toBe(field);
}

export async function waitFor(cond: () => boolean, ms = 2000): Promise<void> {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Messages "1" … "n". */
export const numbered = (n: number) => Array.from({ length: n }, (_, i) => user(String(i + 1)));

export const seqsOf = (snap: ThreadSnapshot | undefined) => snap?.messages.map((m) => m.seq);

/**
 * Folds thread `threadId` of "ns" from its summarized_through_seq through
 * `throughSeq` under a lease of its own; the thread after the commit, or
 * undefined when there is no such thread, the lease is held or the commit
 * was refused.
 */
export async function tryFold(
  store: Store,
  threadId: string,
  throughSeq: number,
): Promise<ThreadState | undefined> {
  const thread = await store.getThread("ns", threadId);
  const token = await store.acquireFoldLease("ns", threadId, 60_000);
  if (thread === undefined || token === undefined) return undefined;
  const folded = await store.commitSummary({
    namespace: "ns",
    threadId,
    incarnation: thread.incarnation,
    leaseToken: token,
    fromSeq: thread.summarizedThroughSeq,
    throughSeq,
    summary: `through ${throughSeq}`,
    foldedCount: throughSeq - thread.summarizedThroughSeq,
    now: 1500,
  });
  await store.releaseFoldLease("ns", threadId, token);
  return folded;
}

/** tryFold, for a fold that must commit. */
export async function fold(
  store: Store,
  threadId: string,
  throughSeq: number,
): Promise<ThreadState> {
  const folded = await tryFold(store, threadId, throughSeq);
  if (folded === undefined) throw new Error("the fold did not commit");
  return folded;
}

/** Stored messages with seqs from..to, each with every optional field on one of them. */
export function storedRange(from: number, to: number, time: number): StoredMessage[] {
  const out: StoredMessage[] = [];
  for (let seq = from; seq <= to; seq++) {
    out.push(
      seq === from + 1
        ? {
            role: "assistant",
            content: "",
            name: "bot",
            toolCalls: [{ id: "c1", name: "lookup", arguments: '{"q":"x"}' }],
            metadata: { k: "v" },
            seq,
            createTime: time + seq,
          }
        : seq === from + 2
          ? { role: "tool", content: "found é", toolCallId: "c1", seq, createTime: time + seq }
          : { role: "user", content: `m${seq}`, seq, createTime: time + seq },
    );
  }
  return out;
}

/** Thread "imp": a summary thread folded through 5, holding seqs 5..7, max_stored 3. */
export function importCommand(over: Partial<ImportThreadCommand> = {}): ImportThreadCommand {
  return {
    namespace: "ns",
    threadId: "imp",
    strategy: { ...summary, maxStored: 3 },
    lastSeq: 7,
    summarizedThroughSeq: 5,
    summary: "earlier talk",
    summaryTime: 400,
    createTime: 100,
    updateTime: 500,
    messages: storedRange(5, 7, 200),
    now: 9000,
    ...over,
  };
}

/** Messages of one Add: users, systems, assistants each followed by their 0-3 tool results, orphans. */
const addArb: fc.Arbitrary<ChatMessage[]> = fc
  .array(
    fc.oneof(
      { arbitrary: fc.constant(-1), weight: 3 },
      { arbitrary: fc.constant(-2), weight: 1 },
      { arbitrary: fc.constant(-3), weight: 1 },
      { arbitrary: fc.integer({ min: 0, max: 3 }), weight: 4 },
    ),
    { maxLength: 14 },
  )
  .map((units) => {
    const out: ChatMessage[] = [];
    for (const [i, u] of units.entries()) {
      if (u === -1) out.push({ role: "user", content: `u${i}` });
      else if (u === -2) out.push({ role: "system", content: `s${i}` });
      else if (u === -3) out.push({ role: "tool", content: `orphan${i}`, toolCallId: `gone${i}` });
      else {
        const ids = Array.from({ length: u }, (_, k) => `c${i}-${k}`);
        const toolCalls = ids.map((id) => ({ id, name: "f", arguments: "{}" }));
        out.push({ role: "assistant", content: `a${i}`, ...(u > 0 ? { toolCalls } : {}) });
        for (const id of ids) out.push({ role: "tool", content: `r${id}`, toolCallId: id });
      }
    }
    return out;
  });

const strategyArb: fc.Arbitrary<Strategy> = fc
  .record({
    kind: fc.constantFrom("buffer", "window", "summary"),
    size: fc.integer({ min: 0, max: 8 }),
    excludeSystem: fc.boolean(),
    maxStored: fc.integer({ min: 4, max: 80 }),
  })
  .map(({ kind, size, excludeSystem, maxStored }): Strategy => {
    switch (kind) {
      case "buffer":
        return { kind, maxMessages: size, excludeSystem, maxStored };
      case "window":
        return { kind, window: Math.max(1, size), excludeSystem, maxStored };
      default:
        return { ...summary, window: size, excludeSystem, maxStored };
    }
  });

/** A thread to build (Adds, maybe a fold, more Adds) and the limit of the Get to read it for. */
export const windowedCaseArb = fc.record({
  strategy: strategyArb,
  batches: fc.array(addArb, { minLength: 1, maxLength: 6 }),
  foldFraction: fc.double({ min: 0, max: 1, noNaN: true }),
  after: addArb,
  limit: fc.option(fc.integer({ min: 0, max: 10 }), { nil: undefined }),
});
