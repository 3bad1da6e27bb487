import type Database from "better-sqlite3";
import { type HeldLease, mayTakeLease, nextLeaseToken } from "../../../core/fold-commit.js";

/**
 * Fold leases with fencing tokens (core/fold-commit.ts) on the write
 * connection. Tokens come from one counter of the file (meta.lease_counter),
 * never reset, so every lease's token is above every token handed out
 * before, across Clear and restarts; a lease row is not tied to its thread
 * (open drops them all: one process per file).
 */
export class FoldLeases {
  readonly #held: Database.Statement<[string, string], HeldLease>;
  readonly #counter: Database.Statement<[], number>;
  readonly #setCounter: Database.Statement<[number]>;
  readonly #set: Database.Statement<[string, string, number, number]>;
  readonly #release: Database.Statement<[string, string, number]>;
  readonly #end: Database.Statement<[string, string]>;

  constructor(db: Database.Database) {
    this.#held = db.prepare(
      `SELECT token, expires_at AS expiresAt FROM fold_leases
       WHERE namespace = ? AND thread_id = ?`,
    );
    this.#counter = db
      .prepare<[], number>("SELECT value FROM meta WHERE key = 'lease_counter'")
      .pluck();
    this.#setCounter = db.prepare("UPDATE meta SET value = ? WHERE key = 'lease_counter'");
    this.#set = db.prepare(
      "INSERT OR REPLACE INTO fold_leases (namespace, thread_id, token, expires_at) VALUES (?, ?, ?, ?)",
    );
    this.#release = db.prepare(
      "DELETE FROM fold_leases WHERE namespace = ? AND thread_id = ? AND token = ?",
    );
    this.#end = db.prepare("DELETE FROM fold_leases WHERE namespace = ? AND thread_id = ?");
  }

  /** The thread's lease as it was last taken (possibly run out); undefined: none. */
  held(namespace: string, threadId: string): HeldLease | undefined {
    return this.#held.get(namespace, threadId);
  }

  /** Takes the thread's lease for `ttlMs` unless someone holds it; its token, or undefined. */
  acquire(namespace: string, threadId: string, ttlMs: number): number | undefined {
    const now = Date.now();
    if (!mayTakeLease(this.held(namespace, threadId), now)) return undefined;
    const last = this.#counter.get();
    if (last === undefined) throw new Error("sqlite store: meta.lease_counter is missing");
    const token = nextLeaseToken(last);
    this.#setCounter.run(token);
    this.#set.run(namespace, threadId, token, now + ttlMs);
    return token;
  }

  /** Releases the lease if `token` still holds it. */
  release(namespace: string, threadId: string, token: number): void {
    this.#release.run(namespace, threadId, token);
  }

  /**
   * Ends the thread's lease whoever holds it (a Rewind), so a fold running
   * meanwhile cannot commit (core/fold-commit.ts mayCommitSummary finds no
   * lease for its token). The next lease's token is above it already: the
   * counter only grows.
   */
  end(namespace: string, threadId: string): void {
    this.#end.run(namespace, threadId);
  }
}
