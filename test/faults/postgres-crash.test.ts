import { status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  MemoryService,
  Role,
  type WatchResponse,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import {
  type PostgresServer,
  queryPostgres,
  startPostgresServer,
} from "../support/postgres-server.js";
import {
  killHard,
  type ServerProcess,
  startServerProcess,
  stopGracefully,
} from "../support/sqlite-server.js";
import { createGrpcClient, grpcHealthCheck, type MemoryGrpcClient } from "../transport/clients.js";

/**
 * Nothing acknowledged is lost (README, Stores: Postgres), through the
 * compiled server on a real PostgreSQL: the server is killed with SIGKILL
 * in the middle of concurrent Adds, cycle after cycle; then PostgreSQL
 * itself is killed with SIGKILL and restarted while the Adds go on, and
 * then restarted as `pg_ctl restart` does and stopped as `pg_ctl stop -m
 * immediate` does, then started, with Watch streams open and gRPC health
 * watched. Each writer retries an Add that failed or was in flight with the
 * same request_id, as a client does, so every message ends up stored
 * exactly once, at the seq its acknowledgement gave; each watcher resumes
 * from the last resume_token it got.
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

/**
 * A watcher that keeps one Watch stream open: when a stream ends, it opens
 * the next from the last resume_token it got (an event's or a Progress's).
 */
class Follower {
  /** What the streams delivered, oldest first: "thread:first-last" per messages_added. */
  readonly seen: string[] = [];
  /** The gRPC code of each stream that ended, in order. */
  readonly ended: string[] = [];
  /** Resolves at the first Progress: the stream is live, and has a token to resume from. */
  readonly live: Promise<void>;
  #token = "";
  #stopped = false;
  #stream: ReturnType<MemoryGrpcClient["watch"]> | undefined;
  #markLive: () => void = () => {};

  constructor(
    readonly client: MemoryGrpcClient,
    readonly threadIds: string[],
  ) {
    this.live = new Promise((resolve) => {
      this.#markLive = resolve;
    });
    this.#open();
  }

  #open(): void {
    if (this.#stopped) return;
    const stream = this.client.watch({ threadIds: this.threadIds, resumeToken: this.#token });
    this.#stream = stream;
    stream.on("data", (e: WatchResponse) => {
      if (e.event.case === "progress") this.#markLive();
      else if (e.event.case === "messagesAdded") {
        this.seen.push(`${e.threadId}:${e.event.value.firstSeq}-${e.event.value.lastSeq}`);
      } else this.seen.push(`${e.threadId}:${e.event.case}`);
      this.#token = e.resumeToken;
    });
    stream.on("error", (err: ServiceError) => {
      if (this.#stopped) return;
      this.ended.push(GrpcStatus[err.code] ?? String(err.code));
      setTimeout(() => this.#open(), 100);
    });
  }

  stop(): void {
    this.#stopped = true;
    this.#stream?.cancel();
  }
}

/** gRPC health of the memory service, asked every 50 ms: each answer in order. */
class HealthPoll {
  readonly statuses: string[] = [];
  #stopped = false;
  readonly #done: Promise<void>;

  constructor(address: string) {
    this.#done = (async () => {
      while (!this.#stopped) {
        const status = await grpcHealthCheck(address, MemoryService.typeName).catch(
          (err: ServiceError) => `error ${err.code}`,
        );
        this.statuses.push(status);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
  }

  /** Resolves once an answer after the `from`th is `status`; rejects after `ms`. */
  async until(status: string, from: number, ms: number): Promise<number> {
    const started = Date.now();
    while (!this.statuses.slice(from).includes(status)) {
      if (Date.now() - started > ms) {
        throw new Error(`health was not ${status} within ${ms} ms: ${this.statuses.slice(from)}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    return Date.now() - started;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#done;
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

  async function start(...flags: string[]): Promise<MemoryGrpcClient> {
    const server = await startServerProcess([
      "--store",
      url,
      "--event-retention",
      "1000000",
      ...flags,
    ]);
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

  /**
   * Every writer Adds through `client` until stop(): an Add refused with a
   * code a client retries (UNAVAILABLE, DEADLINE_EXCEEDED) is sent again,
   * the same, after a client's backoff; any other error, or the server
   * exiting (it must ride an outage out), fails the case.
   */
  function writeUntilStopped(client: MemoryGrpcClient, server: ServerProcess) {
    let stopped = false;
    const load = { refused: 0, more, stop };
    const running = writers.map(async (w) => {
      while (!stopped) {
        try {
          await addOnce(client, w);
        } catch (err) {
          if (server.child.exitCode !== null || server.child.signalCode !== null) throw err;
          const code = (err as ServiceError).code;
          if (code !== GrpcStatus.UNAVAILABLE && code !== GrpcStatus.DEADLINE_EXCEEDED) throw err;
          load.refused++;
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    });
    /** Resolves once `n` more Adds were acknowledged; rejects when a writer failed. */
    function more(n: number): Promise<void> {
      return Promise.race([ledger.more(n), ...running]);
    }
    async function stop(): Promise<void> {
      stopped = true;
      await Promise.all(running);
    }
    return load;
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
    const ackedBefore = ledger.count;
    const load = writeUntilStopped(client, server);
    await load.more(writers.length * 5);
    await postgres.kill();
    await postgres.restart();
    await load.more(writers.length * 10);
    await load.stop();
    await settlePending(client);
    const check = await verify(client);
    console.log(
      `postgres kill -9 and restart test: acknowledged=${ledger.count - ackedBefore} ` +
        `(all cases so far: ${ledger.count}) lost=${check.lost.length} ` +
        `wrong=${check.wrong.length} refused while down=${load.refused}`,
    );
    expect(check).toEqual({ lost: [], wrong: [] });
    expect(load.refused).toBeGreaterThan(0);

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

  it("rides out PostgreSQL restarted and stopped immediately: no acknowledged Add lost, no Watch gap, health follows", {
    timeout: 180_000,
  }, async () => {
    const client = await start(
      "--health-check-interval-ms",
      "100",
      "--progress-interval-ms",
      "200",
    );
    const server = servers.at(-1);
    if (server === undefined) throw new Error("no server");
    const health = new HealthPoll(server.address);
    // Where this case's watchers start in the log: nothing is written until they are live.
    const [head] = await queryPostgres<{ n: number }>(
      url,
      "SELECT coalesce(max(seq), 0)::int AS n FROM events",
    );
    const followers = [new Follower(client, []), new Follower(client, ["solo-0", "shared"])];
    await Promise.all(followers.map((f) => f.live));
    const ackedBefore = ledger.count;
    const load = writeUntilStopped(client, server);
    await load.more(writers.length * 5);
    // pg_ctl restart: a fast shutdown (every session ended), then a start.
    await postgres.restart();
    await load.more(writers.length * 5);
    // pg_ctl stop -m immediate, held down until health says so, then a start (crash recovery).
    const refusedBefore = load.refused;
    const polled = health.statuses.length;
    await postgres.halt("immediate");
    const downAfterMs = await health.until("NOT_SERVING", polled, 5_000);
    await new Promise((r) => setTimeout(r, 500));
    const refusedWhileDown = load.refused - refusedBefore;
    const restartedAt = health.statuses.length;
    await postgres.restart();
    const upAfterMs = await health.until("SERVING", restartedAt, 15_000);
    await load.more(writers.length * 5);
    await load.stop();
    await settlePending(client);
    const check = await verify(client);
    const acked = ledger.count - ackedBefore;

    // Every watcher saw the log's events of its threads after its start, each once, in order.
    const logged = await queryPostgres<{ thread_id: string; body: string }>(
      url,
      "SELECT thread_id, body FROM events WHERE seq > $1 ORDER BY seq",
      [head?.n ?? 0],
    );
    const line = (e: { thread_id: string; body: string }) => {
      const b = JSON.parse(e.body) as { firstSeq: number; lastSeq: number };
      return `${e.thread_id}:${b.firstSeq}-${b.lastSeq}`;
    };
    const expected = followers.map((f) =>
      logged.filter((e) => f.threadIds.length === 0 || f.threadIds.includes(e.thread_id)).map(line),
    );
    for (const [i, f] of followers.entries()) {
      const want = expected[i]?.length ?? 0;
      for (const until = Date.now() + 15_000; f.seen.length < want && Date.now() < until; ) {
        await new Promise((r) => setTimeout(r, 50));
      }
      f.stop();
    }
    await health.stop();
    console.log(
      `postgres restart and immediate stop test: acknowledged=${acked} lost=${check.lost.length} ` +
        `wrong=${check.wrong.length} refused=${load.refused} (while down: ${refusedWhileDown}); ` +
        `watch events seen=${followers.map((f) => f.seen.length).join("/")} of ` +
        `${expected.map((e) => e.length).join("/")}, streams ended=${followers.map((f) => f.ended.join(",") || "none").join(" / ")}; ` +
        `health NOT_SERVING ${downAfterMs} ms after the stop, SERVING ${upAfterMs} ms after the start`,
    );
    expect(check).toEqual({ lost: [], wrong: [] });
    expect(acked).toBeGreaterThan(writers.length * 15);
    expect(refusedWhileDown).toBeGreaterThan(0);
    for (const [i, f] of followers.entries()) {
      expect(f.seen).toEqual(expected[i]);
      expect(f.ended.filter((code) => code !== "UNAVAILABLE")).toEqual([]);
    }
    expect(await stopGracefully(server.child)).toBe(0);
  });
});
