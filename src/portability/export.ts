import type { StoredMessage } from "../core/types.js";
import type { Store, ThreadSnapshot } from "../store/store.js";
import { PrefixChain } from "./prefix-chain.js";
import { encodeMessageJson, encodeThreadLine, type SharedPrefix } from "./thread-line.js";

/** Thread ids read per listing page (of the namespace, or of one thread's forks). */
export const EXPORT_PAGE = 100;

/**
 * How deep a fork family is written in one go: a thread's forks right after
 * it, their forks after them, and so on, each level holding one thread and
 * its digests in memory. Forks deeper than this are written on their own
 * (their whole view in a v1 line), as the namespace's listing reaches them.
 */
export const FAMILY_DEPTH = 8;

/**
 * Writes every thread of `namespace` as export lines (thread-line.ts).
 * `write` is awaited, so a slow destination slows the export instead of
 * buffering it. A thread cleared between the listing and its read is left
 * out. Returns the count of lines.
 *
 * Order: thread id order, except that each thread's forks follow it (depth
 * first, at most FAMILY_DEPTH levels), so a fork's line comes after its
 * parent's and can share the parent's messages instead of repeating them: a
 * fork whose oldest messages are exactly its parent's (as the parent's line
 * has them) is written as a v2 line naming that prefix, with only its own
 * messages. A fork listed before its parent waits for it (a set of ids);
 * one whose parent is gone or never written is written on its own at the end.
 * Memory: one thread a level of the family being written, its digests
 * (32 bytes a message), and the ids of forks written ahead of the listing or
 * waiting for their parent.
 */
export async function exportNamespace(
  store: Store,
  namespace: string,
  write: (line: string) => Promise<void>,
): Promise<number> {
  const run = new NamespaceExport(store, namespace, write);
  let after = "";
  for (;;) {
    const ids = await store.listThreads(namespace, after, EXPORT_PAGE);
    for (const threadId of ids) await run.visit(threadId);
    if (ids.length < EXPORT_PAGE) break;
    after = ids[ids.length - 1] ?? "";
  }
  await run.flushWaiting();
  return run.count;
}

/** A thread's snapshot, with its digests once a fork of it needs them. */
interface Written {
  snap: ThreadSnapshot;
  chain?: PrefixChain;
}

class NamespaceExport {
  count = 0;
  /** The listing has visited every id up to this one. */
  #cursor = "";
  /** Forks a family wrote before the listing reached them. */
  readonly #ahead = new Set<string>();
  /** Forks the listing passed whose parent, there then, was not written yet: fork id → parent id. */
  readonly #waiting = new Map<string, string>();

  constructor(
    private readonly store: Store,
    private readonly namespace: string,
    private readonly write: (line: string) => Promise<void>,
  ) {}

  async visit(threadId: string): Promise<void> {
    this.#cursor = threadId;
    if (this.#ahead.delete(threadId)) return;
    const snap = await this.store.read(this.namespace, threadId);
    if (snap === undefined) return;
    const parentId = snap.thread.parent?.threadId;
    if (
      parentId !== undefined &&
      (parentId > threadId || this.#waiting.has(parentId)) &&
      (await this.store.getThread(this.namespace, parentId)) !== undefined
    ) {
      this.#waiting.set(threadId, parentId);
      return;
    }
    await this.#family(snap, undefined, 1);
  }

  /**
   * Forks whose parent's line never came (cleared meanwhile, or too deep), on
   * their own: the oldest ancestors first, so their families take the rest.
   */
  async flushWaiting(): Promise<void> {
    while (this.#waiting.size > 0) {
      for (const [threadId, parentId] of this.#waiting) {
        if (this.#waiting.has(parentId) || !this.#waiting.delete(threadId)) continue;
        const snap = await this.store.read(this.namespace, threadId);
        if (snap !== undefined) await this.#family(snap, undefined, 1);
      }
    }
  }

  /** Writes `snap` (sharing with `parent` when it can), then its forks under it. */
  async #family(snap: ThreadSnapshot, parent: Written | undefined, depth: number): Promise<void> {
    const self: Written = { snap };
    await this.#writeLine(self, parent);
    if (depth >= FAMILY_DEPTH) return;
    let after = "";
    for (;;) {
      const ids = await this.store.listThreads(
        this.namespace,
        after,
        EXPORT_PAGE,
        undefined,
        snap.thread.threadId,
      );
      for (const forkId of ids) {
        if (!this.#claim(forkId)) continue;
        const fork = await this.store.read(this.namespace, forkId);
        if (fork !== undefined) await this.#family(fork, self, depth + 1);
      }
      if (ids.length < EXPORT_PAGE) return;
      after = ids[ids.length - 1] ?? "";
    }
  }

  /** Whether a family may write this fork now: the listing has not written it and will not. */
  #claim(forkId: string): boolean {
    if (forkId <= this.#cursor) return this.#waiting.delete(forkId);
    if (this.#ahead.has(forkId)) return false;
    this.#ahead.add(forkId);
    return true;
  }

  async #writeLine(self: Written, parent: Written | undefined): Promise<void> {
    const { thread, messages } = self.snap;
    const shared = parent === undefined ? undefined : sharedWith(self, parent);
    await this.write(
      `${encodeThreadLine({
        namespace: this.namespace,
        threadId: thread.threadId,
        strategy: thread.strategy,
        lastSeq: thread.lastSeq,
        summarizedThroughSeq: thread.summarizedThroughSeq,
        summary: thread.summary,
        summaryTime: thread.summaryTime,
        createTime: thread.createTime,
        updateTime: thread.updateTime,
        ...(thread.labels === undefined ? {} : { labels: thread.labels }),
        ...(thread.ttlMs === undefined || thread.expireTime === undefined
          ? {}
          : { ttlMs: thread.ttlMs, expireTime: thread.expireTime }),
        ...(thread.parent === undefined ? {} : { parent: thread.parent }),
        ...(shared === undefined ? {} : { shared }),
        messages: shared === undefined ? messages : messages.slice(shared.count),
      })}\n`,
    );
    this.count++;
  }
}

/**
 * The prefix `self` holds exactly as its parent's line does, if any: found
 * by comparing the messages field by field (cheap; the parent's digests are
 * computed once for all its forks, the fork's only when it has forks itself).
 */
function sharedWith(self: Written, parent: Written): SharedPrefix | undefined {
  const mine = self.snap.messages;
  const theirs = parent.snap.messages;
  const n = Math.min(mine.length, theirs.length);
  let count = 0;
  while (count < n && sameMessage(mine[count], theirs[count])) count++;
  const last = mine[count - 1];
  if (count === 0 || last === undefined) return undefined;
  parent.chain ??= PrefixChain.of(theirs, encodeMessageJson);
  return { throughSeq: last.seq, count, digest: parent.chain.digestOf(count) };
}

function sameMessage(a: StoredMessage | undefined, b: StoredMessage | undefined): boolean {
  if (a === b) return true;
  if (a === undefined || b === undefined) return false;
  return (
    a.seq === b.seq &&
    a.createTime === b.createTime &&
    a.role === b.role &&
    a.content === b.content &&
    a.name === b.name &&
    a.toolCallId === b.toolCallId &&
    (a.toolCalls === b.toolCalls || JSON.stringify(a.toolCalls) === JSON.stringify(b.toolCalls)) &&
    (a.metadata === b.metadata || encodeMessageJson(a) === encodeMessageJson(b))
  );
}
