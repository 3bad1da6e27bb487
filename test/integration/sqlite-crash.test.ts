import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { ResumeTokens } from "../../src/store/resume-token.js";
import { createSqliteStore } from "../../src/store/sqlite/index.js";
import {
  killHard,
  type ServerProcess,
  startServerProcess,
  stopGracefully,
} from "../support/sqlite-server.js";
import { createGrpcClient, type MemoryGrpcClient } from "../transport/clients.js";

/**
 * Acknowledged writes survive kill -9 (README, Stores): the compiled
 * server on a SQLite file is killed in the middle of concurrent Adds, cycle
 * after cycle; after each kill the file must pass integrity_check, and after
 * each restart every acknowledged message must be there, at its seq, once.
 * Each writer then retries the Add that was in flight when the server died
 * (same request_id), as a client would: every message ends up stored exactly
 * once, whether or not the killed server had committed it.
 */

const CYCLES = 5;
const SOLO_WRITERS = 8;
const SHARED_WRITERS = 2;
const SHARED_THREAD = "shared";
/** Large enough that nothing is trimmed: every message ever added stays readable. */
const MAX_STORED = 100_000;
const strategy = { kind: { case: "buffer" as const, value: {} }, maxStored: MAX_STORED };

interface Writer {
  readonly name: string;
  readonly threadId: string;
  /** Number of the next message this writer sends. */
  next: number;
  /** The Add sent when the server was killed, whose outcome is unknown. */
  inFlight: string | undefined;
}

interface Ack {
  readonly seq: number;
  readonly content: string;
  readonly writer: string;
}

describe("SQLite store under kill -9", () => {
  const dir = mkdtempSync(join(tmpdir(), "windlass-crash-"));
  const path = join(dir, "memory.db");
  const children: ServerProcess[] = [];
  const clients: MemoryGrpcClient[] = [];
  afterEach(async () => {
    for (const c of clients) c.close();
    clients.length = 0;
    for (const s of children) await killHard(s.child);
    children.length = 0;
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  async function start(): Promise<MemoryGrpcClient> {
    const server = await startServerProcess([
      "--store",
      `sqlite:${path}`,
      "--event-retention",
      "1000000",
    ]);
    children.push(server);
    const client = createGrpcClient(server.address);
    clients.push(client);
    return client;
  }

  it("loses no acknowledged Add over repeated crashes", { timeout: 60_000 }, async () => {
    const writers: Writer[] = [
      ...Array.from({ length: SOLO_WRITERS }, (_, i) => ({
        name: `solo${i}`,
        threadId: `solo-${i}`,
        next: 1,
        inFlight: undefined,
      })),
      ...Array.from({ length: SHARED_WRITERS }, (_, i) => ({
        name: `shared${i}`,
        threadId: SHARED_THREAD,
        next: 1,
        inFlight: undefined,
      })),
    ];
    const threadIds = [...new Set(writers.map((w) => w.threadId))];
    /** Every acknowledged Add, per thread, in the order the acknowledgements came. */
    const acked = new Map<string, Ack[]>(threadIds.map((t) => [t, []]));
    const sent = new Map<string, Set<string>>(threadIds.map((t) => [t, new Set()]));
    let acknowledged = 0;
    /** Called after each acknowledgement: lets a cycle wait for its writes. */
    let onAck: (() => void) | undefined;
    let retriedInFlight = 0;
    /** Of those, how many the killed server had committed without answering. */
    let committedUnanswered = 0;
    /** Acknowledged messages found missing or changed after a restart ("thread:seq"). */
    const lost = new Set<string>();
    /** Anything else wrong with what a restarted server returned. */
    const anomalies = new Set<string>();

    const add = async (client: MemoryGrpcClient, w: Writer, content: string): Promise<void> => {
      sent.get(w.threadId)?.add(content);
      const r = await client.add({
        threadId: w.threadId,
        strategy,
        requestId: content,
        messages: [{ role: Role.USER, content }],
      });
      acked.get(w.threadId)?.push({ seq: Number(r.firstSeq), content, writer: w.name });
      acknowledged++;
      onAck?.();
    };

    /** Reads every thread back; records acknowledged messages missing and anything amiss. */
    const verify = async (client: MemoryGrpcClient, when: string): Promise<void> => {
      for (const threadId of threadIds) {
        const got = await client.get({ threadId, limit: 0 });
        const seqs = got.messages.map((m) => Number(m.seq));
        // Seqs 1..n: none duplicated, none skipped, in order.
        if (seqs.some((seq, i) => seq !== i + 1)) anomalies.add(`${when} ${threadId}: seqs`);
        const contents = got.messages.map((m) => m.content);
        if (new Set(contents).size !== contents.length) {
          anomalies.add(`${when} ${threadId}: a message stored twice`);
        }
        const known = sent.get(threadId) ?? new Set<string>();
        if (contents.some((c) => !known.has(c))) {
          anomalies.add(`${when} ${threadId}: a message never sent`);
        }
        const bySeq = new Map(got.messages.map((m) => [Number(m.seq), m.content]));
        for (const a of acked.get(threadId) ?? []) {
          if (bySeq.get(a.seq) !== a.content) lost.add(`${threadId}:${a.seq}`);
        }
        // Each writer's acknowledged messages have seqs in the order it sent them.
        for (const w of writers.filter((x) => x.threadId === threadId)) {
          const mine = (acked.get(threadId) ?? []).filter((a) => a.writer === w.name);
          if (mine.some((a, i) => i > 0 && a.seq <= (mine[i - 1]?.seq ?? 0))) {
            anomalies.add(`${when} ${w.name}: acknowledged out of order`);
          }
        }
      }
    };

    /** What a client does after an Add failed with UNAVAILABLE: the same Add again. */
    const retryInFlight = async (client: MemoryGrpcClient): Promise<number> => {
      let n = 0;
      for (const w of writers) {
        if (w.inFlight === undefined) continue;
        const stored = await client.get({ threadId: w.threadId, limit: 0 });
        const content = w.inFlight;
        if (stored.messages.some((m) => m.content === content)) committedUnanswered++;
        await add(client, w, content);
        w.inFlight = undefined;
        w.next++;
        n++;
      }
      return n;
    };

    for (let cycle = 1; cycle <= CYCLES; cycle++) {
      const client = await start();
      await verify(client, `restart ${cycle}`);
      retriedInFlight += await retryInFlight(client);
      const server = children.at(-1);
      if (server === undefined) throw new Error("no server");
      let killed = false;
      const running = writers.map(async (w) => {
        // Bounded: the kill ends it long before; the bound only guards a hang.
        for (let i = 0; i < 100_000 && !killed; i++) {
          const content = `${w.name}#${w.next}`;
          w.inFlight = content;
          try {
            await add(client, w, content);
          } catch (err) {
            if (killed) return;
            throw err;
          }
          w.inFlight = undefined;
          w.next++;
        }
      });
      // Kill at a random point measured in writes, not time: a few per writer
      // at least, so every cycle crashes in the middle of real work however
      // slow the machine is.
      const killAt = acknowledged + writers.length * 3 + Math.floor(Math.random() * 300);
      await new Promise<void>((resolve) => {
        onAck = () => {
          if (acknowledged >= killAt) resolve();
        };
        // A writer that fails ends the wait too; the failure surfaces below.
        void Promise.all(running).then(
          () => resolve(),
          () => resolve(),
        );
      });
      onAck = undefined;
      killed = true;
      await killHard(server.child);
      await Promise.all(running);
      client.close();

      const db = new Database(path, { readonly: true });
      try {
        expect(db.pragma("integrity_check", { simple: true })).toBe("ok");
        expect(db.pragma("foreign_key_check")).toEqual([]);
      } finally {
        db.close();
      }
    }

    const client = await start();
    await verify(client, "last restart");
    retriedInFlight += await retryInFlight(client);
    await verify(client, "after the last retries");
    console.log(
      `sqlite crash test: cycles=${CYCLES} acknowledged=${acknowledged} lost=${lost.size} ` +
        `anomalies=${anomalies.size} ` +
        `(writers=${writers.length}; in flight at a kill, then retried: ${retriedInFlight}, ` +
        `of which the killed server had committed: ${committedUnanswered})`,
    );
    const last = children.at(-1);
    if (last === undefined) throw new Error("no server");
    expect(await stopGracefully(last.child)).toBe(0);

    // The event log went down with the same transactions: each thread's
    // messages_added events cover its seqs exactly once, in order.
    // The cursor before the first event, signed with the file's own key.
    const meta = new Database(path, { readonly: true });
    const key = meta.prepare<[string], unknown>("SELECT value FROM meta WHERE key = ?").pluck();
    const tokens = new ResumeTokens(
      String(key.get("database_id")),
      String(key.get("token_secret")),
      "",
    );
    meta.close();
    const store = createSqliteStore(path, { eventRetention: 1_000_000 });
    try {
      const events = await store.readEvents("", tokens.issue("", 0), 10_000_000);
      for (const threadId of threadIds) {
        const covered: number[] = [];
        for (const e of events) {
          if (e.threadId !== threadId || e.type !== "messages_added") continue;
          for (let s = e.firstSeq; s <= e.lastSeq; s++) covered.push(s);
        }
        const thread = await store.getThread("", threadId);
        expect(covered).toEqual(Array.from({ length: thread?.lastSeq ?? -1 }, (_, i) => i + 1));
      }
    } finally {
      await store.close();
    }

    expect(acknowledged).toBeGreaterThan(CYCLES * writers.length);
    expect([...lost]).toEqual([]);
    expect([...anomalies]).toEqual([]);
  });
});
