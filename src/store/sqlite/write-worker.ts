import { parentPort, workerData } from "node:worker_threads";
import type { StoreLimits } from "../store.js";
import { openWriteConnection } from "./schema.js";
import { createWriter, type QueuedWrite, toWireError } from "./writer.js";

/**
 * The SQLite store's write worker: it owns the write connection, so no fsync
 * ever runs on the server's event loop. Writes that arrive while a group is
 * committing wait in the port and form the next group: one transaction and
 * one fsync for all of them (group commit), each answered only after that
 * COMMIT returned. Messages from the store:
 *   { type: "writes", writes: QueuedWrite[] } and { type: "close" };
 * to it: { type: "ready" }, { type: "done", outcomes }, { type: "failed", error }
 * (could not open), { type: "closed" }.
 */

export interface WriteWorkerData {
  path: string;
  busyTimeoutMs: number;
  pageCacheBytes: number;
  limits: StoreLimits;
}

/** The most writes one transaction commits; more wait for the next group. */
const MAX_GROUP = 512;

const port = parentPort;
if (port === null) throw new Error("write-worker.ts runs as a worker thread");
const data = workerData as WriteWorkerData;

let db: ReturnType<typeof openWriteConnection>;
try {
  db = openWriteConnection(data.path, data.busyTimeoutMs, data.pageCacheBytes);
} catch (err) {
  port.postMessage({ type: "failed", error: toWireError(err) });
  process.exit(1);
}
const writer = createWriter(db, data.limits);
const queue: QueuedWrite[] = [];
let scheduled = false;
let closing = false;

/**
 * Runs after the port has delivered every message that arrived meanwhile, so
 * all writes waiting then go into one group.
 */
function flush(): void {
  scheduled = false;
  while (queue.length > 0) {
    const group = queue.splice(0, MAX_GROUP);
    port?.postMessage({ type: "done", outcomes: writer.runGroup(group) });
  }
  if (closing) {
    db.close();
    port?.postMessage({ type: "closed" });
    port?.close();
  }
}

port.on("message", (m: { type: "writes"; writes: QueuedWrite[] } | { type: "close" }) => {
  if (m.type === "writes") {
    for (const w of m.writes) queue.push(w);
  } else {
    closing = true;
  }
  if (!scheduled) {
    scheduled = true;
    setImmediate(flush);
  }
});
port.postMessage({ type: "ready" });
