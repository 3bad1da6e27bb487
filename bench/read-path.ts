import { create } from "@bufbuild/protobuf";
import {
  AddRequestSchema,
  ChatMessageSchema,
  GetRequestSchema,
  Role,
  StrategySchema,
} from "../gen/ts/windlass/memory/v1/memory_pb.js";
import { processCpuMicros } from "./cpu-time.js";
import { quantile } from "./load.js";
import { type ModelServer, startModelServer } from "./model-server.js";
import type { ScenarioOutcome } from "./results.js";
import { MemoryClient, wallMs } from "./rpc.js";
import type { ScenarioContext } from "./run.js";
import { text } from "./scenarios.js";
import { serveArgs, startServerProcess } from "./server-process.js";

/**
 * Summaries off the read path: an agent loop over many threads (each turn:
 * Add the user's message, Get, Add the assistant's reply) on the summary
 * strategy with the openai summariser pointed at a scripted model on
 * 127.0.0.1 (bench/model-server.ts). Once with a model that takes 2 s per
 * fold, once with one that answers at once; Get's p50 and p99 are compared
 * (goal: slow/fast p99 <= 1.2). Each pair runs twice: with Get as agents
 * call it by default (it waits, bounded, for a fold that is due or running)
 * and with allow_stale (it never waits).
 */

const SUMMARY_WINDOW = 6;
const SUMMARIZE_EVERY = 4;
const CALL_TIMEOUT_MS = 30_000;
const START_TIMEOUT_MS = 20_000;
const GOAL = 1.2;

interface LoopResult {
  readonly modelDelayMs: number;
  readonly allowStale: boolean;
  readonly gets: Float64Array;
  readonly adds: Float64Array;
  readonly degraded: number;
  readonly withSummary: number;
  readonly errors: number;
  readonly firstError: string | undefined;
  readonly folds: number;
  readonly foldsAsked: number;
  readonly seconds: number;
  readonly serverCpuMicros: number;
}

async function agentLoop(
  ctx: ScenarioContext,
  modelDelayMs: number,
  allowStale: boolean,
): Promise<LoopResult> {
  const o = ctx.options;
  let model: ModelServer | undefined;
  model = await startModelServer(modelDelayMs);
  const server = await startServerProcess({
    label: `windlass (model ${modelDelayMs} ms)`,
    script: `${ctx.root}bin/windlass-memory.js`,
    args: serveArgs("memory", [
      "--summarizer",
      "openai",
      "--openai-base-url",
      model.baseUrl,
      "--openai-model",
      "bench-scripted",
      "--log-level",
      "warn",
    ]),
    startTimeoutMs: START_TIMEOUT_MS,
  });
  const client = new MemoryClient(`127.0.0.1:${server.grpcPort}`, CALL_TIMEOUT_MS);
  const gets: number[] = [];
  const adds: number[] = [];
  let degraded = 0;
  let withSummary = 0;
  let errors = 0;
  let firstError: string | undefined;
  const strategy = create(StrategySchema, {
    kind: { case: "summary", value: { window: SUMMARY_WINDOW, summarizeEvery: SUMMARIZE_EVERY } },
  });
  const timed = async <T>(into: number[], call: () => Promise<T>): Promise<T | undefined> => {
    const started = wallMs();
    try {
      const result = await call();
      into.push(wallMs() - started);
      return result;
    } catch (err) {
      errors++;
      firstError ??= err instanceof Error ? err.message : String(err);
      return undefined;
    }
  };
  const agent = async (a: number): Promise<void> => {
    const threadId = `bench-agent-${String(a).padStart(5, "0")}`;
    for (let turn = 0; turn < o.size("turns"); turn++) {
      const say = (role: Role, seed: number) =>
        create(AddRequestSchema, {
          threadId,
          strategy,
          messages: [create(ChatMessageSchema, { role, content: text(150, seed) })],
        });
      await timed(adds, () => client.add(say(Role.USER, a * 1000 + 2 * turn)));
      const got = await timed(gets, () =>
        client.get(create(GetRequestSchema, { threadId, allowStale })),
      );
      if (got?.degraded) degraded++;
      if (got !== undefined && got.summary !== "") withSummary++;
      await timed(adds, () => client.add(say(Role.ASSISTANT, a * 1000 + 2 * turn + 1)));
    }
  };
  const cpuBefore = processCpuMicros(server.pid) ?? 0;
  const started = performance.now();
  try {
    let next = 0;
    const runner = async (): Promise<void> => {
      for (;;) {
        const a = next++;
        if (a >= o.size("agents")) return;
        await agent(a);
      }
    };
    await Promise.all(
      Array.from({ length: Math.min(o.size("agents-at-once"), o.size("agents")) }, runner),
    );
    const seconds = (performance.now() - started) / 1000;
    const serverCpuMicros = (processCpuMicros(server.pid) ?? 0) - cpuBefore;
    return {
      modelDelayMs,
      allowStale,
      gets: Float64Array.from(gets).sort(),
      adds: Float64Array.from(adds).sort(),
      degraded,
      withSummary,
      errors,
      firstError,
      folds: model.answered,
      foldsAsked: model.requested,
      seconds,
      serverCpuMicros,
    };
  } finally {
    client.close();
    await server.stop();
    await model.close();
    model = undefined;
  }
}

const ms = (values: Float64Array, p: number): string => quantile(values, p).toFixed(2);

async function run(ctx: ScenarioContext): Promise<ScenarioOutcome> {
  const o = ctx.options;
  const slowDelay = o.size("model-delay-ms");
  const results: LoopResult[] = [];
  for (const allowStale of [false, true]) {
    for (const delay of [0, slowDelay]) {
      const r = await agentLoop(ctx, delay, allowStale);
      results.push(r);
      process.stdout.write(
        `loop      model ${delay} ms${allowStale ? ", allow_stale" : ""}: ${r.gets.length} Gets, ` +
          `p50 ${ms(r.gets, 0.5)} ms, p99 ${ms(r.gets, 0.99)} ms, ${r.folds} folds, ${r.seconds.toFixed(1)} s` +
          (r.errors > 0 ? `, ${r.errors} errors (${r.firstError})` : "") +
          "\n",
      );
    }
  }
  const lines = [
    `Agent loop: ${o.size("agents")} threads, ${o.size("agents-at-once")} at a time, ${o.size("turns")} turns each ` +
      "(Add user message, Get, Add assistant reply; 150-byte messages), memory store, summary strategy " +
      `(window ${SUMMARY_WINDOW}, summarize_every ${SUMMARIZE_EVERY}), openai summariser on a scripted model ` +
      `(bench/model-server.ts) answering after 0 ms or ${slowDelay} ms; server defaults otherwise ` +
      "(--get-fold-wait-ms 5000, --max-concurrent-folds 8).",
    "",
    "| Get | model delay ms | Gets | p50 ms | p99 ms | max ms | degraded | with summary | Add p99 ms | model calls answered / asked | server CPU s | wall s | errors |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...results.map(
      (r) =>
        `| ${r.allowStale ? "allow_stale" : "default (waits)"} | ${r.modelDelayMs} | ${r.gets.length} | ${ms(r.gets, 0.5)} | ` +
        `${ms(r.gets, 0.99)} | ${ms(r.gets, 1)} | ${r.degraded} | ${r.withSummary} | ${ms(r.adds, 0.99)} | ${r.folds} / ${r.foldsAsked} | ` +
        `${(r.serverCpuMicros / 1e6).toFixed(1)} | ${r.seconds.toFixed(1)} | ${r.errors} |`,
    ),
    "",
    "| Get | p50 slow/fast | p99 slow/fast | goal p99 <= 1.2 |",
    "| --- | ---: | ---: | --- |",
  ];
  for (const allowStale of [false, true]) {
    const fast = results.find((r) => r.allowStale === allowStale && r.modelDelayMs === 0);
    const slow = results.find((r) => r.allowStale === allowStale && r.modelDelayMs === slowDelay);
    if (fast === undefined || slow === undefined) continue;
    const p99 = quantile(slow.gets, 0.99) / quantile(fast.gets, 0.99);
    lines.push(
      `| ${allowStale ? "allow_stale" : "default (waits)"} | ${(quantile(slow.gets, 0.5) / quantile(fast.gets, 0.5)).toFixed(2)} | ` +
        `${p99.toFixed(2)} | ${p99 <= GOAL ? "meets" : "**misses**"} |`,
    );
  }
  return {
    markdown: lines.join("\n"),
    valid: results.every((r) => r.errors === 0),
  };
}

export const readPathScenario = {
  title: "read-path: Get in an agent loop with a 2 s summariser vs an instant one",
  budgetMs(ctx: ScenarioContext): number {
    const o = ctx.options;
    const rounds = Math.ceil(o.size("agents") / o.size("agents-at-once")) * o.size("turns");
    // Per turn at most three calls, each bounded by its deadline; in practice far less.
    return 4 * (rounds * 3 * 10_000 + 2 * START_TIMEOUT_MS) + 60_000;
  },
  run,
};
