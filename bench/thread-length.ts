import { create, toBinary } from "@bufbuild/protobuf";
import {
  AddRequestSchema,
  type ChatMessage,
  ChatMessageSchema,
  GetRequestSchema,
  Role,
  type Strategy,
  StrategySchema,
} from "../gen/ts/windlass/memory/v1/memory_pb.js";
import { processCpuMicros } from "./cpu-time.js";
import { openConnections, quantile, runLoad } from "./load.js";
import { storesFor } from "./options.js";
import type { ScenarioOutcome } from "./results.js";
import { MemoryClient } from "./rpc.js";
import type { ScenarioContext } from "./run.js";
import { ADD_PATH, GET_PATH, text } from "./scenarios.js";
import { serveArgs, startServerProcess } from "./server-process.js";
import { openStoreBackends, type StoreKind } from "./stores.js";

/**
 * Thread length: does a call cost more on a long thread? Per store
 * (memory, SQLite, Redis, Postgres, Redis Cluster; `--stores` picks some), one
 * server holds a thread of 100,000 messages and one of 100 (same strategy:
 * window 20, max_stored 100,000), and Get (the window) and Add (one message)
 * are timed on each, long and short taking turns round by round. Reported:
 * p50 and p99 per thread and the long/short ratios (goal: at most 1.2).
 *
 * The long thread is filled with Adds of 1,000 messages (the default per-Add
 * cap) and is then at its max_stored, so each timed Add on it also drops its
 * oldest message: the steady state of a thread that has reached its cap.
 */

const WINDOW = 20;
const FILL_BATCH = 1_000;
const CALL_TIMEOUT_MS = 30_000;
const START_TIMEOUT_MS = 20_000;
const GOAL = 1.2;
const LONG_THREAD = "bench-thread-long";
const SHORT_THREAD = "bench-thread-short";
const ADD_VARIANTS = 64;
const THREAD_LENGTH_STORES: readonly StoreKind[] = [
  "memory",
  "sqlite",
  "redis",
  "postgres",
  "redis-cluster",
];

type Call = "Get" | "Add";
type Which = "long" | "short";

interface Timed {
  readonly store: StoreKind;
  readonly call: Call;
  readonly thread: Which;
  latencies: number[];
  calls: number;
  errors: number;
  firstError: string | undefined;
  serverCpuMicros: number;
  elapsedMs: number;
}

function strategy(maxStored: number): Strategy {
  return create(StrategySchema, {
    kind: { case: "window", value: { window: WINDOW } },
    maxStored,
  });
}

function messages(from: number, count: number): ChatMessage[] {
  return Array.from({ length: count }, (_, k) => {
    const i = from + k;
    return create(ChatMessageSchema, {
      role: i % 2 === 0 ? Role.USER : Role.ASSISTANT,
      content: text(100 + ((i * 53) % 101), i),
    });
  });
}

/** Fills `threadId` to `count` messages with Adds of FILL_BATCH (bench/fork.ts fills its parents so too). */
export async function fill(
  client: MemoryClient,
  threadId: string,
  count: number,
  maxStored: number,
): Promise<void> {
  for (let at = 0; at < count; at += FILL_BATCH) {
    await client.add(
      create(AddRequestSchema, {
        threadId,
        messages: messages(at, Math.min(FILL_BATCH, count - at)),
        strategy: strategy(maxStored),
      }),
    );
  }
  const got = await client.get(create(GetRequestSchema, { threadId }));
  if (got.thread?.lastSeq !== BigInt(count) || got.messages.length !== WINDOW) {
    throw new Error(
      `${threadId}: expected last_seq ${count} and ${WINDOW} messages, got ${got.thread?.lastSeq} and ${got.messages.length}`,
    );
  }
}

const encodedGet = (threadId: string): Buffer =>
  Buffer.from(toBinary(GetRequestSchema, create(GetRequestSchema, { threadId })));

function encodedAdds(threadId: string): Buffer[] {
  return Array.from({ length: ADD_VARIANTS }, (_, i) =>
    Buffer.from(
      toBinary(
        AddRequestSchema,
        create(AddRequestSchema, {
          threadId,
          messages: [
            create(ChatMessageSchema, { role: Role.USER, content: text(150, 1_000_000 + i) }),
          ],
        }),
      ),
    ),
  );
}

async function measureStore(
  ctx: ScenarioContext,
  store: StoreKind,
  storeFlag: string,
  out: Timed[],
): Promise<void> {
  const o = ctx.options;
  const long = o.size("long-messages");
  const short = o.size("short-messages");
  const maxStored = Math.max(long, short);
  const server = await startServerProcess({
    label: `windlass (${store} store)`,
    script: `${ctx.root}bin/windlass-memory.js`,
    args: serveArgs(storeFlag, ["--log-level", "warn"]),
    startTimeoutMs: START_TIMEOUT_MS,
  });
  const address = `127.0.0.1:${server.grpcPort}`;
  const client = new MemoryClient(address, CALL_TIMEOUT_MS);
  const connections = openConnections("h2", address, 1);
  try {
    const started = performance.now();
    await fill(client, LONG_THREAD, long, maxStored);
    await fill(client, SHORT_THREAD, short, maxStored);
    process.stdout.write(
      `filled    ${store}: ${long} + ${short} messages in ${((performance.now() - started) / 1000).toFixed(1)} s\n`,
    );
    const requests: Record<Call, Record<Which, Buffer[]>> = {
      Get: { long: [encodedGet(LONG_THREAD)], short: [encodedGet(SHORT_THREAD)] },
      Add: { long: encodedAdds(LONG_THREAD), short: encodedAdds(SHORT_THREAD) },
    };
    const paths: Record<Call, string> = { Get: GET_PATH, Add: ADD_PATH };
    const durationMs = o.size("seconds") * 1000;
    for (const call of ["Get", "Add"] as const) {
      // Warm-up: the first calls of a path compile code; not timed.
      for (const which of ["long", "short"] as const) {
        await runLoad(connections, paths[call], requests[call][which], {
          concurrency: o.size("concurrency"),
          durationMs: Math.min(500, durationMs),
          callTimeoutMs: CALL_TIMEOUT_MS,
          maxCalls: 200,
        });
      }
      const rows: Record<Which, Timed> = {
        long: emptyTimed(store, call, "long"),
        short: emptyTimed(store, call, "short"),
      };
      for (let round = 0; round < o.size("rounds"); round++) {
        const order: Which[] = round % 2 === 0 ? ["long", "short"] : ["short", "long"];
        for (const which of order) {
          const cpuBefore = processCpuMicros(server.pid);
          const load = await runLoad(connections, paths[call], requests[call][which], {
            concurrency: o.size("concurrency"),
            durationMs,
            callTimeoutMs: CALL_TIMEOUT_MS,
          });
          const cpuAfter = processCpuMicros(server.pid);
          const row = rows[which];
          for (const l of load.latenciesMs) row.latencies.push(l);
          row.calls += load.calls;
          row.errors += load.errors;
          row.firstError ??= load.firstError;
          row.elapsedMs += load.elapsedMs;
          row.serverCpuMicros += (cpuAfter ?? 0) - (cpuBefore ?? 0);
          process.stdout.write(
            `measured  ${store} ${call} ${which} round ${round + 1}: ${load.calls} calls, ` +
              `p50 ${quantile(Float64Array.from(load.latenciesMs).sort(), 0.5).toFixed(3)} ms` +
              (load.errors > 0 ? `, ${load.errors} errors (${load.firstError})` : "") +
              "\n",
          );
        }
      }
      out.push(rows.long, rows.short);
    }
  } finally {
    connections.close();
    client.close();
    await server.stop();
  }
}

function emptyTimed(store: StoreKind, call: Call, thread: Which): Timed {
  return {
    store,
    call,
    thread,
    latencies: [],
    calls: 0,
    errors: 0,
    firstError: undefined,
    serverCpuMicros: 0,
    elapsedMs: 0,
  };
}

const pct = (t: Timed, q: number): number => quantile(Float64Array.from(t.latencies).sort(), q);

async function run(ctx: ScenarioContext): Promise<ScenarioOutcome> {
  const stores = storesFor(ctx.options, THREAD_LENGTH_STORES) as StoreKind[];
  const backends = await openStoreBackends(stores, ctx.redisServer);
  const timed: Timed[] = [];
  try {
    for (const store of stores) await measureStore(ctx, store, backends.storeFlag(store), timed);
  } finally {
    await backends.close();
  }
  const o = ctx.options;
  const lines = [
    `Get (window ${WINDOW}) and Add (one 150-byte message) on a thread of ${o.size("long-messages")} ` +
      `messages vs one of ${o.size("short-messages")}, same strategy (window ${WINDOW}, max_stored ` +
      `${Math.max(o.size("long-messages"), o.size("short-messages"))}); ${o.size("concurrency")} call(s) in flight ` +
      `(h2 driver), ${o.size("rounds")} x ${o.size("seconds")} s per thread and call, long and short taking ` +
      "turns. The long thread is at its max_stored, so each Add on it also drops its oldest message. " +
      `Goal: long/short <= ${GOAL}.`,
    "",
    "| store | call | thread | calls | p50 ms | p99 ms | server CPU us/call | errors |",
    "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ...timed.map(
      (t) =>
        `| ${t.store} | ${t.call} | ${t.thread} | ${t.calls} | ${pct(t, 0.5).toFixed(3)} | ${pct(t, 0.99).toFixed(3)} | ` +
        `${t.calls === 0 ? "n/a" : (t.serverCpuMicros / t.calls).toFixed(0)} | ${t.errors} |`,
    ),
    "",
    "| store | call | p50 long/short | p99 long/short | CPU/call long/short | goal <= 1.2 (p99) |",
    "| --- | --- | ---: | ---: | ---: | --- |",
  ];
  for (const store of stores) {
    for (const call of ["Get", "Add"] as const) {
      const long = timed.find((t) => t.store === store && t.call === call && t.thread === "long");
      const short = timed.find((t) => t.store === store && t.call === call && t.thread === "short");
      if (long === undefined || short === undefined) continue;
      const p50 = pct(long, 0.5) / pct(short, 0.5);
      const p99 = pct(long, 0.99) / pct(short, 0.99);
      const cpu = long.serverCpuMicros / long.calls / (short.serverCpuMicros / short.calls);
      lines.push(
        `| ${store} | ${call} | ${p50.toFixed(2)} | ${p99.toFixed(2)} | ${cpu.toFixed(2)} | ${p99 <= GOAL ? "meets" : "**misses**"} |`,
      );
    }
  }
  const errors = timed.reduce((n, t) => n + t.errors, 0);
  return { markdown: lines.join("\n"), valid: errors === 0 };
}

export const threadLengthScenario = {
  title: "thread-length: Get and Add on a 100,000-message thread vs a 100-message one",
  budgetMs(ctx: ScenarioContext): number {
    const o = ctx.options;
    const stores = storesFor(o, THREAD_LENGTH_STORES).length;
    const timed = 4 * o.size("rounds") * (o.size("seconds") * 1000 + CALL_TIMEOUT_MS + 1_000);
    const fill = (o.size("long-messages") / FILL_BATCH + 4) * 2_000;
    return stores * (timed + fill + 2 * START_TIMEOUT_MS + 60_000);
  },
  redisServerOf: (ctx: ScenarioContext): string | undefined =>
    storesFor(ctx.options, THREAD_LENGTH_STORES).includes("redis") ? ctx.redisServer : undefined,
  usesPostgres: (ctx: ScenarioContext): boolean =>
    storesFor(ctx.options, THREAD_LENGTH_STORES).includes("postgres"),
  run,
};
