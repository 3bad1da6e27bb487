import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Strategy } from "../src/core/types.js";
import { exportNamespace } from "../src/portability/export.js";
import { importLines } from "../src/portability/import.js";
import { encodeThreadLine } from "../src/portability/thread-line.js";
import { createMemoryStore } from "../src/store/memory/index.js";
import { createSqliteStore } from "../src/store/sqlite/index.js";
import type { Store } from "../src/store/store.js";

/**
 * Export and import of a fork family: one parent of PARENT messages and
 * FORKS forks of it near its end, each with OWN messages of its own. Prints,
 * per store, the export file's bytes beside what self-contained lines (every
 * fork with all its messages, as before thread.v2) would take, and the
 * export's and import's wall time.
 *
 *   npm run build && node dist/bench/export-forks.js
 */

const PARENT = 100_000;
const FORKS = 100;
const OWN = 5;
const BATCH = 1_000;
const STRATEGY: Strategy = { kind: "window", window: 20, excludeSystem: false, maxStored: 100_000 };

async function add(store: Store, threadId: string, contents: string[], now: number) {
  await store.append({
    namespace: "ns",
    threadId,
    messages: contents.map((content) => ({ role: "user" as const, content })),
    strategy: STRATEGY,
    defaultStrategy: STRATEGY,
    replaceStrategy: false,
    requestId: "",
    requestHash: "",
    expectedLastSeq: undefined,
    now,
  });
}

async function family(store: Store): Promise<void> {
  for (let from = 0; from < PARENT; from += BATCH) {
    const batch = Array.from({ length: BATCH }, (_, i) => `message ${from + i + 1} of the parent`);
    await add(store, "parent", batch, 1_000 + from);
  }
  for (let i = 0; i < FORKS; i++) {
    const id = `fork-${String(i).padStart(3, "0")}`;
    await store.fork({
      namespace: "ns",
      threadId: "parent",
      newThreadId: id,
      atSeq: PARENT - FORKS + i,
      expectedLastSeq: undefined,
      strategy: undefined,
      labels: undefined,
      ttlMs: undefined,
      requestId: "",
      requestHash: "",
      now: 200_000 + i,
    });
    await add(
      store,
      id,
      Array.from({ length: OWN }, (_, j) => `own ${j} of ${id}`),
      300_000 + i,
    );
  }
}

/** Bytes of the lines an export without sharing writes: every thread whole. */
async function wholeBytes(store: Store): Promise<number> {
  let bytes = 0;
  for (const threadId of await store.listThreads("ns", "", 1_000)) {
    const snap = await store.read("ns", threadId);
    if (snap === undefined) continue;
    bytes +=
      encodeThreadLine({ ...snap.thread, namespace: "ns", messages: snap.messages }).length + 1;
  }
  return bytes;
}

async function* linesOf(texts: string[]): AsyncIterable<string> {
  yield* texts;
}

async function measure(name: string, open: () => Store): Promise<void> {
  const source = open();
  await family(source);
  const lines: string[] = [];
  let t = performance.now();
  await exportNamespace(source, "ns", async (line) => {
    lines.push(line);
  });
  const exportMs = performance.now() - t;
  const bytes = lines.reduce((n, l) => n + Buffer.byteLength(l), 0);
  const whole = await wholeBytes(source);
  await source.close();
  const target = open();
  t = performance.now();
  const outcome = await importLines(target, linesOf(lines));
  const importMs = performance.now() - t;
  await target.close();
  console.log(
    `${name}: ${lines.length} lines, ${(bytes / 1e6).toFixed(2)} MB (whole lines: ${(whole / 1e6).toFixed(1)} MB, ${(whole / bytes).toFixed(0)}x); export ${exportMs.toFixed(0)} ms, import ${importMs.toFixed(0)} ms (${outcome.imported} threads)`,
  );
}

const dir = mkdtempSync(join(tmpdir(), "windlass-export-forks-"));
try {
  console.log(`parent ${PARENT} messages, ${FORKS} forks near its end with ${OWN} own each`);
  await measure("memory", () => createMemoryStore());
  let n = 0;
  await measure("sqlite", () => createSqliteStore(join(dir, `db-${n++}.sqlite`)));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
