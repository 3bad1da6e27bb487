import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import type { LineageEntry } from "../../src/core/lineage.js";
import { createSqliteStore } from "../../src/store/sqlite/index.js";
import { killHard } from "../support/sqlite-server.js";

/**
 * A process writing Forks, Adds and Clears to a SQLite file is killed with
 * SIGKILL mid-stream. Each Fork is one transaction, so the file reopened
 * must hold whole Forks only: every frozen segment's reference count equals
 * the lineage entries naming it, the namespace's usage equals the messages
 * stored (each once), and every thread reads contiguous seqs up to last_seq.
 * The writer is the compiled store (dist/, as the write worker needs anyway).
 */

const STORE = new URL("../../dist/src/store/sqlite/index.js", import.meta.url).href;

/** Forks in a loop: a long parent, forks of it and of forks, Adds to both, Clears. */
const WRITER = `
const { createSqliteStore } = await import(process.env.STORE);
const s = createSqliteStore(process.env.DB, {});
const strategy = { kind: "buffer", maxStored: 100000 };
const add = (threadId, n) => s.append({ namespace: "ns", threadId, strategy: undefined,
  defaultStrategy: strategy, replaceStrategy: false, requestId: "", requestHash: "",
  expectedLastSeq: undefined, now: Date.now(),
  messages: Array.from({ length: n }, (_, i) => ({ role: "user", content: threadId + ":" + i })) });
await add("p", 300);
for (let i = 0; ; i++) {
  const parent = i % 3 === 0 ? "p" : "f" + (i - 1);
  await s.fork({ namespace: "ns", threadId: parent, newThreadId: "f" + i, atSeq: undefined,
    expectedLastSeq: undefined, strategy: undefined, labels: undefined, ttlMs: undefined,
    requestId: "", requestHash: "", now: Date.now() }).catch(() => {});
  await add(i % 2 === 0 ? "p" : "f" + i, 130);
  if (i % 5 === 4) await s.clear("ns", "f" + (i - 3), Date.now());
  if (i === 20) process.stdout.write("ready\\n");
}
`;

describe("SQLite store killed during Forks", () => {
  const dir = mkdtempSync(join(tmpdir(), "windlass-fork-crash-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("reopens with every Fork whole: reference counts, usage and seqs agree", {
    timeout: 60_000,
  }, async () => {
    const path = join(dir, "crash.db");
    // A file, not -e: the store's worker thread would inherit --input-type.
    const script = join(dir, "writer.mjs");
    writeFileSync(script, WRITER);
    const child = spawn(process.execPath, [script], {
      env: { ...process.env, STORE, DB: path },
      stdio: ["ignore", "pipe", "inherit"],
    });
    await new Promise<void>((resolve, reject) => {
      child.stdout?.on("data", (d: Buffer) => {
        if (d.toString().includes("ready")) resolve();
      });
      child.once("exit", (code) => reject(new Error(`the writer exited (${code})`)));
    });
    // Somewhere in the middle of the next writes.
    await new Promise((r) => setTimeout(r, 150 + Math.floor(Math.random() * 200)));
    await killHard(child);

    // Opening runs recovery (the WAL) and the lock takeover of a dead process.
    const s = createSqliteStore(path, {});
    const ids = await s.listThreads("ns", "", 1000);
    expect(ids.length).toBeGreaterThan(5);
    for (const id of ids) {
      const snap = await s.read("ns", id);
      const seqs = (snap?.messages ?? []).map((m) => m.seq);
      expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1));
      expect(seqs.at(-1)).toBe(snap?.thread.lastSeq);
    }
    await s.close();
    checkAccounts(path);
  });
});

/** Reference counts equal the entries naming each segment; usage equals the rows stored. */
function checkAccounts(path: string): void {
  const db = new Database(path, { readonly: true });
  try {
    const named = new Map<number, number>();
    const lineages = db.prepare("SELECT lineage FROM threads WHERE lineage IS NOT NULL").pluck();
    for (const json of lineages.all() as string[]) {
      for (const e of JSON.parse(json) as LineageEntry[]) {
        named.set(Number(e.segment), (named.get(Number(e.segment)) ?? 0) + 1);
      }
    }
    const refs = db.prepare("SELECT id, refs FROM segments").all() as {
      id: number;
      refs: number;
    }[];
    expect(new Map(refs.map((r) => [r.id, r.refs]))).toEqual(named);
    expect(refs.length).toBeGreaterThan(0);
    const usage = db
      .prepare("SELECT threads, messages FROM namespace_usage WHERE namespace = 'ns'")
      .get();
    const stored = db.prepare("SELECT count(*) FROM messages").pluck().get();
    const threads = db.prepare("SELECT count(*) FROM threads").pluck().get();
    expect(usage).toEqual({ threads, messages: stored });
    expect(db.pragma("integrity_check", { simple: true })).toBe("ok");
  } finally {
    db.close();
  }
}
