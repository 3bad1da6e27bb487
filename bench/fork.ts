import { create, toBinary } from "@bufbuild/protobuf";
import {
  AddRequestSchema,
  ChatMessageSchema,
  ForkRequestSchema,
  GetRequestSchema,
  Role,
} from "../gen/ts/windlass/memory/v1/memory_pb.js";
import { processCpuMicros } from "./cpu-time.js";
import { type Connections, openConnections, quantile, runLoad } from "./load.js";
import { storesFor } from "./options.js";
import type { ScenarioOutcome } from "./results.js";
import { MemoryClient } from "./rpc.js";
import type { ScenarioContext } from "./run.js";
import { ADD_PATH, FORK_PATH, GET_PATH, text } from "./scenarios.js";
import { serveArgs, startServerProcess } from "./server-process.js";
import { openStoreBackends, type StoreKind } from "./stores.js";
import { fill } from "./thread-length.js";

/**
 * Fork: does forking a long thread cost more than forking a short one? Per
 * store (memory, SQLite, Redis, Postgres; `--stores` picks some), one server
 * holds a parent of 100,000 messages and one of 100 (window 20, max_stored
 * 100,000, filled as thread-length fills its threads). Each round, parent by
 * parent (long and short taking turns), `--forks` Forks are timed, at the
 * parent's last_seq and at last_seq - 50 alternately (on the long parent the
 * first Fork freezes its head and every later one shares that frozen segment;
 * the short parent's head holds at most FORK_COPY_MAX messages, so each of its
 * Forks copies what it takes), then a window Get and a one-message Add on each fork. Reported: p50 and p99 per
 * call and parent, server CPU per call, and the long/short ratios (goal: at
 * most 1.2: a Fork's cost must not depend on the parent's length).
 */

const WINDOW = 20;
const TAIL_BACK = 50;
const WARMUP_FORKS = 50;
const CALL_TIMEOUT_MS = 30_000;
const START_TIMEOUT_MS = 20_000;
const GOAL = 1.2;
const PARENT: Record<Which, string> = { long: "bench-parent-long", short: "bench-parent-short" };
const FORK_STORES: readonly StoreKind[] = ["memory", "sqlite", "redis", "postgres"];

type Call = "Fork" | "Get" | "Add";
type Which = "long" | "short";
const CALLS: readonly Call[] = ["Fork", "Get", "Add"];

interface Timed {
  readonly store: StoreKind;
  readonly call: Call;
  readonly parent: Which;
  latencies: number[];
  calls: number;
  errors: number;
  firstError: string | undefined;
  serverCpuMicros: number;
}

/** The Forks of one round: new ids, at last_seq and last_seq - 50 by turns. */
function forkRequests(which: Which, round: number, count: number, lastSeq: number) {
  const ids = Array.from({ length: count }, (_, i) => `bench-fork-${which}-${round}-${i}`);
  const requests = ids.map((newThreadId, i) =>
    Buffer.from(
      toBinary(
        ForkRequestSchema,
        create(ForkRequestSchema, {
          threadId: PARENT[which],
          newThreadId,
          atSeq: BigInt(i % 2 === 0 ? lastSeq : Math.max(0, lastSeq - TAIL_BACK)),
        }),
      ),
    ),
  );
  return { ids, requests };
}

const encodedGet = (threadId: string): Buffer =>
  Buffer.from(toBinary(GetRequestSchema, create(GetRequestSchema, { threadId })));

const encodedAdd = (threadId: string, i: number): Buffer =>
  Buffer.from(
    toBinary(
      AddRequestSchema,
      create(AddRequestSchema, {
        threadId,
        messages: [
          create(ChatMessageSchema, { role: Role.USER, content: text(150, 2_000_000 + i) }),
        ],
      }),
    ),
  );

/** Each request once (concurrency from the flags), timed, with the server's CPU around it. */
async function timedOnce(
  ctx: ScenarioContext,
  connections: Connections,
  pid: number,
  path: string,
  requests: Buffer[],
  row: Timed,
): Promise<number> {
  const cpuBefore = processCpuMicros(pid);
  const load = await runLoad(connections, path, requests, {
    concurrency: ctx.options.size("concurrency"),
    durationMs: ctx.options.size("seconds") * 1000 * 20,
    callTimeoutMs: CALL_TIMEOUT_MS,
    maxCalls: requests.length,
  });
  const cpuAfter = processCpuMicros(pid);
  for (const l of load.latenciesMs) row.latencies.push(l);
  row.calls += load.calls;
  row.errors += load.errors;
  row.firstError ??= load.firstError;
  row.serverCpuMicros += (cpuAfter ?? 0) - (cpuBefore ?? 0);
  return load.calls;
}

async function measureStore(
  ctx: ScenarioContext,
  store: StoreKind,
  storeFlag: string,
  out: Timed[],
): Promise<void> {
  const o = ctx.options;
  const sizes: Record<Which, number> = {
    long: o.size("long-messages"),
    short: o.size("short-messages"),
  };
  const maxStored = Math.max(sizes.long, sizes.short);
  const server = await startServerProcess({
    label: `windlass (${store} store)`,
    script: `${ctx.root}bin/windlass-memory.js`,
    args: serveArgs(storeFlag, ["--log-level", "warn"]),
    startTimeoutMs: START_TIMEOUT_MS,
  });
  const address = `127.0.0.1:${server.grpcPort}`;
  const client = new MemoryClient(address, CALL_TIMEOUT_MS);
  const connections = openConnections("h2", address, 1);
  const rows = new Map<string, Timed>();
  const row = (call: Call, parent: Which): Timed => {
    const key = `${call}/${parent}`;
    let r = rows.get(key);
    if (r === undefined) {
      r = emptyTimed(store, call, parent);
      rows.set(key, r);
    }
    return r;
  };
  try {
    const started = performance.now();
    await fill(client, PARENT.long, sizes.long, maxStored);
    await fill(client, PARENT.short, sizes.short, maxStored);
    process.stdout.write(
      `filled    ${store}: ${sizes.long} + ${sizes.short} messages in ${((performance.now() - started) / 1000).toFixed(1)} s\n`,
    );
    // Warm-up round (-1): compiles the paths; not recorded.
    for (let round = -1; round < o.size("rounds"); round++) {
      const order: Which[] = round % 2 === 0 ? ["long", "short"] : ["short", "long"];
      for (const which of order) {
        // The warm-up also lets the fill's garbage be collected before timing.
        const count = round < 0 ? WARMUP_FORKS : o.size("forks");
        const forks = forkRequests(which, round, count, sizes[which]);
        const sink = (call: Call) =>
          round < 0 ? emptyTimed(store, call, which) : row(call, which);
        const made = await timedOnce(
          ctx,
          connections,
          server.pid,
          FORK_PATH,
          forks.requests,
          sink("Fork"),
        );
        // Calls run in order at concurrency 1, so the first `made` forks exist.
        const ids = forks.ids.slice(0, made);
        if (ids.length === 0) continue;
        await timedOnce(ctx, connections, server.pid, GET_PATH, ids.map(encodedGet), sink("Get"));
        const adds = ids.map((id, i) => encodedAdd(id, i));
        await timedOnce(ctx, connections, server.pid, ADD_PATH, adds, sink("Add"));
        if (round >= 0) {
          const f = row("Fork", which);
          process.stdout.write(
            `measured  ${store} ${which} round ${round + 1}: ${made} forks, Fork p50 ` +
              `${quantile(Float64Array.from(f.latencies).sort(), 0.5).toFixed(3)} ms` +
              (f.errors > 0 ? `, ${f.errors} errors (${f.firstError})` : "") +
              "\n",
          );
        }
      }
    }
    for (const call of CALLS) out.push(row(call, "long"), row(call, "short"));
  } finally {
    connections.close();
    client.close();
    await server.stop();
  }
}

function emptyTimed(store: StoreKind, call: Call, parent: Which): Timed {
  return {
    store,
    call,
    parent,
    latencies: [],
    calls: 0,
    errors: 0,
    firstError: undefined,
    serverCpuMicros: 0,
  };
}

const pct = (t: Timed, q: number): number => quantile(Float64Array.from(t.latencies).sort(), q);
const cpuPerCall = (t: Timed): number => t.serverCpuMicros / t.calls;

function ratioLines(stores: readonly StoreKind[], timed: readonly Timed[]): string[] {
  const lines: string[] = [];
  for (const store of stores) {
    for (const call of CALLS) {
      const of = (p: Which) =>
        timed.find((t) => t.store === store && t.call === call && t.parent === p);
      const long = of("long");
      const short = of("short");
      if (long === undefined || short === undefined || long.calls === 0 || short.calls === 0) {
        continue;
      }
      const p50 = pct(long, 0.5) / pct(short, 0.5);
      const p99 = pct(long, 0.99) / pct(short, 0.99);
      const cpu = cpuPerCall(long) / cpuPerCall(short);
      lines.push(
        `| ${store} | ${call} | ${p50.toFixed(2)} | ${p99.toFixed(2)} | ${cpu.toFixed(2)} | ${p99 <= GOAL ? "meets" : "**misses**"} |`,
      );
    }
  }
  return lines;
}

async function run(ctx: ScenarioContext): Promise<ScenarioOutcome> {
  const stores = storesFor(ctx.options, FORK_STORES) as StoreKind[];
  const backends = await openStoreBackends(stores, ctx.redisServer);
  const timed: Timed[] = [];
  try {
    for (const store of stores) await measureStore(ctx, store, backends.storeFlag(store), timed);
  } finally {
    await backends.close();
  }
  const o = ctx.options;
  const lines = [
    `Fork of a parent of ${o.size("long-messages")} messages vs one of ${o.size("short-messages")} ` +
      `(window ${WINDOW}, max_stored ${Math.max(o.size("long-messages"), o.size("short-messages"))}): ` +
      `${o.size("forks")} Forks per parent and round, at last_seq and last_seq - ${TAIL_BACK} by turns, ` +
      `then a window Get and a one-message Add on each fork; ${o.size("concurrency")} call(s) in flight ` +
      `(h2 driver), ${o.size("rounds")} round(s), long and short parents taking turns. ` +
      `Server CPU per call from the server process's CPU time around each run. Goal: long/short <= ${GOAL}.`,
    "",
    "| store | call | parent | calls | p50 ms | p99 ms | server CPU us/call | errors |",
    "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ...timed.map(
      (t) =>
        `| ${t.store} | ${t.call} | ${t.parent} | ${t.calls} | ${pct(t, 0.5).toFixed(3)} | ${pct(t, 0.99).toFixed(3)} | ` +
        `${t.calls === 0 ? "n/a" : cpuPerCall(t).toFixed(0)} | ${t.errors} |`,
    ),
    "",
    "| store | call | p50 long/short | p99 long/short | CPU/call long/short | goal <= 1.2 (p99) |",
    "| --- | --- | ---: | ---: | ---: | --- |",
    ...ratioLines(stores, timed),
  ];
  const errors = timed.reduce((n, t) => n + t.errors, 0);
  return { markdown: lines.join("\n"), valid: errors === 0 };
}

export const forkScenario = {
  title:
    "fork: Fork of a 100,000-message thread vs a 100-message one, then Get and Add on the forks",
  budgetMs(ctx: ScenarioContext): number {
    const o = ctx.options;
    const stores = storesFor(o, FORK_STORES).length;
    const calls = 2 * (o.size("rounds") + 1) * 3 * (o.size("forks") + WARMUP_FORKS);
    const timed = calls * 50 + 6 * (o.size("rounds") + 1) * (CALL_TIMEOUT_MS + 1_000);
    const fill = (o.size("long-messages") / 1_000 + 4) * 2_000;
    return stores * (timed + fill + 2 * START_TIMEOUT_MS + 60_000);
  },
  redisServerOf: (ctx: ScenarioContext): string | undefined =>
    storesFor(ctx.options, FORK_STORES).includes("redis") ? ctx.redisServer : undefined,
  usesPostgres: (ctx: ScenarioContext): boolean =>
    storesFor(ctx.options, FORK_STORES).includes("postgres"),
  run,
};
