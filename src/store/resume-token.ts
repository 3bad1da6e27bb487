import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { invalidArgument, MemoryError } from "../core/errors.js";

/**
 * The one codec of event cursors (Watch resume tokens) for every store.
 *
 * A cursor is `<store id>.<position>.<mac>`:
 * - store id: random per database (a SQLite file, a Redis key prefix, a
 *   memory store's process), so a token from another database is told apart
 *   and answered out_of_range ("re-read with Get and watch from now") instead
 *   of resuming at an unrelated position;
 * - position: the number of the event in its namespace's own sequence (1, 2,
 *   3 … per namespace, 0 before the first), so a tenant's tokens say nothing
 *   about what other tenants wrote;
 * - mac: HMAC-SHA256 over store id, namespace and position with the store's
 *   secret key, cut to 128 bits, base64url. A truncated or edited token, a
 *   forged one, or one issued for another namespace fails it and is refused
 *   with invalid_argument; it is never reinterpreted.
 *
 * The store id is checked before the MAC (another database's key is not at
 * hand), so a token whose store id alone was edited reads as another
 * database's: out_of_range, refused all the same. Tokens of the earlier,
 * unsigned formats (`legacy`) are out_of_range too: they were issued before
 * the upgrade and their history cannot be trusted to line up.
 */
export class ResumeTokens {
  readonly #storeId: string;
  readonly #secret: Buffer;
  readonly #otherStore: string;
  readonly #legacy: RegExp | undefined;
  /**
   * Recently issued tokens: every watcher of a namespace reads the same
   * recent events, and a MAC costs a few microseconds. Bounded; oldest out.
   */
  readonly #recent = new Map<string, string>();

  /**
   * @param storeId the database's id: 4 to 32 of [0-9a-z].
   * @param secret the database's secret key (see newTokenSecret).
   * @param otherStore why a token of another store id is out_of_range, e.g.
   *   "it refers to the history of another database".
   * @param legacy the shape of this store's tokens before they were signed.
   */
  constructor(storeId: string, secret: string, otherStore: string, legacy?: RegExp) {
    if (!STORE_ID.test(storeId)) throw new Error(`resume tokens: bad store id ${storeId}`);
    this.#storeId = storeId;
    this.#secret = Buffer.from(secret, "hex");
    if (this.#secret.length < 16) throw new Error("resume tokens: the secret is too short");
    this.#otherStore = otherStore;
    this.#legacy = legacy;
  }

  /** The cursor of event `position` of `namespace`. */
  issue(namespace: string, position: number): string {
    const key = `${position}\u0000${namespace}`;
    let token = this.#recent.get(key);
    if (token === undefined) {
      token = `${this.#storeId}.${position}.${this.#mac(namespace, position)}`;
      if (this.#recent.size >= RECENT_TOKENS) {
        const oldest = this.#recent.keys().next();
        if (oldest.done !== true) this.#recent.delete(oldest.value);
      }
      this.#recent.set(key, token);
    }
    return token;
  }

  /**
   * The position a cursor of `namespace` names. Throws invalid_argument for
   * anything this store did not issue for this namespace, out_of_range for a
   * token of another database or of the unsigned formats.
   */
  open(namespace: string, cursor: string): number {
    const parts = this.#split(cursor);
    const expected = Buffer.from(this.#mac(namespace, parts.position), "utf8");
    const given = Buffer.from(parts.mac, "utf8");
    if (expected.length !== given.length || !timingSafeEqual(expected, given)) {
      throw invalidArgument("resume_token", "is not a token this server issued for this namespace");
    }
    return parts.position;
  }

  /**
   * The cursor of a namespace split into `positions.length` shards (the
   * Redis store's namespace shards): one position per shard, each the
   * number of the last event of that shard's own log the holder has seen,
   * signed as one (`<store id>.<p0>_<p1>_….<mac>`).
   */
  issueVector(namespace: string, positions: readonly number[]): string {
    const joined = positions.join("_");
    return `${this.#storeId}.${joined}.${this.#mac(namespace, joined)}`;
  }

  /**
   * The positions of a cursor issueVector made for `namespace` with
   * `shards` positions; refused as open() refuses (a cursor of another
   * shard count, e.g. an unsharded one, is not one this server issued).
   */
  openVector(namespace: string, cursor: string, shards: number): number[] {
    const m = VECTOR_TOKEN.exec(cursor);
    if (m === null) {
      this.#split(cursor); // another database's, or a legacy one: out_of_range
      throw invalidArgument(
        "resume_token",
        `is not a token this server issued for this namespace (of ${shards} shards)`,
      );
    }
    const [, storeId = "", joined = "", mac = ""] = m;
    if (storeId !== this.#storeId) {
      throw outOfRange(`${this.#otherStore}; re-read with Get and watch from now`);
    }
    const positions = joined.split("_").map(Number);
    const expected = Buffer.from(this.#mac(namespace, joined), "utf8");
    const given = Buffer.from(mac, "utf8");
    if (
      positions.length !== shards ||
      expected.length !== given.length ||
      !timingSafeEqual(expected, given)
    ) {
      throw invalidArgument("resume_token", "is not a token this server issued for this namespace");
    }
    return positions;
  }

  /**
   * The position of a cursor this store issued, without checking its MAC
   * (the namespace is not known here): for ordering cursors already checked.
   */
  positionOf(cursor: string): number {
    return this.#split(cursor).position;
  }

  #split(cursor: string): { position: number; mac: string } {
    const parts = tokenParts(cursor);
    if (parts === undefined) {
      if (this.#legacy?.test(cursor) === true) {
        throw outOfRange(
          "it was issued by an earlier version of this server; re-read with Get and watch from now",
        );
      }
      throw invalidArgument("resume_token", "is not a token this server issued");
    }
    if (parts.storeId !== this.#storeId) {
      throw outOfRange(`${this.#otherStore}; re-read with Get and watch from now`);
    }
    return parts;
  }

  #mac(namespace: string, position: number | string): string {
    return createHmac("sha256", this.#secret)
      .update(`windlass-resume-v2\u0000${this.#storeId}\u0000${position}\u0000${namespace}`)
      .digest()
      .subarray(0, 16)
      .toString("base64url");
  }
}

/** A new secret key for ResumeTokens, as hex (stored once per database). */
export function newTokenSecret(): string {
  return randomBytes(32).toString("hex");
}

/** A new store id for ResumeTokens. */
export function newStoreId(): string {
  return randomBytes(6).toString("hex");
}

/**
 * The parts of a cursor in the current format, unchecked (undefined when it
 * is not in that format). For tests and diagnostics: the stores use
 * ResumeTokens.open, which also checks the MAC.
 */
export function tokenParts(
  cursor: string,
): { storeId: string; position: number; mac: string } | undefined {
  const m = TOKEN.exec(cursor);
  if (m === null) return undefined;
  const [, storeId = "", digits = "", mac = ""] = m;
  return { storeId, position: Number(digits), mac };
}

/**
 * As tokenParts, for a cursor of either format: `position` the text between
 * the dots ("<n>", or a sharded namespace's "<p0>_<p1>_…", issueVector).
 */
export function cursorParts(
  cursor: string,
): { storeId: string; position: string; mac: string } | undefined {
  const m = TOKEN.exec(cursor) ?? VECTOR_TOKEN.exec(cursor);
  if (m === null) return undefined;
  const [, storeId = "", position = "", mac = ""] = m;
  return { storeId, position, mac };
}

const RECENT_TOKENS = 4096;
const STORE_ID = /^[0-9a-z]{4,32}$/;
/** Store id, position (canonical decimal, below 2^53), 22 base64url characters. */
const TOKEN = /^([0-9a-z]{4,32})\.(0|[1-9]\d{0,14})\.([A-Za-z0-9_-]{22})$/;
/** As TOKEN, with 2 to 64 positions joined by "_" (issueVector). */
const VECTOR_TOKEN =
  /^([0-9a-z]{4,32})\.((?:0|[1-9]\d{0,14})(?:_(?:0|[1-9]\d{0,14})){1,63})\.([A-Za-z0-9_-]{22})$/;

/**
 * A cursor this store signed that its history no longer reaches, or one of
 * a history it lost: out_of_range, so the client re-reads with Get and
 * watches from now instead of resuming into events it never saw.
 */
export function historyLostError(why: string): MemoryError {
  return outOfRange(`${why}; re-read with Get and watch from now`);
}

function outOfRange(why: string): MemoryError {
  return new MemoryError("out_of_range", `resume_token: ${why}`, { field: "resume_token" });
}
