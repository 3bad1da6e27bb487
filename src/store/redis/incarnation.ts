/**
 * The Redis store's incarnation: "<store id>.<secret>" under the key
 * `<prefix>:resume-token-key`, which signs every resume token and vanishes
 * with the data (see redis-store.ts, Incarnation).
 */
import type { MemoryError } from "../../core/errors.js";
import { historyLostError, newStoreId, newTokenSecret, ResumeTokens } from "../resume-token.js";
import { asString } from "./codec.js";

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
