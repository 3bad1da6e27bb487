import type { Store, ThreadSnapshot } from "../store/store.js";
import { PrefixChain } from "./prefix-chain.js";
import {
  encodeMessageJson,
  encodeThreadLine,
  type SharedPrefix,
  type ThreadLine,
  ThreadLineError,
} from "./thread-line.js";
import { decodeThreadLine } from "./thread-line-decode.js";

/** What an import did. */
export interface ImportOutcome {
  /** Threads written. */
  imported: number;
  /** Lines whose thread was already there with the same content. */
  unchanged: number;
}

/**
 * Parents whose digests an import keeps (the newest used): a file writes a
 * parent's forks right after it, so a few suffice; each costs 32 bytes a
 * message of that parent.
 */
export const PARENT_CHAINS = 8;

/**
 * Reads export lines (thread-line.ts) into `store`, one thread at a time,
 * each written atomically by Store.importThread. Idempotent: a thread that
 * already exists with the same content (everything but its incarnation) is
 * counted unchanged and left alone, so importing a file twice changes
 * nothing. A thread that exists with other content is refused: the import
 * stops there with a ThreadLineError naming the line, having written the
 * lines before it (run it again after clearing the thread, or into another
 * store; the lines already imported are then unchanged). Blank lines are
 * skipped. Quota refusals (resource_exhausted) stop it the same way.
 *
 * A v2 line (a fork sharing its parent's prefix) needs its parent in the
 * store holding that prefix, as the file's earlier line put it there: the
 * importer reads the parent once (PARENT_CHAINS keeps its digests for the
 * next forks), compares the line's digest and has the store write the fork
 * sharing the parent's messages (ImportThreadCommand.shareFrom); a parent
 * missing or different stops the import with a ThreadLineError naming the
 * line, as does a parent changed by another writer meanwhile.
 */
export async function importLines(
  store: Store,
  lines: AsyncIterable<string>,
  now: () => number = Date.now,
): Promise<ImportOutcome> {
  const outcome: ImportOutcome = { imported: 0, unchanged: 0 };
  const parents = new ParentChains(store);
  let no = 0;
  for await (const text of lines) {
    no++;
    if (text.trim() === "") continue;
    const where = `line ${no}`;
    const line = decodeThreadLine(text, where);
    const written = await importLine(store, parents, line, where, now());
    if (written) {
      outcome.imported++;
      continue;
    }
    const existing = await store.read(line.namespace, line.threadId);
    if (existing === undefined || !sameThread(existing, line)) {
      throw new ThreadLineError(
        `${where}: thread "${line.threadId}" of namespace "${line.namespace}" already exists with other content; nothing of it was changed (clear it first to replace it)`,
      );
    }
    outcome.unchanged++;
  }
  return outcome;
}

async function importLine(
  store: Store,
  parents: ParentChains,
  line: ThreadLine,
  where: string,
  now: number,
): Promise<boolean> {
  const { shared, ...cmd } = line;
  try {
    if (shared === undefined) return await store.importThread({ ...cmd, now });
    const parentId = line.parent?.threadId ?? "";
    const parentLastSeq = await parents.check(line.namespace, parentId, shared, where);
    return await store.importThread({
      ...cmd,
      shareFrom: { threadId: parentId, throughSeq: shared.throughSeq, parentLastSeq },
      now,
    });
  } catch (err) {
    if (err instanceof ThreadLineError) throw err;
    throw new ThreadLineError(`${where}: ${(err as Error).message}`, { cause: err });
  }
}

/** `existing` as `line` would write it: sharing the same prefix when the line shares one. */
function lineOf(existing: ThreadSnapshot, line: ThreadLine): ThreadLine {
  const whole = { ...existing.thread, namespace: line.namespace, messages: existing.messages };
  const shared = line.shared;
  if (shared === undefined) return whole;
  const chain = PrefixChain.of(existing.messages.slice(0, shared.count), encodeMessageJson);
  const count = chain.countThrough(shared.throughSeq);
  if (count !== shared.count) return whole;
  return {
    ...whole,
    shared: { ...shared, digest: chain.digestOf(count) },
    messages: existing.messages.slice(count),
  };
}

/** Whether `existing` is the thread `line` describes (its encoding, line fields in the line's order). */
function sameThread(existing: ThreadSnapshot, line: ThreadLine): boolean {
  return encodeThreadLine(lineOf(existing, line)) === encodeThreadLine(line);
}

/** The digests of the parents the latest v2 lines shared, read from the store. */
class ParentChains {
  readonly #chains = new Map<string, { lastSeq: number; chain: PrefixChain }>();

  constructor(private readonly store: Store) {}

  /**
   * Checks that `parentId` in the store holds the messages `shared` names
   * (its oldest through shared.throughSeq, digest equal) and returns the
   * parent's last_seq it was read at; throws ThreadLineError otherwise.
   */
  async check(
    namespace: string,
    parentId: string,
    shared: SharedPrefix,
    where: string,
  ): Promise<number> {
    const key = `${namespace}\u0000${parentId}`;
    let entry = this.#chains.get(key);
    const current = await this.store.getThread(namespace, parentId);
    if (entry === undefined || current === undefined || current.lastSeq !== entry.lastSeq) {
      entry = await this.#read(namespace, parentId);
    }
    // Most recently used last, so the first key is the one to drop.
    this.#chains.delete(key);
    if (entry !== undefined) this.#chains.set(key, entry);
    if (this.#chains.size > PARENT_CHAINS) {
      const oldest = this.#chains.keys().next().value;
      if (oldest !== undefined) this.#chains.delete(oldest);
    }
    const count = entry?.chain.countThrough(shared.throughSeq);
    if (
      entry === undefined ||
      count !== shared.count ||
      entry.chain.digestOf(count) !== shared.digest
    ) {
      throw new ThreadLineError(
        `${where}: shared: the line shares seqs up to ${shared.throughSeq} of its parent "${parentId}", which the store ${entry === undefined ? "does not have" : "holds otherwise"}; import the export file whole and in its order (the parent's line comes first)`,
      );
    }
    return entry.lastSeq;
  }

  async #read(
    namespace: string,
    parentId: string,
  ): Promise<{ lastSeq: number; chain: PrefixChain } | undefined> {
    const snap = await this.store.read(namespace, parentId);
    if (snap === undefined) return undefined;
    return {
      lastSeq: snap.thread.lastSeq,
      chain: PrefixChain.of(snap.messages, encodeMessageJson),
    };
  }
}
