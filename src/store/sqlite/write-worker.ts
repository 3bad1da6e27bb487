import { parentPort, workerData } from "node:worker_threads";
import type { StoreLimits } from "../store.js";
import { openWriteConnection } from "./connection.js";
import { WriteGate } from "./write-gate.js";
import { createWriteContext } from "./writes/context.js";
import { GroupCommit } from "./writes/group-commit.js";
import type { QueuedWrite } from "./writes/ops.js";
import { toWireError, writeBlockedBy } from "./writes/outcomes.js";

/**
 * The SQLite store's write worker: it owns the write connection, so no fsync
 * ever runs on the server's event loop. Writes that arrive while a group is
 * committing wait in the port and form the next group: one transaction and
 * one fsync for all of them (group commit), each answered only after that
 * COMMIT returned. Messages from the store:
 *   { type: "writes", writes: QueuedWrite[] }, { type: "close" } and
 *   { type: "ping", probe } (health: answered once the writes that came
 *   before it are done; with `probe`, after a small write tells whether a
 *   full disk has room again);
 * to it: { type: "ready" }, { type: "done", outcomes }, { type: "failed", error }
 * (could not open), { type: "pong", blockedBy? } (why the probe's write
 * failed), { type: "closed" }.
 */

export interface WriteWorkerData {
  path: string;
  busyTimeoutMs: number;
  pageCacheBytes: number;
  limits: StoreLimits;
  /** PRAGMA max_page_count: the database's size limit; absent: SQLite's own. */
  maxPageCount?: number;
  /** WriteGate's buffer and its slot count. */
  gate: SharedArrayBuffer;
  gateCapacity: number;
}

/** The connection's own busy timeout: the slice in which the writer waits for a lock. */
const LOCK_WAIT_SLICE_MS = 25;

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
db.pragma(`busy_timeout = ${LOCK_WAIT_SLICE_MS}`);
if (data.maxPageCount !== undefined) db.pragma(`max_page_count = ${data.maxPageCount}`);
const gate = new WriteGate(data.gate, data.gateCapacity);
const writer = new GroupCommit(db, createWriteContext(db, data.limits), gate, data.busyTimeoutMs);
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
  for (const probe of pingsAfterFlush.splice(0)) answerPing(probe);
  if (closing) {
    db.close();
    port?.postMessage({ type: "closed" });
    port?.close();
  }
}

type FromStore =
  | { type: "writes"; writes: QueuedWrite[] }
  | { type: "close" }
  | { type: "ping"; probe: boolean };

function answerPing(probe: boolean): void {
  const error = probe ? writer.probeSpace() : undefined;
  port?.postMessage(
    error === undefined ? { type: "pong" } : { type: "pong", blockedBy: writeBlockedBy(error) },
  );
}

/** Pings that came with writes: answered once those writes are done. */
const pingsAfterFlush: boolean[] = [];

port.on("message", (m: FromStore) => {
  if (m.type === "ping") {
    if (scheduled) pingsAfterFlush.push(m.probe);
    else answerPing(m.probe);
    return;
  }
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
