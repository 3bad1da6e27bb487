import type Database from "better-sqlite3";
import { floorOf } from "../../core/lineage.js";
import { recallSize } from "../../core/recall.js";
import { isExpired } from "../../core/ttl.js";
import type { Labels, StoredMessage, Strategy, ThreadState } from "../../core/types.js";
import { READ_SLACK, type ReadView, type ThreadSnapshot } from "../store.js";
import { type ThreadRow, toThread } from "./codec.js";
import { SqliteForks, SqliteLabels } from "./labels.js";
import { LineageRows } from "./lineage.js";
import type { MessageCache } from "./message-cache.js";

/**
 * The oldest seq a read with `view` returns: the newest recallSize +
 * READ_SLACK messages, and a summary thread's unfolded ones (Store.read).
 * 0 or less: every message.
 */
function viewFrom(row: ThreadRow, strategy: Strategy, view: ReadView): number {
  const size = recallSize(strategy, view.limit);
  if (size <= 0) return 0;
  const from = row.last_seq - size - READ_SLACK + 1;
  return strategy.kind === "summary" ? Math.min(from, row.summarized_through_seq + 1) : from;
}

/**
 * The store's reads, on the event loop's connection of its own (WAL: they
 * see the last commit while the worker writes). A thread's newest messages
 * come from the MessageCache when it is current; a thread with a write
 * still in the worker (`writing`) is read from the file and not cached,
 * since the file may already be ahead of the cache. An expired thread not
 * swept yet is gone for every read already.
 */
export class SqliteReads {
  readonly #thread: Database.Statement<[string, string], ThreadRow>;
  readonly #listThreads: Database.Statement<[string, string, number, number], string>;
  readonly #lineages: LineageRows;
  readonly #labels: SqliteLabels;
  readonly #forks: SqliteForks;
  /** One snapshot of the file for a whole read: the worker may commit between statements. */
  readonly #readTx: (
    namespace: string,
    threadId: string,
    view: ReadView | undefined,
  ) => ThreadSnapshot | undefined;

  constructor(
    db: Database.Database,
    private readonly cache: MessageCache,
    private readonly writing: (namespace: string, threadId: string) => boolean,
  ) {
    this.#thread = db.prepare("SELECT * FROM threads WHERE namespace = ? AND thread_id = ?");
    this.#listThreads = db
      .prepare<[string, string, number, number], string>(
        `SELECT thread_id FROM threads WHERE namespace = ? AND thread_id > ?
           AND (expire_at IS NULL OR expire_at > ?) ORDER BY thread_id LIMIT ?`,
      )
      .pluck();
    this.#lineages = new LineageRows(db);
    this.#labels = new SqliteLabels(db);
    this.#forks = new SqliteForks(db);
    this.#readTx = db.transaction(
      (namespace: string, threadId: string, view: ReadView | undefined) =>
        this.#readThread(namespace, threadId, view),
    );
  }

  read(namespace: string, threadId: string, view?: ReadView): ThreadSnapshot | undefined {
    return this.#readTx(namespace, threadId, view);
  }

  getThread(namespace: string, threadId: string): ThreadState | undefined {
    const row = this.#thread.get(namespace, threadId);
    const thread = row === undefined ? undefined : toThread(row);
    return thread === undefined || isExpired(thread, Date.now()) ? undefined : thread;
  }

  /**
   * Unexpired thread ids after `after`, in byte order; with `labels`, by the
   * label index; with `forksOf`, by the forks index (and the labels).
   */
  listThreads(
    namespace: string,
    after: string,
    limit: number,
    labels?: Labels,
    forksOf?: string,
  ): string[] {
    if (forksOf !== undefined && forksOf !== "") {
      return this.#forks.list(namespace, forksOf, after, limit, labels, Date.now());
    }
    if (labels !== undefined && Object.keys(labels).length > 0) {
      return this.#labels.list(namespace, after, limit, labels, Date.now());
    }
    return this.#listThreads.all(namespace, after, Date.now(), Math.max(0, limit));
  }

  #readThread(
    namespace: string,
    threadId: string,
    view: ReadView | undefined,
  ): ThreadSnapshot | undefined {
    const row = this.#thread.get(namespace, threadId);
    if (row === undefined) return undefined;
    const thread = toThread(row);
    // Expired but not swept yet: gone for every call already.
    if (isExpired(thread, Date.now())) return undefined;
    const useCache = !this.writing(namespace, threadId);
    if (view === undefined) {
      const lineage = this.#lineages.of(row);
      const floor = floorOf(lineage, row.last_seq);
      const messages = this.#lineages.read(lineage, row.last_seq, floor, row.last_seq);
      if (useCache) this.cache.set(row.incarnation, messages, true, row.last_seq);
      return { thread, messages, complete: true };
    }
    return { thread, ...this.#readFrom(row, viewFrom(row, thread.strategy, view), useCache) };
  }

  /** The thread's messages from seq `from` on, from the cache or the file; and whether that is all. */
  #readFrom(
    row: ThreadRow,
    from: number,
    useCache: boolean,
  ): { messages: StoredMessage[]; complete: boolean } {
    const cached = useCache ? this.cache.get(row.incarnation) : undefined;
    if (cached !== undefined && cached.lastSeq === row.last_seq) {
      const first = cached.messages[0]?.seq ?? row.last_seq + 1;
      if (cached.whole || first <= from) {
        // Seqs are consecutive, so the index of `from` is found without a search.
        const start = Math.max(0, from - first);
        return { messages: cached.messages.slice(start), complete: cached.whole && start === 0 };
      }
    }
    const lineage = this.#lineages.of(row);
    const floor = floorOf(lineage, row.last_seq);
    const messages = this.#lineages.read(lineage, row.last_seq, from, row.last_seq);
    const complete = floor > row.last_seq || from <= floor;
    if (useCache) this.cache.set(row.incarnation, messages, complete, row.last_seq);
    return { messages, complete };
  }
}
