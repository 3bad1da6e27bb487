import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { type PostgresServer, startPostgresServer } from "../support/postgres-server.js";
import {
  killHard,
  type ServerProcess,
  startServerProcess,
  stopGracefully,
} from "../support/sqlite-server.js";
import { createGrpcClient, type MemoryGrpcClient } from "../transport/clients.js";

/**
 * Nothing acknowledged is lost (README, Stores: Postgres), through the
 * compiled server on a real PostgreSQL: the server is killed with SIGKILL
 * in the middle of concurrent Adds, cycle after cycle; then PostgreSQL
 * itself is killed with SIGKILL and restarted while the Adds go on. Each
 * writer retries an Add that failed or was in flight with the same
 * request_id, as a client does, so every message ends up stored exactly
 * once, at the seq its acknowledgement gave.
 */

const CYCLES = 3;
const strategy = { kind: { case: "buffer" as const, value: {} }, maxStored: 100_000 };
const THREADS = ["solo-0", "solo-1", "solo-2", "solo-3", "solo-4", "solo-5", "shared", "shared"];

interface Writer {
  readonly name: string;
  readonly threadId: string;
  next: number;
  /** The Add whose outcome is not known yet (sent, not acknowledged). */
  pending: string | undefined;
}

/** What the writers sent and what was acknowledged, per thread: content -> seq. */
class Ledger {
  readonly sent = new Map<string, Set<string>>();
  readonly acked = new Map<string, Map<string, number>>();
  count = 0;
  retried = 0;
  #waiters: { at: number; resolve: () => void }[] = [];

  ack(threadId: string, content: string, seq: number): void {
    let m = this.acked.get(threadId);
    if (m === undefined) {
      m = new Map();
      this.acked.set(threadId, m);
    }
    m.set(content, seq);
    this.count++;
    for (const w of this.#waiters.filter((x) => this.count >= x.at)) w.resolve();
    this.#waiters = this.#waiters.filter((x) => this.count < x.at);
  }

  /** Resolves once `n` more Adds have been acknowledged. */
  more(n: number): Promise<void> {
    const at = this.count + n;
    return new Promise((resolve) => this.#waiters.push({ at, resolve }));
  }
}

describe("Postgres store under kill -9", () => {
  let postgres: PostgresServer;
  let url: string;
  const servers: ServerProcess[] = [];
  const clients: MemoryGrpcClient[] = [];
  beforeAll(async () => {
    postgres = await startPostgresServer();
    url = await postgres.createDatabase();
  }, 60_000);
  afterAll(async () => {
    for (const c of clients) c.close();
    for (const s of servers) await killHard(s.child);
    await postgres?.stop();
  });

  async function start(): Promise<MemoryGrpcClient> {
    const server = await startServerProcess(["--store", url, "--event-retention", "1000000"]);
    servers.push(server);
    const client = createGrpcClient(server.address);
    clients.push(client);
    return client;
  }

  const ledger = new Ledger();
  const writers: Writer[] = THREADS.map((threadId, i) => ({
    name: `w${i}`,
    threadId,
    next: 1,
    pending: undefined,
  }));

  /** One Add of the writer's pending message (a new one when none is pending). */
  async function addOnce(client: MemoryGrpcClient, w: Writer): Promise<void> {
    const content = w.pending ?? `${w.name}#${w.next++}`;
    w.pending = content;
    let sent = ledger.sent.get(w.threadId);
    if (sent === undefined) {
      sent = new Set();
      ledger.sent.set(w.threadId, sent);
    }
    sent.add(content);
    const r = await client.add({
      threadId: w.threadId,
      strategy,
      requestId: content,
      messages: [{ role: Role.USER, content }],
    });
    w.pending = undefined;
    ledger.ack(w.threadId, content, Number(r.firstSeq));
  }

  /** Every thread read back: acknowledged messages missing, and anything else amiss. */
  async function verify(client: MemoryGrpcClient): Promise<{ lost: string[]; wrong: string[] }> {
    const lost: string[] = [];
    const wrong: string[] = [];
    for (const threadId of new Set(THREADS)) {
      const got = await client.get({ threadId, limit: 0 });
      const seqs = got.messages.map((m) => Number(m.seq));
      if (seqs.some((s, i) => s !== i + 1)) wrong.push(`${threadId}: seqs not 1..n`);
      const contents = got.messages.map((m) => m.content);
      if (new Set(contents).size !== contents.length) wrong.push(`${threadId}: stored twice`);
      const sent = ledger.sent.get(threadId) ?? new Set<string>();
      if (contents.some((c) => !sent.has(c))) wrong.push(`${threadId}: never sent`);
      const bySeq = new Map(got.messages.map((m) => [Number(m.seq), m.content]));
      for (const [content, seq] of ledger.acked.get(threadId) ?? []) {
        if (bySeq.get(seq) !== content) lost.push(`${threadId}:${seq}`);
      }
    }
    return { lost, wrong };
  }

  /** Retries every pending Add with its request_id until it is acknowledged. */
  async function settlePending(client: MemoryGrpcClient): Promise<void> {
    for (const w of writers) {
      if (w.pending === undefined) continue;
      ledger.retried++;
      await addOnce(client, w);
    }
  }

  it("loses no acknowledged Add when the server is killed mid-write", {
    timeout: 120_000,
  }, async () => {
    for (let cycle = 1; cycle <= CYCLES; cycle++) {
      const client = await start();
      const check = await verify(client);
      expect(check).toEqual({ lost: [], wrong: [] });
      await settlePending(client);
      let killed = false;
      const running = writers.map(async (w) => {
        while (!killed) {
          try {
            await addOnce(client, w);
          } catch (err) {
            if (killed) return;
            throw err;
          }
        }
      });
      // Killed at a point counted in writes, not time, so each cycle crashes mid-work.
      await Promise.race([
        ledger.more(writers.length * 5 + Math.floor(Math.random() * 200)),
        ...running,
      ]);
      killed = true;
      const server = servers.at(-1);
      if (server !== undefined) await killHard(server.child);
      await Promise.all(running);
      client.close();
    }
    const client = await start();
    await settlePending(client);
    const check = await verify(client);
    console.log(
      `postgres server crash test: cycles=${CYCLES} acknowledged=${ledger.count} lost=${check.lost.length} ` +
        `wrong=${check.wrong.length} (in flight at a kill, then retried: ${ledger.retried})`,
    );
    expect(check).toEqual({ lost: [], wrong: [] });
    expect(ledger.count).toBeGreaterThan(CYCLES * writers.length * 5);
  });

  it("loses no acknowledged Add when PostgreSQL is killed and restarted under load", {
    timeout: 120_000,
  }, async () => {
    const client = await start();
    const server = servers.at(-1);
    if (server === undefined) throw new Error("no server");
    let stop = false;
    let refused = 0;
    const running = writers.map(async (w) => {
      while (!stop) {
        try {
          await addOnce(client, w);
        } catch (err) {
          // The server must ride the outage out, never exit.
          if (server.child.exitCode !== null || server.child.signalCode !== null) throw err;
          // UNAVAILABLE while PostgreSQL is down: the same Add again, after a client's backoff.
          refused++;
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    });
    await ledger.more(writers.length * 5);
    await postgres.kill();
    await postgres.restart();
    await Promise.race([ledger.more(writers.length * 10), ...running]);
    stop = true;
    await Promise.all(running);
    await settlePending(client);
    const check = await verify(client);
    console.log(
      `postgres restart test: acknowledged=${ledger.count} lost=${check.lost.length} ` +
        `wrong=${check.wrong.length} refused while down=${refused}`,
    );
    expect(check).toEqual({ lost: [], wrong: [] });
    expect(refused).toBeGreaterThan(0);

    // The event log went down with the same transactions: messages_added covers each seq once.
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    try {
      const r = await db.query<{ thread_id: string; first: string; last: string }>(
        `SELECT thread_id, body::jsonb->>'firstSeq' AS first, body::jsonb->>'lastSeq' AS last FROM events
         WHERE type = 'messages_added' ORDER BY seq`,
      );
      for (const threadId of new Set(THREADS)) {
        const covered = r.rows
          .filter((e) => e.thread_id === threadId)
          .flatMap((e) =>
            Array.from(
              { length: Number(e.last) - Number(e.first) + 1 },
              (_, i) => Number(e.first) + i,
            ),
          );
        const n = (await client.get({ threadId, limit: 0 })).messages.length;
        expect(covered).toEqual(Array.from({ length: n }, (_, i) => i + 1));
      }
    } finally {
      await db.end();
    }
    const last = servers.at(-1);
    if (last !== undefined) expect(await stopGracefully(last.child)).toBe(0);
  });
});
