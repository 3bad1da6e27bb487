/**
 * The Redis store's incarnation: "<store id>.<secret>" under the key
 * `<prefix>:resume-token-key`, which signs every resume token and vanishes
 * with the data (a restart without persistence, FLUSHALL, a failover to a
 * copy without it). Every replica checks it on every reconnect, every
 * second, and atomically inside every event read and head read (lua/events.ts
 * READ_EVENTS, HEAD); on a change it adopts the new one: cursors of the old
 * history are out_of_range, caches are dropped, stream readers start the new
 * history from its first event, open Watch streams end with out_of_range. A
 * signed cursor beyond the head means the history was rewound with the key
 * kept (an append-only file that lost its last second, a failover to a
 * replica that lagged): the replica that meets it rotates the incarnation
 * (ROTATE_INCARNATION), with the same effect on every replica.
 */
import type { MemoryError } from "../../core/errors.js";
import { historyLostError, newStoreId, newTokenSecret, ResumeTokens } from "../resume-token.js";
import { asArray, asString } from "./codec.js";
import { type Commands, sleep } from "./commands.js";
import { MARK_SLOT, ROTATE_INCARNATION } from "./lua/events.js";

/** How often a replica checks the store's incarnation, besides reconnects and Watch reads. */
export const DEFAULT_INCARNATION_CHECK_MS = 1000;

/** Why a cursor of an earlier incarnation is refused. */
export const HISTORY_LOST =
  "the store's history was lost (Redis restarted empty, was flushed or failed over to a copy without it)";

export function historyLost(): MemoryError {
  return historyLostError(HISTORY_LOST);
}

/** The resume-token codec of an incarnation "<store id>.<secret>". */
export function tokensOf(incarnation: string, otherStore: string): ResumeTokens {
  const [storeId = "", secret = ""] = incarnation.split(".");
  return new ResumeTokens(storeId, secret, otherStore, /^(0|[1-9]\d{0,19})-(0|[1-9]\d{0,19})$/);
}

/**
 * The incarnation the key holds, set first to a new one when it is gone:
 * created once per deployment (key prefix) and shared by every replica,
 * until the data is lost with it.
 */
export async function currentIncarnation(
  key: string,
  send: (args: readonly string[]) => Promise<unknown>,
): Promise<string> {
  const proposal = `${newStoreId()}.${newTokenSecret()}`;
  const held = await send(["SET", key, proposal, "NX", "GET"]);
  return held === null ? proposal : asString(held);
}

/** How often, and how long apart, a recorded but unmarked slot copy is looked at again. */
const MARK_WAITS = 3;
const MARK_WAIT_MS = 20;

/** Slot copies re-marked at a time after a rotation (each one script call, pipelined). */
const MARKER_BATCH = 256;

/** The incarnation this replica has adopted, and how it moves to another. */
export class Incarnation {
  #value: string;
  #tokens: ResumeTokens;
  #checking: Promise<void> | undefined;
  /** Slot copies being recorded or marked (markerMissed), by key: at most one each. */
  readonly #marking = new Map<string, Promise<void>>();
  /**
   * Whether this replica may vouch for its view of the store: false from a
   * reconnect until the incarnation has been checked on it (health reports
   * not serving meanwhile).
   */
  checked = true;

  constructor(
    private readonly io: Commands,
    private readonly key: string,
    initial: string,
    /** Called after a change: drop what belongs to the old history. */
    private readonly onChange: () => void,
    /** Redis Cluster: the set of the slots' copies of the incarnation (keys.ts). */
    private readonly markerRegistry?: string,
  ) {
    this.#value = initial;
    this.#tokens = tokensOf(initial, "it refers to the history of another database");
  }

  get value(): string {
    return this.#value;
  }

  /** The codec of this incarnation's resume tokens. */
  get tokens(): ResumeTokens {
    return this.#tokens;
  }

  /**
   * Reads the incarnation key (creating it if the data was lost) and adopts
   * what it holds. One check at a time; callers share it.
   */
  check(): Promise<void> {
    this.#checking ??= (async () => {
      try {
        const before = this.#value;
        this.adopt(
          await currentIncarnation(this.key, (args) =>
            this.io.send(this.io.main, args, this.io.timeoutMs),
          ),
        );
        if (this.#value !== before) await this.#remark(before);
        this.checked = true;
      } finally {
        this.#checking = undefined;
      }
    })();
    return this.#checking;
  }

  /**
   * Moves this replica to `value` if it is not the incarnation in force here:
   * every cursor of the old one is refused from now on (out_of_range), and
   * onChange drops caches and tells subscribers to look again: never a
   * silent skip, never a resume into another history.
   */
  adopt(value: string): void {
    if (value === this.#value) return;
    this.#value = value;
    this.#tokens = tokensOf(value, HISTORY_LOST);
    this.onChange();
  }

  /**
   * A cursor this replica issued lies beyond the namespace's history: events
   * were lost (a restart that kept an older copy, a failover to a replica
   * that lagged). The incarnation is replaced, once across every replica,
   * so that the cursors of the longer history are all refused.
   */
  async rotate(found: string): Promise<void> {
    const next = `${newStoreId()}.${newTokenSecret()}`;
    this.adopt(asString(await this.io.run(ROTATE_INCARNATION, [this.key], [found, next])));
    await this.#remark(found);
  }

  /** Redis Cluster: moves every recorded slot copy from `from` to the incarnation in force. */
  async #remark(from: string): Promise<void> {
    const registry = this.markerRegistry;
    if (registry === undefined) return;
    let cursor = "0";
    do {
      const [next, found] = asArray(
        await this.io.command(["SSCAN", registry, cursor, "COUNT", String(MARKER_BATCH)]),
      );
      cursor = asString(next);
      await Promise.all(
        asArray(found).map((m) => this.io.run(MARK_SLOT, [asString(m)], [from, this.#value])),
      );
    } while (cursor !== "0");
  }

  /**
   * A script found `marker`, the namespace's copy of the incarnation
   * (keys.ts), holding `found` (null: missing) instead of `issuedIn`. On one
   * node that copy is the deployment key: the check adopts what it holds.
   * On a cluster, with the deployment key still at `issuedIn`: a slot never
   * recorded is new (a head read, `mayBeNew`: it is recorded, then marked);
   * a recorded one missing or stale lost its data (a primary restarted
   * empty), so the incarnation rotates and no cursor of the lost history
   * resumes in the new one.
   */
  async markerMissed(
    issuedIn: string,
    marker: string,
    found: unknown,
    mayBeNew: boolean,
  ): Promise<void> {
    await this.check();
    const registry = this.markerRegistry;
    if (registry === undefined || this.#value !== issuedIn) return;
    // One at a time per slot copy here: head reads of one new slot meet it together.
    const running = this.#marking.get(marker);
    if (running !== undefined) return running;
    const marking = this.#mark(registry, issuedIn, marker, found, mayBeNew).finally(() =>
      this.#marking.delete(marker),
    );
    this.#marking.set(marker, marking);
    return marking;
  }

  async #mark(
    registry: string,
    issuedIn: string,
    marker: string,
    found: unknown,
    mayBeNew: boolean,
  ): Promise<void> {
    // Recorded before marked, so a marked slot is always a recorded one.
    const recordedNow = Number(await this.io.command(["SADD", registry, marker])) === 1;
    if (mayBeNew && recordedNow) {
      await this.io.run(MARK_SLOT, [marker], [typeof found === "string" ? found : "", issuedIn]);
      return;
    }
    // Recorded by another replica that may not have marked it yet: give it a moment.
    for (let i = 0; mayBeNew && i < MARK_WAITS; i++) {
      if ((await this.io.command(["GET", marker])) === issuedIn) return;
      await sleep(MARK_WAIT_MS);
    }
    await this.rotate(issuedIn);
  }
}
