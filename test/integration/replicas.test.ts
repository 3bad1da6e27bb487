import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { Role, type WatchResponse } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { type FakeLlm, type RecordedRequest, startFakeLlm } from "../support/fake-llm.js";
import { startPostgresServer } from "../support/postgres-server.js";
import { startRedisCluster } from "../support/redis-cluster.js";
import { startRedisServer } from "../support/redis-server.js";
import { type Replica, startReplica } from "../support/replica-process.js";
import { createGrpcClient } from "../transport/clients.js";
import { type Driver, grpcDriver } from "./drivers.js";

/**
 * Two replicas of the compiled command over one shared store, a real
 * redis-server, a real six-node Redis Cluster and then a real PostgreSQL,
 * with one scripted model server:
 * what the README promises of the shared stores (seqs, folds, Watch resume,
 * replicas) checked through real gRPC clients, across processes.
 */

/** The server of a shared store, started for one backend's cases. */
interface SharedStore {
  /** The --store of every replica. */
  readonly url: string;
  /** Whether what it held before a kill is there after the restart. */
  readonly keepsData: boolean;
  /** SIGKILL (a crash); restart() brings it back on the same address. */
  kill(): Promise<void>;
  restart(): Promise<void>;
  stop(): Promise<void>;
}

const BACKENDS: { name: string; start(): Promise<SharedStore> }[] = [
  {
    name: "Redis",
    async start() {
      const redis = await startRedisServer();
      // This redis-server keeps nothing on disk: it comes back empty.
      return { url: redis.url, keepsData: false, ...lifecycle(redis) };
    },
  },
  {
    name: "Redis Cluster",
    async start() {
      const cluster = await startRedisCluster();
      // Its nodes keep nothing on disk but their nodes.conf: all six come back
      // empty, as the same cluster (same slots and roles).
      return {
        url: cluster.url,
        keepsData: false,
        kill: async () => {
          await Promise.all(cluster.nodes.map((n) => n.server.kill()));
        },
        restart: async () => {
          await Promise.all(cluster.nodes.map((n) => n.server.restart()));
          await cluster.waitUntilSettled();
        },
        stop: () => cluster.stop(),
      };
    },
  },
  {
    name: "Postgres",
    async start() {
      const postgres = await startPostgresServer();
      const url = await postgres.createDatabase();
      return { url, keepsData: true, ...lifecycle(postgres) };
    },
  },
];

function lifecycle(server: Pick<SharedStore, "kill" | "restart" | "stop">) {
  return {
    kill: () => server.kill(),
    restart: () => server.restart(),
    stop: () => server.stop(),
  };
}

/** The flags of every replica over `url`. */
function replicaFlags(url: string): string[] {
  return [
    "--store",
    url,
    "--summarizer",
    "openai",
    "--openai-base-url",
    llm.baseUrl,
    "--openai-max-retries",
    "0",
    // Debug: each replica logs its folds, so a case can tell who folded what.
    "--log-level",
    "debug",
  ];
}

let llm: FakeLlm;
let a: Replica | undefined;
let b: Replica | undefined;

beforeAll(async () => {
  llm = await startFakeLlm();
});

afterAll(async () => {
  await llm?.close();
});

beforeEach(async () => {
  // Log lines of the previous case's last folds must not count for this one.
  await Promise.all([a, b].map((r) => (r === undefined ? undefined : quietLog(r))));
  llm.requests.length = 0;
  llm.setFallback({ reply: (r) => `summary #${r.index}` });
});

/** Waits until a running replica has written nothing to its log for 100 ms. */
async function quietLog(replica: Replica): Promise<void> {
  if (replica.child.exitCode !== null || replica.child.signalCode !== null) return;
  for (let length = -1; replica.stderr().length !== length; ) {
    length = replica.stderr().length;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Waits until the condition holds, checking every 20 ms, for at most `ms`. */
async function waitFor(
  what: string,
  condition: () => boolean | Promise<boolean>,
  ms = 10_000,
): Promise<void> {
  for (const until = Date.now() + ms; !(await condition()); ) {
    if (Date.now() > until) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const user = (content: string) => ({ role: Role.USER, content });
const summaryStrategy = (window: number, summarizeEvery: number) => ({
  kind: { case: "summary" as const, value: { window, summarizeEvery } },
});
const bufferStrategy = { kind: { case: "buffer" as const, value: {} } };
const newThread = () => `t-${randomUUID().slice(0, 8)}`;

/** The "fold" debug lines of a replica's log (fold-scheduler.ts). */
function foldLog(stderr: string): { folded: number; committed: boolean }[] {
  return stderr
    .split("\n")
    .filter((line) => line.includes('"msg":"fold"'))
    .map((line) => JSON.parse(line) as { folded: number; committed: boolean });
}

/** The message contents a fold prompt carried ("user: <content>" lines of the user turn). */
function foldedContents(request: RecordedRequest): string[] {
  const prompt = request.body?.messages[1]?.content ?? "";
  const lines = prompt.split("New conversation lines:\n")[1]?.split("\n\nUpdated summary:")[0];
  return (lines ?? "").split("\n").flatMap((l) => (l.startsWith("user: ") ? [l.slice(6)] : []));
}

async function nextOfType(
  watch: { next(ms?: number): Promise<WatchResponse> },
  type: NonNullable<WatchResponse["event"]["case"]>,
): Promise<WatchResponse> {
  for (;;) {
    const e = await watch.next(5000);
    if (e.event.case === type) return e;
  }
}

for (const backend of BACKENDS) {
  describe(`over one ${backend.name}`, () => {
    let store: SharedStore;
    beforeAll(async () => {
      store = await backend.start();
    });
    afterAll(async () => {
      await store?.stop();
    });

    describe("two replicas", () => {
      let onA: Driver;
      let onB: Driver;
      let replicaA: Replica;
      let replicaB: Replica;
      beforeAll(async () => {
        // Idle Watch streams say they are live within 100 ms (see the Watch case).
        const flags = [...replicaFlags(store.url), "--progress-interval-ms", "100"];
        [replicaA, replicaB] = await Promise.all([startReplica(flags), startReplica(flags)]);
        [a, b] = [replicaA, replicaB];
        onA = grpcDriver(replicaA.grpcPort);
        onB = grpcDriver(replicaB.grpcPort);
      });
      afterAll(async () => {
        onA?.close();
        onB?.close();
        await Promise.all([a?.kill(), b?.kill()]);
        [a, b] = [undefined, undefined];
      });

      it("reads, lists and clears through one replica what the other wrote", async () => {
        const t = newThread();
        const added = await onA.add({ threadId: t, messages: [user("hello"), user("world")] });
        expect([added.firstSeq, added.lastSeq]).toEqual([1n, 2n]);
        const got = await onB.get({ threadId: t });
        expect(got.messages.map((m) => m.content)).toEqual(["hello", "world"]);
        expect(got.thread?.lastSeq).toBe(2n);
        expect((await onB.listThreads({ pageSize: 1000 })).threadIds).toContain(t);
        // An Add through B continues A's seqs; a retry through A is recognised.
        expect(
          (await onB.add({ threadId: t, messages: [user("3")], requestId: "r1" })).firstSeq,
        ).toBe(3n);
        const retry = await onA.add({ threadId: t, messages: [user("3")], requestId: "r1" });
        expect(retry.firstSeq).toBe(3n);
        expect((await onA.get({ threadId: t })).messages).toHaveLength(3);
        expect((await onB.clear({ threadId: t })).clearedThreads).toBe(1);
        expect((await onA.get({ threadId: t })).thread).toBeUndefined();
      });

      it("lets a Watch on B see A's folds and resume, with B's token, on A", async () => {
        const t = newThread();
        const watchB = onB.watch({ threadIds: [t] });
        // "From now on" starts when B has read the head: its first Progress says it has.
        await nextOfType(watchB, "progress");
        await onA.add({ threadId: t, strategy: summaryStrategy(2, 2), messages: [user("m1")] });
        await nextOfType(watchB, "messagesAdded");
        await onA.add({ threadId: t, messages: [user("m2"), user("m3"), user("m4")] });
        const fold1 = await nextOfType(watchB, "summaryUpdated");
        expect(fold1.event.value).toMatchObject({ summarizedThroughSeq: 2n });
        const token = fold1.resumeToken;

        await onA.add({ threadId: t, messages: [user("m5"), user("m6")] });
        const afterOnB: WatchResponse[] = [];
        for (;;) {
          const e = await watchB.next(5000);
          if (e.event.case === "progress") continue;
          afterOnB.push(e);
          if (e.event.case === "summaryUpdated") break;
        }
        watchB.cancel();
        expect(afterOnB.map((e) => e.event.case)).toEqual(["messagesAdded", "summaryUpdated"]);
        expect(afterOnB[1]?.event.value).toMatchObject({ summarizedThroughSeq: 4n });

        const watchA = onA.watch({ threadIds: [t], resumeToken: token });
        const resumed: WatchResponse[] = [];
        while (resumed.length < 2) {
          const e = await watchA.next(5000);
          if (e.event.case !== "progress") resumed.push(e);
        }
        watchA.cancel();
        expect(resumed.map((e) => [e.event.case, e.resumeToken])).toEqual(
          afterOnB.map((e) => [e.event.case, e.resumeToken]),
        );
        // Both folds were made once each: A's Adds kicked them, nobody folded twice.
        expect(llm.requests.map(foldedContents)).toEqual([
          ["m1", "m2"],
          ["m3", "m4"],
        ]);
      });

      it("makes a Get on B wait for the fold running on A and return its result", async () => {
        // When the fake answered A (this process's clock, as the Get's return is).
        let answeredAt: number | undefined;
        llm.setFallback({
          reply: (r) => {
            answeredAt = Date.now();
            return `summary #${r.index}`;
          },
          delayMs: 300,
        });
        const logged = [replicaA.stderr().length, replicaB.stderr().length] as const;
        const t = newThread();
        await onA.add({
          threadId: t,
          strategy: summaryStrategy(2, 2),
          messages: ["a", "b", "c", "d"].map(user),
        });
        // A's fold is in flight once the model has its request (it answers 300 ms later).
        for (const until = Date.now() + 10_000; llm.requests.length === 0; ) {
          if (Date.now() > until) throw new Error("A started no fold");
          await new Promise((r) => setTimeout(r, 5));
        }
        const got = await onB.get({ threadId: t });
        const returned = Date.now();
        expect(got.degraded).toBe(false);
        expect(got.summary).toBe(`summary #${llm.requests[0]?.index}`);
        expect(got.thread?.summarizedThroughSeq).toBe(2n);
        expect(got.messages.map((m) => m.content)).toEqual([
          `Summary of the earlier conversation:\nsummary #${llm.requests[0]?.index}`,
          "c",
          "d",
        ]);
        // The Get waited for the model's answer to A, and woke on A's commit: well
        // before its own wait (5 s) would have ended it.
        if (answeredAt === undefined) throw new Error("the fake never answered A");
        expect(returned).toBeGreaterThanOrEqual(answeredAt);
        expect(returned - answeredAt).toBeLessThan(2500);
        // B did not fold the same messages itself: the lease kept it to A.
        expect(llm.requests).toHaveLength(1);
        for (
          const until = Date.now() + 10_000;
          foldLog(replicaA.stderr().slice(logged[0])).length === 0;
        ) {
          if (Date.now() > until) throw new Error("A logged no fold");
          await new Promise((r) => setTimeout(r, 20));
        }
        expect(foldLog(replicaA.stderr().slice(logged[0]))).toEqual([
          expect.objectContaining({ folded: 2, committed: true }),
        ]);
        expect(foldLog(replicaB.stderr().slice(logged[1]))).toEqual([]);
      });

      it("folds every message exactly once with writers on both replicas", async () => {
        const logged0 = [replicaA.stderr().length, replicaB.stderr().length] as const;
        llm.setFallback({ reply: (r) => `summary #${r.index}`, delayMs: 20 });
        // Which replicas write each thread: A only and B only (so both replicas
        // surely fold), and both at once (so their folds of one thread contend).
        const plan: Driver[][] = [
          [onA, onA],
          [onB, onB],
          [onA, onB],
          [onA, onB, onA, onB],
        ];
        const threads = plan.map(newThread);
        const perWriter = 12;
        const written = new Map<string, string[]>(threads.map((t) => [t, []]));
        const writer = async (via: Driver, t: string, w: string) => {
          for (let i = 0; i < perWriter; i++) {
            const content = `${t}/${w}/${i}`;
            await via.add({
              threadId: t,
              strategy: summaryStrategy(2, 2),
              messages: [user(content)],
            });
            written.get(t)?.push(content);
          }
        };
        await Promise.all(
          threads.flatMap((t, i) => (plan[i] ?? []).map((via, w) => writer(via, t, `w${w}`))),
        );

        // Gets wait for whatever fold is still due or running, on either replica.
        const finals = await Promise.all(
          threads.map(async (t) => {
            for (let attempt = 0; ; attempt++) {
              const got = await onB.get({ threadId: t });
              if (!got.degraded || attempt >= 5) return got;
            }
          }),
        );
        // Each model call ends in one "fold" log line, written just after its commit.
        await waitFor("a fold log line for every model call", () => {
          const logged = foldLog(replicaA.stderr().slice(logged0[0])).length;
          return (
            logged + foldLog(replicaB.stderr().slice(logged0[1])).length === llm.requests.length
          );
        });
        const prompts = llm.requests.map(foldedContents);
        const foldedAt = new Map<string, number>();
        for (const contents of prompts) {
          for (const c of contents) foldedAt.set(c, (foldedAt.get(c) ?? 0) + 1);
        }
        expect([...foldedAt.values()].filter((n) => n !== 1)).toEqual([]);

        for (const [i, t] of threads.entries()) {
          const got = finals[i];
          expect(got?.degraded).toBe(false);
          const through = Number(got?.thread?.summarizedThroughSeq ?? 0n);
          const lastSeq = Number(got?.thread?.lastSeq ?? 0n);
          expect(lastSeq).toBe((plan[i]?.length ?? 0) * perWriter);
          // Every message is in exactly one fold prompt or, not yet folded, in the list.
          const listed = (got?.messages ?? []).slice(1).map((m) => m.content);
          const folded = [...foldedAt.keys()].filter((c) => c.startsWith(`${t}/`));
          expect(folded).toHaveLength(through);
          expect(listed).toHaveLength(lastSeq - through);
          expect([...folded, ...listed].sort()).toEqual([...(written.get(t) ?? [])].sort());
          expect(listed.length).toBeLessThan(2 + 2);
        }
        expect(prompts.length).toBeGreaterThanOrEqual(threads.length);
        // Both replicas folded, and no fold was wasted (every model call committed).
        const foldsOfA = foldLog(replicaA.stderr().slice(logged0[0]));
        const foldsOfB = foldLog(replicaB.stderr().slice(logged0[1]));
        expect(foldsOfA.length).toBeGreaterThan(0);
        expect(foldsOfB.length).toBeGreaterThan(0);
        expect([...foldsOfA, ...foldsOfB].filter((f) => !f.committed)).toEqual([]);
        expect(foldsOfA.length + foldsOfB.length).toBe(prompts.length);
        if (process.env.REPLICAS_REPORT === "1") {
          console.log(
            `messages ${plan.flat().length * perWriter}, fold prompts ${prompts.length} ` +
              `(A ${foldsOfA.length}, B ${foldsOfB.length}), folded ${foldedAt.size}, ` +
              `left verbatim ${finals.reduce((n, g) => n + (g?.messages.length ?? 1) - 1, 0)}`,
          );
        }
      });

      it("never writes a fold's summary into the thread a Clear on the other replica made anew", async () => {
        const t = newThread();
        const ofThread = (r: RecordedRequest) => foldedContents(r).some((m) => m.startsWith(t));
        // A's fold of the first incarnation waits at the model until the thread is made anew.
        let recreated: () => void = () => {};
        const remade = new Promise<void>((resolve) => {
          recreated = resolve;
        });
        llm.setFallback({
          route: (r) =>
            ofThread(r)
              ? { reply: `stale summary of ${t}`, until: remade }
              : { reply: `summary #${r.index}` },
        });
        const logged = replicaA.stderr().length;
        await onA.add({
          threadId: t,
          strategy: summaryStrategy(2, 2),
          messages: [1, 2, 3, 4].map((i) => user(`${t}/${i}`)),
        });
        await waitFor("A's fold reaching the model", () => llm.requests.some(ofThread));
        expect((await onB.clear({ threadId: t })).clearedThreads).toBe(1);
        await onB.add({ threadId: t, strategy: summaryStrategy(2, 2), messages: [user("anew")] });
        recreated();
        await waitFor("A's fold ending", () => foldLog(replicaA.stderr().slice(logged)).length > 0);
        expect(foldLog(replicaA.stderr().slice(logged))).toEqual([
          expect.objectContaining({ folded: 2, committed: false }),
        ]);
        for (const via of [onA, onB]) {
          const got = await via.get({ threadId: t });
          expect(got.summary).toBe("");
          expect(got.thread).toMatchObject({ lastSeq: 1n, summarizedThroughSeq: 0n });
          expect(got.messages.map((m) => m.content)).toEqual(["anew"]);
        }
        expect(llm.requests.filter(ofThread)).toHaveLength(1);
      });

      it("shows a Watch on A the Rewind made through B, and A's next Add reuses the seqs", async () => {
        const t = newThread();
        await onA.add({ threadId: t, messages: ["m1", "m2", "m3"].map(user) });
        const watchA = onA.watch({ threadIds: [t] });
        await nextOfType(watchA, "progress");
        const rawB = createGrpcClient(`127.0.0.1:${replicaB.grpcPort}`);
        try {
          const r = await rawB.rewind({ threadId: t, toSeq: 1n, expectedLastSeq: 3n });
          expect([r.removedCount, r.thread?.lastSeq]).toEqual([2, 1n]);
        } finally {
          rawB.close();
        }
        const rewound = await nextOfType(watchA, "threadRewound");
        expect(rewound.event.value).toMatchObject({ toSeq: 1n, removedCount: 2 });
        const next = await onA.add({ threadId: t, messages: [user("m2'")] });
        expect(next.firstSeq).toBe(2n);
        watchA.cancel();
        expect((await onB.get({ threadId: t })).messages.map((m) => m.content)).toEqual([
          "m1",
          "m2'",
        ]);
      });

      it("loses nothing acknowledged when a replica is killed with SIGKILL mid-write", async () => {
        const threads = Array.from({ length: 3 }, newThread);
        const acked = new Map<string, Map<bigint, string>>(threads.map((t) => [t, new Map()]));
        let stopB = false;
        let killing = false;
        /** Acknowledged Adds per writer ("a" or "b"), to wait on instead of sleeping. */
        const acks = { a: 0, b: 0 };
        const writer = async (via: Driver, t: string, w: "a" | "b", until: () => boolean) => {
          for (let i = 0; !until(); i++) {
            const content = `${w}-${i}`;
            try {
              const r = await via.add({
                threadId: t,
                strategy: bufferStrategy,
                messages: [user(content), user(`${content}'`)],
                requestId: `${t}-${content}`,
              });
              acked.get(t)?.set(r.firstSeq, content);
              acked.get(t)?.set(r.lastSeq, `${content}'`);
              acks[w]++;
            } catch (err) {
              // Only A's writers may fail, once A is being killed, and only as
              // UNAVAILABLE; any other failure fails the case.
              if (w === "a" && killing && (err as { code?: string }).code === "UNAVAILABLE") return;
              throw err;
            }
          }
        };
        let killed = false;
        const writers = threads.flatMap((t) => [
          writer(onA, t, "a", () => killed),
          writer(onB, t, "b", () => stopB),
        ]);
        let writerFailure: unknown;
        const settled = writers.map((w) =>
          w.catch((err: unknown) => {
            writerFailure ??= err;
          }),
        );
        const noWriterFailed = () => {
          if (writerFailure !== undefined) throw writerFailure;
        };
        // Both replicas are taking writes before the crash, and B goes on after it.
        await waitFor("30 Adds through each replica", () => {
          noWriterFailed();
          return acks.a >= 30 && acks.b >= 30;
        });
        killing = true;
        await replicaA.kill();
        killed = true;
        const ackedByBAtKill = acks.b;
        await waitFor("30 more Adds through B", () => {
          noWriterFailed();
          return acks.b >= ackedByBAtKill + 30;
        });
        stopB = true;
        await Promise.all(settled);
        noWriterFailed();

        let total = 0;
        for (const t of threads) {
          const got = await onB.get({ threadId: t });
          const stored = new Map(got.messages.map((m) => [m.seq, m.content]));
          const mine = acked.get(t) ?? new Map<bigint, string>();
          total += mine.size;
          for (const [seq, content] of mine) expect(stored.get(seq)).toBe(content);
          // Seqs have no holes, whatever the crash interrupted.
          expect([...stored.keys()]).toEqual(
            Array.from({ length: stored.size }, (_, i) => BigInt(i + 1)),
          );
        }
        expect(total).toBeGreaterThan(20);
        if (process.env.REPLICAS_REPORT === "1")
          console.log(`acknowledged messages ${total}, all read back via B`);
        expect(
          [...(acked.get(threads[0] ?? "") ?? new Map()).values()].some((c) => c.startsWith("a-")),
        ).toBe(true);
      });
      it(`answers UNAVAILABLE while ${backend.name} is down and serves again once it is back`, async () => {
        const t = newThread();
        await onB.add({ threadId: t, messages: [user("before")] });
        await store.kill();
        const started = Date.now();
        const err = await onB.add({ threadId: t, messages: [user("during")] }).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err).toMatchObject({ code: "UNAVAILABLE" });
        expect(Date.now() - started).toBeLessThan(1000);
        // The replica reconnects; a store that keeps its data has "before" still.
        await store.restart();
        for (const until = Date.now() + 10_000; ; ) {
          const ok = await onB.add({ threadId: t, messages: [user("after")] }).then(
            () => true,
            () => false,
          );
          if (ok) break;
          if (Date.now() > until)
            throw new Error(`the replica did not reconnect to ${backend.name}`);
          await new Promise((r) => setTimeout(r, 100));
        }
        expect((await onB.get({ threadId: t })).messages.map((m) => m.content)).toEqual(
          store.keepsData ? ["before", "after"] : ["after"],
        );
      });

      it("stops cleanly on SIGTERM, ending a Watch with UNAVAILABLE", async () => {
        const watch = onB.watch({});
        await nextOfType(watch, "progress");
        const started = Date.now();
        const stopping = replicaB.stop();
        const err = await watch.next(5000).then(
          (e) => e,
          (e: unknown) => e,
        );
        expect(err).toMatchObject({ code: "UNAVAILABLE" });
        expect(await stopping).toBe(0);
        expect(Date.now() - started).toBeLessThan(6000);
      });
    });

    describe("a replica that dies holding a fold lease", () => {
      it("leaves the thread's Gets degraded until the lease expires, then another replica folds it", async () => {
        const leaseMs = 3000;
        const args = [
          ...replicaFlags(store.url),
          "--fold-lease-ms",
          String(leaseMs),
          // Gets on the survivor give up waiting quickly, so they can be counted.
          "--get-fold-wait-ms",
          "200",
        ];
        const [c, d] = await Promise.all([startReplica(args), startReplica(args)]);
        const onC = grpcDriver(c.grpcPort);
        const onD = grpcDriver(d.grpcPort);
        try {
          const t = newThread();
          const ofThread = (r: RecordedRequest) => foldedContents(r).some((m) => m.startsWith(t));
          // C's fold stalls at the model; once C is dead, the model answers.
          let cDead = false;
          llm.setFallback({
            route: (r) => (ofThread(r) && !cDead ? { hang: true } : { reply: "recovered" }),
          });
          const addedAt = Date.now();
          await onC.add({
            threadId: t,
            strategy: summaryStrategy(2, 2),
            messages: [1, 2, 3, 4].map((i) => user(`${t}/${i}`)),
          });
          await waitFor("C's fold reaching the model", () => llm.requests.some(ofThread));
          await c.kill();
          cDead = true;

          // C took the lease after the Add began, so it cannot expire before this.
          const leaseExpiresNoEarlierThan = addedAt + leaseMs;
          const gets: { at: number; degraded: boolean; reason: string }[] = [];
          let final: Awaited<ReturnType<Driver["get"]>> | undefined;
          await waitFor(
            "a Get on D that is not degraded",
            async () => {
              const got = await onD.get({ threadId: t });
              gets.push({ at: Date.now(), degraded: got.degraded, reason: got.degradedReason });
              if (got.degraded) return false;
              final = got;
              return true;
            },
            leaseMs + 10_000,
          );
          const recovered = gets[gets.length - 1]?.at ?? 0;
          // Degraded, because the fold is "running" on a dead replica, until the lease expired …
          expect(gets.length).toBeGreaterThan(1);
          for (const g of gets.slice(0, -1)) {
            expect(g).toMatchObject({
              degraded: true,
              reason: expect.stringContaining("still running"),
            });
          }
          expect(recovered).toBeGreaterThanOrEqual(leaseExpiresNoEarlierThan);
          // … and folded by D soon after (the lease, then a Get's wait and the model call).
          const stalledAt = llm.requests.find(ofThread)?.receivedAt ?? 0;
          expect(recovered - (stalledAt + leaseMs)).toBeLessThan(5000);
          expect(final?.summary).toBe("recovered");
          expect(final?.thread?.summarizedThroughSeq).toBe(2n);
          // Nobody called the model for this thread while the dead replica's lease held.
          const calls = llm.requests.filter(ofThread);
          expect(calls.length).toBe(2);
          expect(calls[1]?.receivedAt ?? 0).toBeGreaterThanOrEqual(leaseExpiresNoEarlierThan);
          for (const until = Date.now() + 5000; foldLog(d.stderr()).length === 0; ) {
            if (Date.now() > until) throw new Error("D logged no fold");
            await new Promise((r) => setTimeout(r, 20));
          }
          expect(foldLog(d.stderr())).toEqual([
            expect.objectContaining({ folded: 2, committed: true }),
          ]);
        } finally {
          onC.close();
          onD.close();
          await Promise.all([c.kill(), d.kill()]);
        }
      });
    });
  });
}
