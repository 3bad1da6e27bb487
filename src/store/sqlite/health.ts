import type { StoreHealth } from "../store.js";
import { fileIdentity } from "./connection.js";
import type { WriteWorker } from "./worker-client.js";

/**
 * Serving when the write worker answers a ping within `timeoutMs`: not
 * serving once it has stopped, and while it cannot answer (waiting for a
 * lock another process holds, or stuck in a commit), since writes then
 * cannot proceed. A full disk (or the size limit reached) is reported
 * not serving too, naming it, though reads are still served and the
 * store refuses nothing but writes: a server that cannot store an Add
 * cannot do what it is for, and readiness is where an operator looks.
 * While full, each call has the worker try a small write, so health
 * turns serving again by itself once there is room, with no Add needed.
 * Not serving either once the path names another file than the one opened
 * (`openedIdentity`).
 */
export async function sqliteHealth(
  worker: WriteWorker,
  path: string,
  openedIdentity: string | undefined,
  timeoutMs: number,
): Promise<StoreHealth> {
  const stopped = worker.broken;
  if (stopped !== undefined) {
    return { serving: false, reason: `the SQLite write worker stopped: ${stopped.message}` };
  }
  if (fileIdentity(path) !== openedIdentity) {
    // The process still writes the file it opened, which nobody else will read.
    return {
      serving: false,
      reason:
        "the SQLite database file was replaced or removed while the server ran: restart the server to open the file now there",
    };
  }
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), timeoutMs);
  });
  const answer = await Promise.race([worker.ping(worker.diskFull), late]);
  clearTimeout(timer);
  if (answer === "late") {
    return {
      serving: false,
      reason: `the SQLite write worker did not answer within ${timeoutMs} ms: ${worker.activity()}`,
    };
  }
  // The worker may have stopped while the ping was out.
  const stoppedSince = worker.broken;
  if (stoppedSince !== undefined) {
    return { serving: false, reason: `the SQLite write worker stopped: ${stoppedSince.message}` };
  }
  if (answer === undefined) return { serving: true };
  return {
    serving: false,
    reason: `${answer}: writes are refused until it clears; reads are served`,
  };
}
