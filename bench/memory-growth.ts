import { create, toBinary } from "@bufbuild/protobuf";
import {
  type AddRequest,
  AddRequestSchema,
  ChatMessageSchema,
  GetRequestSchema,
  Role,
  StrategySchema,
} from "../gen/ts/windlass/memory/v1/memory_pb.js";
import { storesFor } from "./options.js";
import {
  inspectorUrl,
  type MemorySample,
  mib,
  openInspector,
  residentBytes,
  sampleAfterGc,
} from "./process-memory.js";
import type { ScenarioOutcome } from "./results.js";
import { MemoryClient } from "./rpc.js";
import type { ScenarioContext } from "./run.js";
import { text } from "./scenarios.js";
import { serveArgs, startServerProcess } from "./server-process.js";
import { type BenchPostgres, openStoreBackends, type StoreKind } from "./stores.js";

/**
 * Memory: how much resident memory the server gains per stored message.
 * Per store (memory, SQLite, Postgres), a fresh server is filled with 1,000,000
 * messages of 200-byte contents (threads of 10,000, window strategy with
 * max_stored 10,000, Adds of 1,000), and its resident set (VmRSS) is read
 * before, halfway and after. The server runs with `--inspect=127.0.0.1:0` so that
 * the bench can force full garbage collections through the inspector
 * protocol before each reading (nothing in the server is changed for it);
 * RSS is also sampled without a collection during the fill, to show the
 * plateau. Goals: the memory store at most 2x the protobuf encoding of a
 * stored message per message; SQLite flat (bounded by its caches, not by
 * the data); Postgres flat (the store keeps no messages: its memory is its
 * pool and queues, bounded by configuration). On Postgres the Pss of
 * PostgreSQL's own processes is read beside it (bounded by its
 * shared_buffers and per-backend settings, not the store's).
 */

const CONTENT_BYTES = 200;
const PER_THREAD = 10_000;
const PER_ADD = 1_000;
const ADDS_IN_FLIGHT = 4;
const CALL_TIMEOUT_MS = 60_000;
const START_TIMEOUT_MS = 20_000;
const GOAL_MEMORY = 2;
/** SQLite counts as flat when it grows by less than this share of the data's protobuf size. */
const FLAT_SHARE = 0.1;
const SAMPLES = 10;
const MEMORY_STORES: readonly StoreKind[] = ["memory", "sqlite", "postgres"];

interface StoreResult {
  readonly store: StoreKind;
  readonly messages: number;
  /** Messages stored when `middle` was read. */
  readonly halfDone: number;
  readonly before: MemorySample;
  readonly middle: MemorySample;
  readonly after: MemorySample;
  /** RSS without a forced collection, during the fill (at each tenth) and 2 s after it. */
  readonly plateau: number[];
  readonly encodedBytesPerMessage: number;
  readonly fillSeconds: number;
  /** PostgreSQL's processes (Pss summed) before and after the fill, on Postgres. */
  readonly database: { before: number; after: number } | undefined;
}

function addRequest(thread: number, from: number, count: number): AddRequest {
  return create(AddRequestSchema, {
    threadId: `bench-mem-${String(thread).padStart(5, "0")}`,
    strategy: create(StrategySchema, {
      kind: { case: "window", value: { window: 20 } },
      maxStored: PER_THREAD,
    }),
    messages: Array.from({ length: count }, (_, k) =>
      create(ChatMessageSchema, {
        role: (from + k) % 2 === 0 ? Role.USER : Role.ASSISTANT,
        content: text(CONTENT_BYTES, thread * PER_THREAD + from + k),
      }),
    ),
  });
}

async function measureStore(
  ctx: ScenarioContext,
  store: StoreKind,
  storeFlag: string,
  postgres: BenchPostgres | undefined,
): Promise<StoreResult> {
  const total = ctx.options.size("messages");
  const server = await startServerProcess({
    label: `windlass (${store} store)`,
    nodeArgs: ["--inspect=127.0.0.1:0"],
    script: `${ctx.root}bin/windlass-memory.js`,
    args: serveArgs(storeFlag, [
      ...(store === "sqlite"
        ? ["--sqlite-cache-mb", String(ctx.options.size("sqlite-cache-mb"))]
        : []),
      "--log-level",
      "warn",
    ]),
    startTimeoutMs: START_TIMEOUT_MS,
  });
  const url = inspectorUrl(server.stderrText());
  const client = new MemoryClient(`127.0.0.1:${server.grpcPort}`, CALL_TIMEOUT_MS);
  try {
    if (url === undefined) throw new Error(`no inspector URL in the server's stderr`);
    const inspector = await openInspector(url);
    try {
      // Warm the paths (code, pools) on a thread outside the count, then measure from there.
      await client.add(addRequest(99_999, 0, PER_ADD));
      await client.get(create(GetRequestSchema, { threadId: "bench-mem-99999" }));
      const before = await sampleAfterGc(inspector, server.pid);
      const databaseBefore = store === "postgres" ? postgres?.memoryBytes() : undefined;
      const threads = Math.ceil(total / PER_THREAD);
      const jobs: { thread: number; from: number; count: number }[] = [];
      for (let t = 0; t < threads; t++) {
        const inThread = Math.min(PER_THREAD, total - t * PER_THREAD);
        for (let from = 0; from < inThread; from += PER_ADD) {
          jobs.push({ thread: t, from, count: Math.min(PER_ADD, inThread - from) });
        }
      }
      const plateau: number[] = [];
      let done = 0;
      let nextSample = 1;
      const started = performance.now();
      const fillJobs = async (from: number, to: number): Promise<void> => {
        let next = from;
        const worker = async (): Promise<void> => {
          for (;;) {
            const job = next < to ? jobs[next++] : undefined;
            if (job === undefined) return;
            await client.add(addRequest(job.thread, job.from, job.count));
            done += job.count;
            if (done >= (total * nextSample) / SAMPLES) {
              nextSample++;
              plateau.push(residentBytes(server.pid) ?? 0);
              process.stdout.write(
                `filling   ${store}: ${done} messages, RSS ${mib(plateau.at(-1) ?? 0)} MiB\n`,
              );
            }
          }
        };
        await Promise.all(Array.from({ length: ADDS_IN_FLIGHT }, worker));
      };
      // Halfway, a reading after a collection: a store bounded by its caches
      // stops growing in the second half; one that keeps every message does not.
      const half = Math.floor(jobs.length / 2);
      await fillJobs(0, half);
      const halfDone = done;
      const middle = await sampleAfterGc(inspector, server.pid);
      await fillJobs(half, jobs.length);
      const fillSeconds = (performance.now() - started) / 1000;
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      plateau.push(residentBytes(server.pid) ?? 0);
      const after = await sampleAfterGc(inspector, server.pid);
      const databaseAfter = store === "postgres" ? postgres?.memoryBytes() : undefined;
      // The protobuf size of a message as stored (role, content, seq, create_time).
      const got = await client.get(create(GetRequestSchema, { threadId: "bench-mem-00000" }));
      const encoded = got.messages.map((m) => toBinary(ChatMessageSchema, m).length);
      const encodedBytesPerMessage = encoded.reduce((a, b) => a + b, 0) / encoded.length;
      return {
        store,
        messages: total,
        halfDone,
        before,
        middle,
        after,
        plateau,
        encodedBytesPerMessage,
        fillSeconds,
        database:
          databaseBefore === undefined || databaseAfter === undefined
            ? undefined
            : { before: databaseBefore, after: databaseAfter },
      };
    } finally {
      inspector.close();
    }
  } finally {
    client.close();
    await server.stop();
  }
}

async function run(ctx: ScenarioContext): Promise<ScenarioOutcome> {
  const stores = storesFor(ctx.options, MEMORY_STORES) as StoreKind[];
  const backends = await openStoreBackends(stores, ctx.redisServer);
  const results: StoreResult[] = [];
  try {
    for (const store of stores)
      results.push(await measureStore(ctx, store, backends.storeFlag(store), backends.postgres));
  } finally {
    await backends.close();
  }
  const lines = [
    `Resident memory of a fresh server before and after storing ${ctx.options.size("messages")} messages ` +
      `(${CONTENT_BYTES}-byte contents, threads of ${PER_THREAD}, window strategy with max_stored ${PER_THREAD}, ` +
      `Adds of ${PER_ADD}, ${ADDS_IN_FLIGHT} in flight). "after GC" figures follow two forced full ` +
      "collections through the inspector protocol (the server runs with --inspect=127.0.0.1:0); " +
      "RSS also includes memory the allocator keeps after a collection, so it is an upper bound. " +
      `Goals: memory store growth per message <= ${GOAL_MEMORY}x the protobuf encoding of a stored message; ` +
      `SQLite (--sqlite-cache-mb ${ctx.options.size("sqlite-cache-mb")}) bounded by its caches (SQLite's page cache and the store's message cache), ` +
      "Postgres (default --postgres-pool-size 10; it caches no messages) bounded by its configuration: " +
      `judged flat when its growth per message over the second half of the fill is below ${FLAT_SHARE * 100}% of a message's protobuf size, ` +
      "else within its budget while its whole growth stays below the caches' budget (the caches still filling).",
    "",
    "| store | messages | fill s | RSS before MiB | RSS halfway MiB | RSS after MiB | RSS growth B/message | 1st half B/message | 2nd half B/message | heap+external growth B/message | protobuf B/message | growth / protobuf | goal |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
  ];
  const cacheBudget = ctx.options.size("sqlite-cache-mb") * 1024 * 1024;
  for (const r of results) {
    const rssPer = (r.after.rss - r.before.rss) / r.messages;
    const heapPer =
      (r.after.heapUsed + r.after.external - r.before.heapUsed - r.before.external) / r.messages;
    const ratio = rssPer / r.encodedBytesPerMessage;
    const firstHalf = (r.middle.rss - r.before.rss) / r.halfDone;
    const secondHalf = (r.after.rss - r.middle.rss) / (r.messages - r.halfDone);
    const goal =
      r.store === "memory"
        ? ratio <= GOAL_MEMORY
          ? "meets (<= 2x)"
          : "**misses** (<= 2x)"
        : secondHalf / r.encodedBytesPerMessage <= FLAT_SHARE
          ? "flat in the 2nd half"
          : r.store === "postgres"
            ? "**still growing in the 2nd half**"
            : r.after.rss - r.before.rss <= cacheBudget
              ? `still growing in the 2nd half, within its ${mib(cacheBudget)} MiB cache budget`
              : "**still growing in the 2nd half, past its cache budget**";
    lines.push(
      `| ${r.store} | ${r.messages} | ${r.fillSeconds.toFixed(1)} | ${mib(r.before.rss)} | ${mib(r.middle.rss)} | ${mib(r.after.rss)} | ` +
        `${rssPer.toFixed(0)} | ${firstHalf.toFixed(0)} | ${secondHalf.toFixed(0)} | ${heapPer.toFixed(0)} | ${r.encodedBytesPerMessage.toFixed(0)} | ${ratio.toFixed(2)} | ${goal} |`,
    );
  }
  lines.push(
    "",
    "RSS without forced collection at each tenth of the fill and 2 s after it (MiB):",
    "",
  );
  for (const r of results) lines.push(`- ${r.store}: ${r.plateau.map(mib).join(", ")}`);
  for (const r of results) {
    if (r.database === undefined) continue;
    lines.push(
      "",
      `PostgreSQL's processes (postmaster and backends, Pss summed; shared_buffers 32MB) before and after the fill: ` +
        `${mib(r.database.before)} -> ${mib(r.database.after)} MiB.`,
    );
  }
  lines.push(
    "",
    "Where the resident set grew, after forced collections, before -> halfway -> after (MiB): " +
      "anonymous memory (heaps, malloc), file-backed pages, shared memory (RssAnon, RssFile, RssShmem), " +
      "and what V8 holds for its heap (heapTotal) and uses of it (heapUsed):",
    "",
  );
  for (const r of results) {
    const part = (f: (s: MemorySample) => number | undefined): string =>
      [r.before, r.middle, r.after].map((s) => mib(f(s) ?? 0)).join(" -> ");
    lines.push(
      `- ${r.store}: anon ${part((s) => s.parts?.anon)}; file ${part((s) => s.parts?.file)}; ` +
        `shmem ${part((s) => s.parts?.shmem)}; heapTotal ${part((s) => s.heapTotal)}; heapUsed ${part((s) => s.heapUsed)}`,
    );
  }
  return { markdown: lines.join("\n"), valid: true };
}

export const memoryScenario = {
  title: "memory: resident growth per stored message",
  usesPostgres: (ctx: ScenarioContext): boolean =>
    storesFor(ctx.options, MEMORY_STORES).includes("postgres"),
  budgetMs(ctx: ScenarioContext): number {
    const adds = ctx.options.size("messages") / PER_ADD;
    return (
      storesFor(ctx.options, MEMORY_STORES).length * (adds * 1_000 + 2 * START_TIMEOUT_MS + 120_000)
    );
  },
  run,
};
