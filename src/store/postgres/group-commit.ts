import type pg from "pg";
import { MemoryError } from "../../core/errors.js";
import type { StoreLimits } from "../store.js";
import type { SimpleQuery } from "./add-batch.js";
import { type LoggedFrom, NamespaceLog, type Query } from "./events.js";
import { type GroupRun, type Queued, runGroupWrites } from "./group-run.js";
import {
  CLOSED,
  connectionLost,
  notStored,
  outcomeUnknown,
  queuedPastDeadline,
} from "./write-errors.js";
import { namespaceOf, runWrite, type WriteOp } from "./writes.js";

export interface GroupCommitOptions {
  /** Writes waiting for a transaction beyond which more are refused (unavailable). */
  maxQueued: number;
  /** Group transactions open at once (each holds a pool connection). */
  maxGroups: number;
  /** Writes per group transaction at most. */
  maxGroupSize: number;
}

/**
 * Group commit of the store's writes. Writes that arrive while earlier
 * groups commit wait in a bounded queue and go in one transaction together:
 * one COMMIT (one WAL flush, with synchronous_commit on) for all of them.
 * A group is sorted by namespace (stable: a thread's writes keep their
 * order) and each namespace's row is locked first, so groups of this and
 * other replicas take their locks in one order and never deadlock one
 * another. A namespace's Adds are decided together and written set-wise
 * (add-batch.ts: a fixed number of statements however many Adds), each
 * other write in a SAVEPOINT of its own (group-run.ts); either way one
 * refused (a precondition, a quota) changes nothing and the others commit.
 * The statements of a group run as prepared statements of its connection.
 *
 * Every caller is answered with what the database holds:
 * - resolved only after COMMIT returned;
 * - when the group's transaction is lost before COMMIT (a connection
 *   dropped, a write failed with a database error), nothing of it is
 *   stored, and each write is run again alone in a transaction of its own;
 * - when COMMIT itself fails with the server's answer, the transaction was
 *   rolled back: each write is run again alone; when the connection drops
 *   during COMMIT, the outcome is unknown and said so (unavailable: retry
 *   with the same request_id, which replays the Add if it was stored).
 */
export class GroupCommitter {
  readonly #pool: pg.Pool;
  readonly #lim: StoreLimits;
  readonly #opts: GroupCommitOptions;
  readonly #committed: (logged: LoggedFrom[]) => void;
  readonly #queue: Queued[] = [];
  readonly #active = new Set<pg.PoolClient>();
  /** Each write handed over and not answered yet, settled (for others()). */
  readonly #unanswered = new Set<Promise<void>>();
  /** Namespaces of the groups running now. */
  readonly #busy = new Set<string>();
  #running = 0;
  #closing = false;
  /** Close's grace is over: nothing more is run, not even alone. */
  #abandoned = false;
  #drained: (() => void) | undefined;

  constructor(
    pool: pg.Pool,
    lim: StoreLimits,
    opts: GroupCommitOptions,
    committed: (logged: LoggedFrom[]) => void,
  ) {
    this.#pool = pool;
    this.#lim = lim;
    this.#opts = opts;
    this.#committed = committed;
  }

  /** Runs `op` in the next group; resolves with its value once that group has committed. */
  submit(op: WriteOp, deadline?: number): Promise<unknown> {
    if (this.#closing) return Promise.reject(new MemoryError("unavailable", CLOSED));
    if (this.#queue.length >= this.#opts.maxQueued) {
      return Promise.reject(
        new MemoryError(
          "unavailable",
          `the Postgres store has ${this.#opts.maxQueued} writes waiting; this write was not stored: retry with backoff`,
        ),
      );
    }
    const answered = new Promise((resolve, reject) => {
      const w: Queued = {
        op,
        resolve,
        reject,
        out: false,
        ...(deadline === undefined ? {} : { deadline }),
      };
      if (deadline !== undefined) {
        // Refused unstored if no transaction has taken it by the call's deadline.
        w.timer = setTimeout(
          () => this.#refuse(w, queuedPastDeadline()),
          Math.max(0, deadline - Date.now()),
        );
      }
      this.#queue.push(w);
      this.#pump();
    });
    const settled = answered.then(
      () => {},
      () => {},
    );
    this.#unanswered.add(settled);
    void settled.then(() => this.#unanswered.delete(settled));
    return answered;
  }

  /**
   * Resolves once every write handed over before this call is answered:
   * lets a long series of writes (clearAll's batches) have the writes that
   * arrived meanwhile go first, whichever group they went into.
   */
  async others(): Promise<void> {
    await Promise.all([...this.#unanswered]);
  }

  /** Writes queued or in a transaction. */
  get pending(): number {
    return this.#queue.length + this.#running;
  }

  /**
   * Lets queued and running writes commit within `graceMs`; then refuses
   * those still queued (not stored) and ends the connections of the groups
   * still running, whose writes are answered as their transactions end.
   */
  async close(graceMs: number): Promise<void> {
    this.#closing = true;
    if (this.pending > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        new Promise<void>((resolve) => {
          this.#drained = resolve;
        }),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, graceMs);
        }),
      ]);
      clearTimeout(timer);
    }
    this.#abandoned = true;
    for (const w of [...this.#queue]) this.#refuse(w, new MemoryError("unavailable", CLOSED));
    for (const c of this.#active)
      void (c as unknown as { end(): Promise<void> }).end().catch(() => {});
  }

  #refuse(w: Queued, err: MemoryError): void {
    if (w.out) return;
    w.out = true;
    clearTimeout(w.timer);
    const i = this.#queue.indexOf(w);
    if (i >= 0) this.#queue.splice(i, 1);
    w.reject(err);
    this.#checkDrained();
  }

  #checkDrained(): void {
    if (this.pending === 0) this.#drained?.();
  }

  /**
   * Starts groups while there is room. A namespace is in at most one running
   * group of this store: its writes would wait for one another on the
   * namespace's row lock anyway, so they wait here instead and go together
   * in the next group (one COMMIT for all of them), while other namespaces'
   * groups run beside it. A write is taken in queue order within its
   * namespace.
   */
  #pump(): void {
    while (this.#running < this.#opts.maxGroups && this.#queue.length > 0) {
      const group = this.#takeGroup();
      if (group === undefined) return;
      if (group.length === 0) continue;
      const namespaces = new Set(group.map((w) => namespaceOf(w.op)));
      for (const n of namespaces) this.#busy.add(n);
      this.#running += 1;
      void this.#runGroup(group).finally(() => {
        for (const n of namespaces) this.#busy.delete(n);
        this.#running -= 1;
        this.#checkDrained();
        this.#pump();
      });
    }
  }

  /**
   * The next group: queued writes of namespaces no running group holds, up to
   * maxGroupSize; undefined when every queued write waits for a busy
   * namespace. Writes past their deadline are refused on the way.
   */
  #takeGroup(): Queued[] | undefined {
    const now = Date.now();
    const group: Queued[] = [];
    let taken = 0;
    const kept: Queued[] = [];
    for (const w of this.#queue) {
      if (taken >= this.#opts.maxGroupSize || this.#busy.has(namespaceOf(w.op))) {
        kept.push(w);
        continue;
      }
      taken += 1;
      w.out = true;
      clearTimeout(w.timer);
      // Its timer may not have fired yet: a write is never taken past its deadline.
      if (w.deadline !== undefined && now >= w.deadline) w.reject(queuedPastDeadline());
      else group.push(w);
    }
    if (taken === 0) return undefined;
    this.#queue.length = 0;
    this.#queue.push(...kept);
    return group;
  }

  async #connect(): Promise<{ client: pg.PoolClient; q: Query }> {
    const client = await this.#pool.connect();
    this.#active.add(client);
    const q: Query = async (sql, params, name) =>
      (
        await client.query(
          name === undefined ? { text: sql, values: params } : { name, text: sql, values: params },
        )
      ).rows;
    return { client, q };
  }

  #release(client: pg.PoolClient, broken?: unknown): void {
    this.#active.delete(client);
    client.release(broken === undefined ? undefined : broken instanceof Error ? broken : true);
  }

  async #runGroup(group: Queued[]): Promise<void> {
    const sorted = [...group].sort((a, b) =>
      compareNamespaces(namespaceOf(a.op), namespaceOf(b.op)),
    );
    let conn: { client: pg.PoolClient; q: Query };
    try {
      conn = await this.#connect();
    } catch (err) {
      for (const w of sorted) w.reject(notStored(err));
      return;
    }
    const { client, q } = conn;
    let run: GroupRun;
    try {
      const log = new NamespaceLog(q, this.#lim.eventRetention);
      run = await runGroupWrites({ q, simple: simpleQuery(client), log, lim: this.#lim }, sorted);
    } catch (err) {
      // The transaction is gone before COMMIT: nothing of it is stored.
      this.#release(client, err);
      for (const w of sorted) await this.#runAlone(w);
      return;
    }
    const { done, alone } = run;
    try {
      await q("COMMIT");
    } catch (err) {
      this.#release(client, err);
      if (connectionLost(err)) {
        for (const d of done) d.w.reject(d.ok ? outcomeUnknown(err) : d.error);
        for (const w of alone) await this.#runAlone(w);
      } else {
        // The server answered COMMIT with an error: it rolled everything back.
        for (const w of sorted) await this.#runAlone(w);
      }
      return;
    }
    this.#release(client);
    this.#notify(
      done.filter((d) => d.ok).map((d) => d.w),
      run.logged,
    );
    for (const d of done) {
      if (d.ok) d.w.resolve(d.value);
      else d.w.reject(d.error);
    }
    for (const w of alone) await this.#runAlone(w);
  }

  /** One write in a transaction of its own; answered with what the database then holds. */
  async #runAlone(w: Queued): Promise<void> {
    if (this.#abandoned) {
      w.reject(new MemoryError("unavailable", CLOSED));
      return;
    }
    // Run again after its group failed: not past its deadline, which still holds.
    if (w.deadline !== undefined && Date.now() >= w.deadline) {
      w.reject(queuedPastDeadline());
      return;
    }
    let conn: { client: pg.PoolClient; q: Query };
    try {
      conn = await this.#connect();
    } catch (err) {
      w.reject(notStored(err));
      return;
    }
    const { client, q } = conn;
    let committing = false;
    try {
      await q("BEGIN");
      const log = new NamespaceLog(q, this.#lim.eventRetention);
      const value = await runWrite({ q, log, lim: this.#lim }, w.op);
      w.logged = await log.flush([namespaceOf(w.op)]);
      committing = true;
      await q("COMMIT");
      this.#release(client);
      this.#notify([w]);
      w.resolve(value);
    } catch (err) {
      if (connectionLost(err)) {
        this.#release(client, err);
        w.reject(committing ? outcomeUnknown(err) : notStored(err));
        return;
      }
      await q("ROLLBACK").catch(() => {});
      this.#release(client);
      w.reject(err instanceof MemoryError ? err : notStored(err));
    }
  }

  #notify(written: Queued[], batches: LoggedFrom[] = []): void {
    const logged = [...batches, ...written.flatMap((w) => w.logged ?? [])];
    if (logged.length > 0) this.#committed(logged);
  }
}

/** Several statements in one round trip on `client`: each one's rows. */
function simpleQuery(client: pg.PoolClient): SimpleQuery {
  return async (sql) => {
    const answer = (await client.query(sql)) as unknown as pg.QueryResult | pg.QueryResult[];
    return Array.isArray(answer) ? answer.map((r) => r.rows) : [answer.rows];
  };
}

/** Byte order of namespaces: the order every group locks them in. */
function compareNamespaces(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}
