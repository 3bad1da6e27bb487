import type Database from "better-sqlite3";
import { decideReplay, requestsToKeep } from "../../../core/idempotency.js";
import { forgetRequest } from "../../../core/rewind.js";
import type { StoreLimits } from "../../store.js";
import type { RecordedFork, RecordedResult, RecordedRewind, RequestRow } from "../codec.js";

/** What idempotency needs of a write: its request id, the digest of its payload, its time. */
export interface Idempotent {
  /** Empty: no idempotency. */
  requestId: string;
  requestHash: string;
  now: number;
}

/**
 * A thread incarnation's idempotency records (the `requests` table, gone
 * with the thread by cascade) on the write connection: one per request id,
 * an Add's or a Rewind's first result, kept as core/idempotency.ts says.
 */
export class RequestRecords {
  readonly #find: Database.Statement<[number, string], RequestRow>;
  readonly #record: Database.Statement<[number, string, string, string, number]>;
  readonly #dropThrough: Database.Statement<[number, number]>;
  readonly #count: Database.Statement<[number], number>;
  readonly #dropOldest: Database.Statement<[number, number]>;
  readonly #addLastSeqs: Database.Statement<[number], { no: number; last_seq: number | null }>;
  readonly #forget: Database.Statement<[number]>;

  constructor(
    db: Database.Database,
    private readonly lim: StoreLimits,
  ) {
    this.#find = db.prepare(
      "SELECT hash, result, time FROM requests WHERE thread = ? AND request_id = ?",
    );
    this.#record = db.prepare(
      "INSERT OR REPLACE INTO requests (thread, request_id, hash, result, time) VALUES (?, ?, ?, ?, ?)",
    );
    this.#dropThrough = db.prepare("DELETE FROM requests WHERE thread = ? AND time <= ?");
    this.#count = db
      .prepare<[number], number>("SELECT count(*) FROM requests WHERE thread = ?")
      .pluck();
    this.#dropOldest = db.prepare(
      `DELETE FROM requests WHERE no IN
         (SELECT no FROM requests WHERE thread = ? ORDER BY time, no LIMIT ?)`,
    );
    // An Add's record has the seq of its newest message; a Rewind's has none (NULL).
    this.#addLastSeqs = db.prepare(
      "SELECT no, json_extract(result, '$.lastSeq') AS last_seq FROM requests WHERE thread = ?",
    );
    this.#forget = db.prepare("DELETE FROM requests WHERE no = ?");
  }

  /**
   * The first result of the request `cmd` retries, to answer it with; or
   * undefined when it is new to the thread `key` (none: no thread yet).
   * Throws invalid_argument when the id stands for another payload
   * (core/idempotency.ts decideReplay).
   */
  replayOf<T extends RecordedResult | RecordedRewind | RecordedFork>(
    key: number | undefined,
    cmd: Idempotent,
  ): T | undefined {
    if (cmd.requestId === "" || key === undefined) return undefined;
    const seen = this.#find.get(key, cmd.requestId);
    if (decideReplay(seen, cmd, this.lim) === "new") return undefined;
    // Written by record from a result of the same kind (its hash matched).
    return JSON.parse((seen as RequestRow).result) as T;
  }

  /** Records the first result of `cmd`, then forgets what core/idempotency.ts requestsToKeep drops. */
  record(
    key: number,
    cmd: Idempotent,
    result: RecordedResult | RecordedRewind | RecordedFork,
  ): void {
    if (cmd.requestId === "") return;
    this.#record.run(key, cmd.requestId, cmd.requestHash, JSON.stringify(result), cmd.now);
    const keep = requestsToKeep(cmd.now, this.lim);
    this.#dropThrough.run(key, keep.dropThrough);
    const excess = (this.#count.get(key) ?? 0) - keep.keepNewest;
    if (excess > 0) this.#dropOldest.run(key, excess);
  }

  /**
   * Forgets the Adds whose messages a Rewind to `toSeq` drops
   * (core/rewind.ts forgetRequest), so their retries add them again. At most
   * idempotencyMaxPerThread records are read.
   */
  forgetDropped(key: number, toSeq: number): void {
    for (const { no, last_seq } of this.#addLastSeqs.all(key)) {
      if (last_seq !== null && forgetRequest(last_seq, toSeq)) this.#forget.run(no);
    }
  }
}
