/**
 * Concurrent writers for durability tests: each Adds one message at a time
 * to a thread of its own, every Add with a request id, and records what the
 * store acknowledged. Afterwards `audit` reads the threads back and counts
 * the acknowledged Adds that are still there, at the seq they were given.
 */
import { MemoryError } from "../../src/core/errors.js";
import type { Strategy } from "../../src/core/types.js";
import type { AppendCommand, AppendResult, Store } from "../../src/store/store.js";

export const NAMESPACE = "durability";
export const STRATEGY: Strategy = {
  kind: "buffer",
  maxMessages: 0,
  excludeSystem: false,
  maxStored: 100_000,
};

/** An Add of one user message with a request id (its hash derived from the id) to a buffer thread. */
export function addCommand(threadId: string, requestId: string, content: string): AppendCommand {
  return {
    namespace: NAMESPACE,
    threadId,
    messages: [{ role: "user", content }],
    strategy: STRATEGY,
    defaultStrategy: STRATEGY,
    replaceStrategy: false,
    requestId,
    requestHash: `hash of ${requestId}`,
    expectedLastSeq: undefined,
    now: Date.now(),
  };
}

export interface Acknowledged {
  threadId: string;
  requestId: string;
  content: string;
  seq: number;
  /** Attempts it took (1: answered the first time). */
  attempts: number;
  replayed: boolean;
}

export interface WriterOptions {
  writers: number;
  /** Retry an UNAVAILABLE Add with the same request id (until it answers or stop()). */
  retry: boolean;
  /** A distinct thread-id prefix per run, so runs on one Redis do not mix. */
  runId: string;
}

export interface WriterRun {
  readonly acknowledged: Acknowledged[];
  /** Adds answered with an error and not retried (or still failing at stop()). */
  failed(): number;
  /** Resolves once `count` Adds have been acknowledged in all. */
  waitForAcknowledged(count: number, timeoutMs?: number): Promise<void>;
  /** Lets each writer finish the Add it is on (retries end at their next failure), then resolves. */
  stop(): Promise<void>;
  /** Resolves when every writer has stopped by itself (without retry: at its first failure). */
  done: Promise<void>;
}

/** Starts the writers on `store()`, which may change (a test re-opens the store). */
export function startWriters(store: () => Store, options: WriterOptions): WriterRun {
  const acknowledged: Acknowledged[] = [];
  let failed = 0;
  let stopping = false;
  const watchers = new Set<() => void>();
  const notify = () => {
    for (const w of watchers) w();
  };

  async function writer(index: number): Promise<void> {
    const threadId = `${options.runId}-w${index}`;
    for (let n = 0; !stopping; n++) {
      const requestId = `${threadId}-${n}`;
      const content = `message ${n} of ${threadId}`;
      for (let attempts = 1; ; attempts++) {
        let result: AppendResult;
        try {
          result = await store().append(addCommand(threadId, requestId, content));
        } catch (err) {
          if (!(err instanceof MemoryError && err.code === "unavailable")) throw err;
          if (!options.retry || stopping) {
            failed++;
            if (!options.retry) return;
            break;
          }
          // Bounded backoff: Redis is failing over or restarting.
          await new Promise((r) => setTimeout(r, Math.min(200, 10 * attempts)));
          continue;
        }
        acknowledged.push({
          threadId,
          requestId,
          content,
          seq: result.firstSeq,
          attempts,
          replayed: result.replayed,
        });
        notify();
        break;
      }
    }
  }

  const done = Promise.all(Array.from({ length: options.writers }, (_, i) => writer(i))).then(
    () => {},
  );
  return {
    acknowledged,
    failed: () => failed,
    done,
    waitForAcknowledged(count, timeoutMs = 60_000) {
      return new Promise<void>((resolve, reject) => {
        const check = () => {
          if (acknowledged.length < count) return;
          cleanup();
          resolve();
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`only ${acknowledged.length} of ${count} Adds acknowledged in time`));
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          watchers.delete(check);
        };
        watchers.add(check);
        done.then(
          () => {
            if (acknowledged.length < count) {
              cleanup();
              reject(new Error(`the writers stopped after ${acknowledged.length} Adds`));
            }
          },
          (err: unknown) => {
            cleanup();
            reject(err);
          },
        );
        check();
      });
    },
    async stop() {
      stopping = true;
      await done;
    },
  };
}

export interface Audit {
  acknowledged: number;
  /** Acknowledged Adds whose message is at its seq. */
  present: number;
  lost: Acknowledged[];
  /** Messages stored more than once (a retry stored twice). */
  duplicates: number;
}

/** Reads every writer's thread and compares it with what was acknowledged. */
export async function audit(store: Store, acknowledged: readonly Acknowledged[]): Promise<Audit> {
  const threads = new Map<string, Map<number, string>>();
  let duplicates = 0;
  for (const threadId of new Set(acknowledged.map((a) => a.threadId))) {
    const snapshot = await store.read(NAMESPACE, threadId);
    const bySeq = new Map<number, string>();
    const seen = new Set<string>();
    for (const m of snapshot?.messages ?? []) {
      bySeq.set(m.seq, m.content);
      if (seen.has(m.content)) duplicates++;
      seen.add(m.content);
    }
    threads.set(threadId, bySeq);
  }
  const lost = acknowledged.filter((a) => threads.get(a.threadId)?.get(a.seq) !== a.content);
  return {
    acknowledged: acknowledged.length,
    present: acknowledged.length - lost.length,
    lost,
    duplicates,
  };
}
