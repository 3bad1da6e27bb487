import { MemoryError } from "../../core/errors.js";
import type { StoreLimits } from "../store.js";
import { AddBatch, type SimpleQuery } from "./add-batch.js";
import type { LoggedFrom, NamespaceLog, Query } from "./events.js";
import { connectionLost, queuedPastDeadline } from "./write-errors.js";
import { namespaceOf, runWrite, type WriteOp } from "./writes.js";

/** A write handed to the group committer, until it is answered. */
export interface Queued {
  op: WriteOp;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
  timer?: NodeJS.Timeout;
  /** The call's deadline, ms since the epoch. */
  deadline?: number;
  /** The events its own savepoint logged, once it ran (Adds of a batch: GroupRun.logged). */
  logged?: LoggedFrom[];
  /** Refused or taken: no longer in the queue. */
  out: boolean;
}

/** One write's outcome inside a group, before the group's COMMIT. */
export type Done =
  | { w: Queued; ok: true; value: unknown }
  | { w: Queued; ok: false; error: MemoryError };

/** What a group's transaction did, before its COMMIT. */
export interface GroupRun {
  done: Done[];
  /** Writes that met a database error in their savepoint: each runs again alone. */
  alone: Queued[];
  /** Where the events of the batches' Adds start. */
  logged: LoggedFrom[];
}

interface Tx {
  q: Query;
  /** Several statements in one round trip (no parameters). */
  simple: SimpleQuery;
  log: NamespaceLog;
  lim: StoreLimits;
}

/**
 * Runs a group's writes, sorted by namespace, in a transaction it begins
 * (with the first batch's lock and read when the group starts with Adds).
 * The Adds of a namespace go through one AddBatch (a fixed number of
 * statements for all of them); any other write, and an Add the batch leaves
 * to writes.ts, runs in a SAVEPOINT of its own after the batch so far is
 * written, and the Adds after it start a batch of their own. Throws when
 * the transaction is lost (a connection gone, a batch's statement failed):
 * nothing of it will be committed.
 */
export async function runGroupWrites(tx: Tx, sorted: readonly Queued[]): Promise<GroupRun> {
  const run: GroupRun = { done: [], alone: [], logged: [] };
  let begun = false;
  const begin = async () => {
    if (!begun) await tx.q("BEGIN");
    begun = true;
  };
  let batch: AddBatch | undefined;
  const writeBatch = async () => {
    if (batch !== undefined) run.logged.push(...(await batch.write()));
    batch = undefined;
  };
  for (const [i, w] of sorted.entries()) {
    const namespace = namespaceOf(w.op);
    if (batch !== undefined && batch.namespace !== namespace) await writeBatch();
    // Still waiting for its turn at its deadline (the group waited on a lock): never run.
    if (w.deadline !== undefined && Date.now() >= w.deadline) {
      run.done.push({ w, ok: false, error: queuedPastDeadline() });
      continue;
    }
    if (w.op.kind === "append") {
      if (batch === undefined) {
        batch = new AddBatch(tx.q, tx.log, tx.lim, namespace);
        const adds = addsFrom(sorted, i, namespace);
        if (begun) {
          await tx.log.lock(namespace);
          await batch.load(adds);
        } else {
          begun = true;
          await batch.beginAndLoad(tx.simple, adds);
        }
      }
      try {
        const value = batch.decide(w.op.cmd);
        if (value !== undefined) {
          run.done.push({ w, ok: true, value });
          continue;
        }
      } catch (err) {
        if (!(err instanceof MemoryError)) throw err;
        run.done.push({ w, ok: false, error: err });
        continue;
      }
    }
    await writeBatch();
    await begin();
    await runInSavepoint(tx, w, run);
  }
  await writeBatch();
  await begin();
  return run;
}

/** The Adds of `namespace` from sorted[from] on (the group is sorted by namespace). */
function addsFrom(sorted: readonly Queued[], from: number, namespace: string) {
  const cmds = [];
  for (let i = from; i < sorted.length; i++) {
    const op = sorted[i]?.op;
    if (op === undefined || namespaceOf(op) !== namespace) break;
    if (op.kind === "append") cmds.push(op.cmd);
  }
  return cmds;
}

/** One write in a savepoint: a refusal or a database error rolls back that write alone. */
async function runInSavepoint(tx: Tx, w: Queued, run: GroupRun): Promise<void> {
  const { q, log } = tx;
  const saved = log.snapshot();
  await q("SAVEPOINT w");
  try {
    const value = await runWrite(tx, w.op);
    w.logged = await log.flush([namespaceOf(w.op)]);
    await q("RELEASE SAVEPOINT w");
    run.done.push({ w, ok: true, value });
  } catch (err) {
    if (connectionLost(err)) throw err;
    await q("ROLLBACK TO SAVEPOINT w");
    await q("RELEASE SAVEPOINT w");
    log.restore(saved);
    // A refusal is the write's answer; a database error (a deadlock, a
    // timeout) is the moment's: that write runs again alone.
    if (err instanceof MemoryError) run.done.push({ w, ok: false, error: err });
    else run.alone.push(w);
  }
}
