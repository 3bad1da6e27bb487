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
import { asString } from "./codec.js";
import type { Commands } from "./commands.js";
import { ROTATE_INCARNATION } from "./lua/events.js";

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

/** The incarnation this replica has adopted, and how it moves to another. */
export class Incarnation {
  #value: string;
  #tokens: ResumeTokens;
  #checking: Promise<void> | undefined;
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
        this.adopt(
          await currentIncarnation(this.key, (args) =>
            this.io.send(this.io.main, args, this.io.timeoutMs),
          ),
        );
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
  }
}
