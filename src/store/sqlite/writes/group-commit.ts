import Database from "better-sqlite3";
import { MemoryError } from "../../../core/errors.js";
import { Activity, type WriteGate } from "../write-gate.js";
import type { WriteContext } from "./context.js";
import { type QueuedWrite, runWrite } from "./ops.js";
import {
  CLOSING,
  DISK_FULL,
  queuedPastDeadline,
  toWireError,
  type WriteOutcome,
} from "./outcomes.js";

/** What running a group's writes in savepoints left to do. */
interface GroupRun {
  /** Each taken write's outcome inside the group (its savepoint released or rolled back). */
  inGroup: WriteOutcome[];
  taken: QueuedWrite[];
  /** Set when SQLite rolled the whole transaction back: the writes after the one that failed. */
  again?: QueuedWrite[];
}

/**
 * The store's writes on the write connection (run in the worker). `runGroup`
 * commits a group of writes as one transaction, so one fsync covers them all;
 * each write runs in its own savepoint, so one that fails (a precondition, a
 * quota) is rolled back alone and the others still commit. The connection's
 * own busy timeout is short: `busyTimeoutMs` is waited out in slices of it.
 */
export class GroupCommit {
  readonly #begin: Database.Statement;
  readonly #commit: Database.Statement;
  readonly #rollback: Database.Statement;
  readonly #savepoint: Database.Statement;
  readonly #releaseSavepoint: Database.Statement;
  readonly #rollbackToSavepoint: Database.Statement;

  constructor(
    private readonly db: Database.Database,
    private readonly ctx: WriteContext,
    private readonly gate: WriteGate,
    private readonly busyTimeoutMs: number,
  ) {
    this.#begin = db.prepare("BEGIN IMMEDIATE");
    this.#commit = db.prepare("COMMIT");
    this.#rollback = db.prepare("ROLLBACK");
    this.#savepoint = db.prepare("SAVEPOINT write");
    this.#releaseSavepoint = db.prepare("RELEASE write");
    this.#rollbackToSavepoint = db.prepare("ROLLBACK TO write");
  }

  /**
   * Commits `writes` in one transaction (BEGIN IMMEDIATE ... COMMIT, one
   * fsync), each write in its own savepoint, and returns an outcome per
   * write that equals what the file holds afterwards:
   * - a write that fails on its own (a precondition, a quota) is rolled
   *   back to its savepoint and the others go on;
   * - when SQLite rolls back the whole transaction by itself (SQLITE_FULL,
   *   SQLITE_IOERR, SQLITE_NOMEM; `db.inTransaction` is then false), or
   *   COMMIT fails, nothing of the group is stored: every write taken is
   *   run again in a transaction of its own, and so are the rest, so no
   *   statement ever runs outside a transaction and each is answered with
   *   its own outcome (after an I/O error at COMMIT, whose frames a crash
   *   recovery might still find, as unknown: outcomes.ts sqliteFault);
   * - a write is taken (WriteGate) only once the transaction has begun, so
   *   one still waiting for a lock at its deadline is refused unchanged.
   */
  runGroup(writes: QueuedWrite[]): WriteOutcome[] {
    const outcomes: WriteOutcome[] = [];
    this.gate.activity = Activity.committing;
    try {
      const untaken = [...writes];
      const notBegun = this.#beginWhenFree(untaken, outcomes);
      if (notBegun !== undefined) {
        // Nothing ran: each write not answered yet gets the reason, unchanged.
        for (const w of untaken) {
          if (this.#take(w, outcomes)) outcomes.push(this.#failed(w.id, notBegun.error));
        }
        return outcomes;
      }
      const answered = new Set(outcomes.map((o) => o.id));
      const run = this.#runInSavepoints(writes, answered, outcomes);
      if (run.again === undefined && this.#commitGroup(run.inGroup, outcomes)) return outcomes;
      // The group's transaction is gone: each write on its own, in order.
      for (const w of run.taken) this.#runAlone(w, outcomes);
      for (const w of run.again ?? []) {
        if (!answered.has(w.id) && this.#take(w, outcomes)) this.#runAlone(w, outcomes);
      }
      return outcomes;
    } finally {
      this.gate.activity = Activity.idle;
    }
  }

  /**
   * Whether a small write can commit now (health, while the disk is full):
   * a value that needs new pages, deleted again in the same transaction.
   * Undefined when it can; else the error.
   */
  probeSpace(): unknown {
    const notBegun = this.#beginWhenFree(undefined, []);
    if (notBegun !== undefined) return notBegun.error;
    try {
      this.db
        .prepare("INSERT OR REPLACE INTO meta (key, value) VALUES ('space_probe', zeroblob(?))")
        .run(2 * Number(this.db.pragma("page_size", { simple: true })));
      this.db.prepare("DELETE FROM meta WHERE key = 'space_probe'").run();
      this.#commit.run();
      this.gate.diskFull = false;
      return undefined;
    } catch (err) {
      if (this.db.inTransaction) this.#rollback.run();
      return err;
    }
  }

  /** Runs each write not answered yet in a savepoint of the transaction begun. */
  #runInSavepoints(
    writes: QueuedWrite[],
    answered: ReadonlySet<number>,
    outcomes: WriteOutcome[],
  ): GroupRun {
    const run: GroupRun = { inGroup: [], taken: [] };
    for (let i = 0; i < writes.length; i++) {
      const w = writes[i] as QueuedWrite;
      if (answered.has(w.id) || !this.#take(w, outcomes)) continue;
      run.taken.push(w);
      this.#savepoint.run();
      try {
        run.inGroup.push({ id: w.id, ok: true, committed: runWrite(this.ctx, w.op) });
        this.#releaseSavepoint.run();
      } catch (err) {
        if (!this.db.inTransaction) {
          // SQLite rolled the whole group back: the writes before this one too.
          run.again = writes.slice(i + 1);
          return run;
        }
        this.#rollbackToSavepoint.run();
        this.#releaseSavepoint.run();
        run.inGroup.push(this.#failed(w.id, err));
      }
    }
    return run;
  }

  /** COMMITs the group and answers its writes; false (rolled back) when COMMIT failed. */
  #commitGroup(inGroup: WriteOutcome[], outcomes: WriteOutcome[]): boolean {
    try {
      this.#commit.run();
    } catch {
      if (this.db.inTransaction) this.#rollback.run();
      return false;
    }
    if (!inGroup.some((o) => !o.ok && o.error.message.startsWith(DISK_FULL))) {
      this.gate.diskFull = false;
    }
    outcomes.push(...inGroup);
    return true;
  }

  /** A failure outcome; a full disk is also noted in the gate (for health). */
  #failed(id: number, err: unknown): WriteOutcome {
    if (err instanceof Database.SqliteError && err.code === "SQLITE_FULL") {
      this.gate.diskFull = true;
    }
    return { id, ok: false, error: toWireError(err) };
  }

  /**
   * Takes `w` to run it, or answers it without running it: refused by the
   * store already (its answer is ignored), or its deadline has passed.
   */
  #take(w: QueuedWrite, outcomes: WriteOutcome[]): boolean {
    if (w.deadline !== undefined && Date.now() >= w.deadline && this.gate.cancel(w.slot)) {
      outcomes.push({ id: w.id, ok: false, error: toWireError(queuedPastDeadline()) });
      return false;
    }
    if (this.gate.take(w.slot)) return true;
    outcomes.push({ id: w.id, ok: false, error: { message: "refused by the store" } });
    return false;
  }

  /**
   * BEGIN IMMEDIATE, waiting for another process's lock in slices of the
   * connection's short busy timeout up to `busyTimeoutMs`, so that between
   * slices the writes not taken yet (`untaken`, which this shortens) are
   * refused at their deadlines, and close's grace can end the wait. Undefined
   * once begun; else why not (error undefined: every write waiting was
   * answered meanwhile).
   */
  #beginWhenFree(
    untaken: QueuedWrite[] | undefined,
    outcomes: WriteOutcome[],
  ): { error: unknown } | undefined {
    const giveUpAt = Date.now() + this.busyTimeoutMs;
    for (;;) {
      try {
        this.#begin.run();
        this.gate.activity = Activity.committing;
        return undefined;
      } catch (err) {
        if (!(err instanceof Database.SqliteError) || !err.code.startsWith("SQLITE_BUSY")) {
          return { error: err };
        }
        if (Date.now() >= giveUpAt) return { error: err };
        if (this.gate.abandoned) return { error: new MemoryError("unavailable", CLOSING) };
        this.gate.activity = Activity.waitingForLock;
        if (untaken === undefined) continue;
        this.#refuseLate(untaken, outcomes);
        if (untaken.length === 0) return { error: undefined };
      }
    }
  }

  /** Answers (and takes out of `untaken`) each write whose deadline has passed. */
  #refuseLate(untaken: QueuedWrite[], outcomes: WriteOutcome[]): void {
    const now = Date.now();
    for (let i = untaken.length - 1; i >= 0; i--) {
      const w = untaken[i] as QueuedWrite;
      if (w.deadline !== undefined && now >= w.deadline) {
        untaken.splice(i, 1);
        this.#take(w, outcomes);
      }
    }
  }

  /** One write in a transaction of its own; its outcome is what the file then holds. */
  #runAlone(w: QueuedWrite, outcomes: WriteOutcome[]): void {
    const notBegun = this.#beginWhenFree(undefined, outcomes);
    if (notBegun !== undefined) {
      outcomes.push(this.#failed(w.id, notBegun.error));
      return;
    }
    try {
      const committed = runWrite(this.ctx, w.op);
      this.#commit.run();
      this.gate.diskFull = false;
      outcomes.push({ id: w.id, ok: true, committed });
    } catch (err) {
      if (this.db.inTransaction) this.#rollback.run();
      outcomes.push(this.#failed(w.id, err));
    }
  }
}
