import { performance } from "node:perf_hooks";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  AddRequestSchema,
  AddResponseSchema,
  ChatMessageSchema,
  GetRequestSchema,
  GetResponseSchema,
  Role,
  StrategySchema,
} from "../gen/ts/windlass/memory/v1/memory_pb.js";
import { startApp } from "../src/app.js";
import { loadConfig } from "../src/config.js";
import { silentLogger } from "../src/logger.js";
import type { CallContext } from "../src/service/context.js";
import { encodeGetResponse } from "../src/service/pre-encoded.js";
import { encodeAddResponse, encodeGetResponseTail } from "../src/service/response-encoding.js";
import { addRequests, GET_WINDOW, getRequest, getSeedRequests } from "./scenarios.js";

/**
 * Where the real server's time per call goes, without a network: each step
 * of the Add and Get hot paths timed in-process on the real service (built by
 * startApp with the same settings as `npm run bench`), plus what an
 * alternative encoding of GetResponse would cost, and a window Get on a
 * 100,000-message thread beside one on a 100-message thread. Complements
 * `npm run bench`, which only sees whole calls.
 *
 *   npm run build && node dist/bench/hot-path.js
 *
 * Every loop is bounded by a count and by time (BENCH_HOT_PATH_MS per step).
 */

const STEP_MS = boundedNumber(process.env.BENCH_HOT_PATH_MS, 1_500, 100, 60_000);
const MAX_ITERATIONS = 2_000_000;
const CALL_DEADLINE_MS = 10_000;
const LONG_THREAD_MESSAGES = 100_000;

function boundedNumber(
  text: string | undefined,
  fallback: number,
  min: number,
  max: number,
): number {
  const n = text === undefined || text === "" ? fallback : Number(text);
  if (!Number.isFinite(n) || n < min || n > max) {
    throw new Error(`BENCH_HOT_PATH_MS="${text}": expected ${min}..${max}`);
  }
  return n;
}

interface StepResult {
  readonly name: string;
  readonly usPerOp: number;
  readonly iterations: number;
}

/**
 * Costs `op` in CPU microseconds per call: a warm-up, then three runs of a
 * third of STEP_MS each, keeping the cheapest. CPU time rather than wall time
 * and the minimum of three, because the machine may be shared: time other
 * processes take is not ours. Batches of 64 keep the clock out of the figure.
 */
async function step(name: string, op: (i: number) => unknown): Promise<StepResult> {
  const runFor = async (ms: number): Promise<{ n: number; cpuMicros: number }> => {
    const start = performance.now();
    const cpu = process.cpuUsage();
    let n = 0;
    while (n < MAX_ITERATIONS && performance.now() - start < ms) {
      for (let k = 0; k < 64; k++, n++) {
        const r = op(n);
        if (r instanceof Promise) await r;
      }
    }
    const used = process.cpuUsage(cpu);
    return { n, cpuMicros: used.user + used.system };
  };
  await runFor(STEP_MS / 3);
  let best: StepResult | undefined;
  for (let rep = 0; rep < 3; rep++) {
    const { n, cpuMicros } = await runFor(STEP_MS / 3);
    const usPerOp = cpuMicros / n;
    if (best === undefined || usPerOp < best.usPerOp) best = { name, usPerOp, iterations: n };
  }
  return best ?? { name, usPerOp: Number.NaN, iterations: 0 };
}

async function main(): Promise<void> {
  // Servers bind to 127.0.0.1 on free ports and get no traffic: only the
  // service is used, exactly as the servers would call it.
  const app = await startApp(loadConfig(["--port", "0", "--http-port", "0"], {}), silentLogger);
  try {
    const ctx = (): CallContext => ({
      namespace: "",
      signal: new AbortController().signal,
      deadline: Date.now() + CALL_DEADLINE_MS,
    });
    const { service } = app;
    for (const seed of getSeedRequests()) {
      await service.add(fromBinary(AddRequestSchema, seed), ctx());
    }
    const ctxOnce = ctx();

    const getBytes = getRequest();
    const getReq = fromBinary(GetRequestSchema, getBytes);
    const getRes = await service.get(getReq, ctxOnce);
    const getResBytes = toBinary(GetResponseSchema, getRes);
    if (getRes.messages.length !== GET_WINDOW) throw new Error("Get did not return the window");

    const adds = addRequests(300);
    const addReqs = adds.map((b) => fromBinary(AddRequestSchema, b));
    const addRes = await service.add(addReqs[0] ?? create(AddRequestSchema), ctxOnce);

    if (Buffer.compare(Buffer.from(encodeGetResponse(getRes)), getResBytes) !== 0) {
      throw new Error("the spliced GetResponse differs from toBinary's");
    }

    const results: StepResult[] = [];
    const run = async (name: string, op: (i: number) => unknown): Promise<void> => {
      results.push(await step(name, op));
    };
    await run("Get: fromBinary GetRequest", () => fromBinary(GetRequestSchema, getBytes));
    await run(`Get: service.get (store read, recall, create ${GET_WINDOW} messages)`, () =>
      service.get(getReq, ctxOnce),
    );
    await run(
      `Get: encode GetResponse as served (${getResBytes.length} B, cached message bytes)`,
      () => encodeGetResponse(getRes),
    );
    await run("Get: encode GetResponse with plain protobuf-es toBinary, for comparison", () =>
      toBinary(GetResponseSchema, getRes),
    );
    await run("Get: whole core path (decode + service.get + encode as served)", async () =>
      encodeGetResponse(await service.get(fromBinary(GetRequestSchema, getBytes), ctxOnce)),
    );
    await run("Get client: fromBinary GetResponse", () =>
      fromBinary(GetResponseSchema, getResBytes),
    );
    await run("Add: fromBinary AddRequest", (i) =>
      fromBinary(AddRequestSchema, adds[i % adds.length] as Buffer),
    );
    await run("Add: service.add (validate, store append, event)", (i) =>
      service.add(addReqs[i % addReqs.length] ?? create(AddRequestSchema), ctxOnce),
    );
    await run("Add: encode AddResponse as served", () => encodeAddResponse(addRes));
    await run("Add: encode AddResponse with plain protobuf-es toBinary, for comparison", () =>
      toBinary(AddResponseSchema, addRes),
    );
    await run("Get: encode GetResponse's fields but messages as served", () =>
      encodeGetResponseTail(getRes),
    );
    await run("per call whose signal is read: AbortController + deadline timer", () => {
      const controller = new AbortController();
      const timer = setTimeout(() => controller.abort(), CALL_DEADLINE_MS);
      timer.unref();
      clearTimeout(timer);
      return controller.signal;
    });
    await run("per call: AbortController alone", () => new AbortController().signal);

    // Thread length: the same window Get on a thread of 100,000 messages and
    // on one of 100 (bench scenario thread-length measures it over gRPC).
    const lengthStrategy = create(StrategySchema, {
      kind: { case: "window", value: { window: GET_WINDOW } },
      maxStored: LONG_THREAD_MESSAGES,
    });
    for (const [threadId, count] of [
      ["bench-hot-long", LONG_THREAD_MESSAGES],
      ["bench-hot-short", 100],
    ] as const) {
      for (let from = 0; from < count; from += 1000) {
        const messages = Array.from({ length: Math.min(1000, count - from) }, (_, k) =>
          create(ChatMessageSchema, { role: Role.USER, content: `${"m".repeat(150)} ${from + k}` }),
        );
        await service.add(
          create(AddRequestSchema, { threadId, strategy: lengthStrategy, messages }),
          ctxOnce,
        );
      }
    }
    for (const [label, threadId] of [
      ["100,000", "bench-hot-long"],
      ["100", "bench-hot-short"],
    ] as const) {
      const req = create(GetRequestSchema, { threadId });
      await run(`Get: service.get, window ${GET_WINDOW} of a ${label}-message thread`, () =>
        service.get(req, ctxOnce),
      );
    }

    const width = Math.max(...results.map((r) => r.name.length));
    process.stdout.write(
      `windlass-memory hot path, in-process, CPU us per call, best of 3 (node ${process.version}; ${STEP_MS} ms per step)\n` +
        `${"step".padEnd(width)}  us/op  iterations\n` +
        results
          .map(
            (r) =>
              `${r.name.padEnd(width)}  ${r.usPerOp.toFixed(2).padStart(5)}  ${String(r.iterations).padStart(10)}`,
          )
          .join("\n") +
        "\n",
    );
    process.stdout.write(
      `${JSON.stringify({
        benchmark: "windlass-memory hot path",
        node: process.version,
        stepMs: STEP_MS,
        steps: results.map((r) => ({ name: r.name, usPerOp: Number(r.usPerOp.toFixed(3)) })),
      })}\n`,
    );
  } finally {
    await app.stop();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(
    `hot-path: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  process.exitCode = 1;
});
