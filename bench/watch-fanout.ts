import type * as http2 from "node:http2";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  type AddRequest,
  AddRequestSchema,
  ChatMessageSchema,
  EventType,
  GetRequestSchema,
  Role,
  StrategySchema,
  WatchRequestSchema,
  WatchResponseSchema,
} from "../gen/ts/windlass/memory/v1/memory_pb.js";
import { openConnections, quantile, runLoad } from "./load.js";
import {
  inspectorUrl,
  type MemorySample,
  mib,
  openInspector,
  residentBytes,
  sampleAfterGc,
} from "./process-memory.js";
import type { ScenarioOutcome } from "./results.js";
import { connectSession, MemoryClient, openWatch, type WatchStream, wallMs } from "./rpc.js";
import type { ScenarioContext } from "./run.js";
import { ADD_PATH, text } from "./scenarios.js";
import { type ServerProcess, startServerProcess, UNLIMITED_SERVE_FLAGS } from "./server-process.js";

/**
 * Watch, on the memory store, in two parts.
 *
 * Fan-out: 1,000 watchers of one summary thread (Watch with thread_ids and
 * event_types SUMMARY_UPDATED, on node:http2 sessions of 50 streams). Each
 * round adds 6 messages, which makes a fold of the extractive summariser due
 * at once; the round ends when every watcher has the SummaryUpdated of that
 * fold. The fold's commit time cannot be seen from outside, so three
 * intervals are reported per (fold, watcher): from the event's `time` field
 * (set by the server when it logs the event, millisecond resolution) to the
 * moment the watcher's bytes arrived; from the first watcher's arrival (the
 * spread of the fan-out itself); and from the moment the Add was sent (which
 * includes the Add and the fold). Goal: p99 of the first <= 50 ms. All
 * watchers are read by this one process, so a late watcher's figure also
 * holds the time this process took to read the ones before it.
 *
 * Slow watchers: 100 watchers (one HTTP/2 session each, no filter) that
 * never read while 20,000 MessagesAdded events pass; the server's resident
 * memory is compared after forced collections (inspector) with the same
 * 20,000 events passing before the watchers opened. Then the watchers read
 * what they were sent and their end status is reported: RESOURCE_EXHAUSTED
 * means the server dropped them rather than buffering for them.
 */

const CALL_TIMEOUT_MS = 30_000;
const START_TIMEOUT_MS = 20_000;
const STREAMS_PER_SESSION = 50;
const ROUND_TIMEOUT_MS = 30_000;
const GOAL_P99_MS = 50;
const FANOUT_THREAD = "bench-watch-fanout";
const FOLD_EVERY = 6;
const SUMMARY_WINDOW = 10;
const SLOW_THREADS = 100;
const SLOW_MAX_STORED = 100;
const DRAIN_IDLE_MS = 2_000;
const DRAIN_MAX_MS = 30_000;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function waitUntil(what: string, ok: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`watch: ${what} not within ${timeoutMs} ms`);
    await sleep(5);
  }
}

function startServer(ctx: ScenarioContext, inspect: boolean): Promise<ServerProcess> {
  return startServerProcess({
    label: "windlass (memory store)",
    nodeArgs: inspect ? ["--inspect=127.0.0.1:0"] : [],
    script: `${ctx.root}bin/windlass-memory.js`,
    args: [
      "serve",
      ...UNLIMITED_SERVE_FLAGS,
      "--port",
      "0",
      "--http-port",
      "0",
      "--store",
      "memory",
      "--log-level",
      "warn",
    ],
    startTimeoutMs: START_TIMEOUT_MS,
  });
}

function sixMessages(from: number): AddRequest {
  return create(AddRequestSchema, {
    threadId: FANOUT_THREAD,
    strategy: create(StrategySchema, {
      kind: {
        case: "summary",
        value: { window: SUMMARY_WINDOW, summarizeEvery: FOLD_EVERY },
      },
    }),
    messages: Array.from({ length: FOLD_EVERY }, (_, k) =>
      create(ChatMessageSchema, {
        role: (from + k) % 2 === 0 ? Role.USER : Role.ASSISTANT,
        content: text(150, from + k),
      }),
    ),
  });
}

interface Arrival {
  readonly bytes: Buffer;
  readonly atMs: number;
}

interface FanoutResult {
  readonly watchers: number;
  readonly folds: number;
  readonly fromEventTime: Float64Array;
  readonly fromFirstArrival: Float64Array;
  readonly fromAddSent: Float64Array;
  readonly eventBytes: number;
  /** This process's event-loop delay during the rounds, ms: p50, p99, max. */
  readonly driverLagMs: readonly [number, number, number];
}

async function fanout(ctx: ScenarioContext): Promise<FanoutResult> {
  const watchers = ctx.options.size("watchers");
  const folds = ctx.options.size("folds");
  const server = await startServer(ctx, false);
  const address = `127.0.0.1:${server.grpcPort}`;
  const client = new MemoryClient(address, CALL_TIMEOUT_MS);
  const sessions: http2.ClientHttp2Session[] = [];
  const streams: WatchStream[] = [];
  try {
    // A summary exists first, so each watcher's initial SummaryUpdated
    // (send_initial_state) proves its stream is open before the rounds start.
    let seq = 0;
    await client.add(sixMessages(seq));
    seq += FOLD_EVERY;
    await client.add(sixMessages(seq));
    seq += FOLD_EVERY;
    await client.add(sixMessages(seq));
    seq += FOLD_EVERY;
    const first = await client.get(create(GetRequestSchema, { threadId: FANOUT_THREAD }));
    if (first.summary === "") throw new Error("watch: the fan-out thread has no summary");

    const inbox: Arrival[][] = Array.from({ length: watchers }, () => []);
    const request = create(WatchRequestSchema, {
      threadIds: [FANOUT_THREAD],
      eventTypes: [EventType.SUMMARY_UPDATED],
      sendInitialState: true,
    });
    for (let w = 0; w < watchers; w++) {
      if (w % STREAMS_PER_SESSION === 0) sessions.push(connectSession(address));
      const session = sessions.at(-1) as http2.ClientHttp2Session;
      const box = inbox[w] as Arrival[];
      // Only the arrival is recorded here; decoding waits until the round is over.
      streams.push(
        openWatch(session, request, {
          paused: false,
          onMessage: (bytes, atMs) => box.push({ bytes: Buffer.from(bytes), atMs }),
        }),
      );
    }
    await waitUntil(
      `the initial state at all ${watchers} watchers`,
      () => inbox.every((box) => box.length >= 1),
      ROUND_TIMEOUT_MS,
    );
    for (const box of inbox) box.length = 0;

    const fromEventTime: number[] = [];
    const fromFirstArrival: number[] = [];
    const fromAddSent: number[] = [];
    let eventBytes = 0;
    let through = 0n;
    // How late this process itself ran its callbacks: a share of every figure below.
    const lag = monitorEventLoopDelay({ resolution: 1 });
    lag.enable();
    for (let fold = 0; fold < folds; fold++) {
      const sentAt = wallMs();
      await client.add(sixMessages(seq));
      seq += FOLD_EVERY;
      await waitUntil(
        `fold ${fold + 1}'s SummaryUpdated at all ${watchers} watchers`,
        () => inbox.every((box) => box.length >= 1),
        ROUND_TIMEOUT_MS,
      );
      // A progress event or a second fold may also be there; take each watcher's first new summary.
      const arrivals: { atMs: number; eventMs: number }[] = [];
      let roundThrough = through;
      for (const box of inbox) {
        for (const a of box) {
          const event = fromBinary(WatchResponseSchema, a.bytes);
          if (event.event.case !== "summaryUpdated") continue;
          if (event.event.value.summarizedThroughSeq <= through) continue;
          const t = event.time;
          const eventMs = t === undefined ? Number.NaN : Number(t.seconds) * 1000 + t.nanos / 1e6;
          arrivals.push({ atMs: a.atMs, eventMs });
          eventBytes = a.bytes.length;
          if (event.event.value.summarizedThroughSeq > roundThrough) {
            roundThrough = event.event.value.summarizedThroughSeq;
          }
          break;
        }
        box.length = 0;
      }
      if (arrivals.length !== watchers) {
        throw new Error(
          `watch: fold ${fold + 1} reached ${arrivals.length} of ${watchers} watchers`,
        );
      }
      through = roundThrough;
      const firstAt = Math.min(...arrivals.map((a) => a.atMs));
      for (const a of arrivals) {
        fromEventTime.push(a.atMs - a.eventMs);
        fromFirstArrival.push(a.atMs - firstAt);
        fromAddSent.push(a.atMs - sentAt);
      }
      process.stdout.write(
        `fold      ${fold + 1}/${folds}: at all ${watchers} watchers ${(Math.max(...arrivals.map((a) => a.atMs)) - sentAt).toFixed(1)} ms after the Add was sent\n`,
      );
    }
    lag.disable();
    const sorted = (values: number[]): Float64Array => Float64Array.from(values).sort();
    return {
      driverLagMs: [lag.percentile(50) / 1e6, lag.percentile(99) / 1e6, lag.max / 1e6],
      watchers,
      folds,
      fromEventTime: sorted(fromEventTime),
      fromFirstArrival: sorted(fromFirstArrival),
      fromAddSent: sorted(fromAddSent),
      eventBytes,
    };
  } finally {
    for (const s of streams) s.cancel();
    for (const s of sessions) s.close();
    client.close();
    await server.stop();
  }
}

interface SlowResult {
  readonly watchers: number;
  readonly events: number;
  readonly beforeWatchers: MemorySample;
  readonly afterEvents: MemorySample;
  readonly baseline: MemorySample;
  readonly peakRss: number;
  readonly statuses: Map<string, number>;
  readonly receivedMax: number;
  readonly receivedMin: number;
  readonly addErrors: number;
}

/** `events` Adds of one message, round-robin over SLOW_THREADS window threads. */
async function passEvents(
  address: string,
  events: number,
  onProgress: () => void,
): Promise<number> {
  const requests = Array.from({ length: SLOW_THREADS }, (_, i) =>
    Buffer.from(
      toBinary(
        AddRequestSchema,
        create(AddRequestSchema, {
          threadId: `bench-watch-slow-${i}`,
          strategy: create(StrategySchema, {
            kind: { case: "window", value: { window: 20 } },
            maxStored: SLOW_MAX_STORED,
          }),
          messages: [create(ChatMessageSchema, { role: Role.USER, content: text(150, i) })],
        }),
      ),
    ),
  );
  const connections = openConnections("h2", address, 2);
  let errors = 0;
  try {
    const slices = 10;
    for (let s = 0; s < slices; s++) {
      const load = await runLoad(connections, ADD_PATH, requests, {
        concurrency: 16,
        durationMs: 120_000,
        callTimeoutMs: CALL_TIMEOUT_MS,
        maxCalls: Math.ceil(events / slices),
      });
      errors += load.errors;
      onProgress();
    }
  } finally {
    connections.close();
  }
  return errors;
}

async function slowWatchers(ctx: ScenarioContext): Promise<SlowResult> {
  const watchers = ctx.options.size("slow-watchers");
  const events = ctx.options.size("slow-events");
  const server = await startServer(ctx, true);
  const address = `127.0.0.1:${server.grpcPort}`;
  const url = inspectorUrl(server.stderrText());
  const sessions: http2.ClientHttp2Session[] = [];
  const streams: WatchStream[] = [];
  try {
    if (url === undefined) throw new Error("watch: no inspector URL in the server's stderr");
    const inspector = await openInspector(url);
    try {
      const baseline = await sampleAfterGc(inspector, server.pid);
      // The same events once without watchers: the store and event log reach their bounds.
      let addErrors = await passEvents(address, events, () => {});
      const beforeWatchers = await sampleAfterGc(inspector, server.pid);
      const request = create(WatchRequestSchema, {});
      for (let w = 0; w < watchers; w++) {
        const session = connectSession(address);
        sessions.push(session);
        streams.push(openWatch(session, request, { paused: true }));
      }
      // A paused stream shows nothing, so there is no event that proves it is open; give the
      // server a moment. The received counts below show that the watchers were there.
      await sleep(1_000);
      let peakRss = residentBytes(server.pid) ?? 0;
      addErrors += await passEvents(address, events, () => {
        peakRss = Math.max(peakRss, residentBytes(server.pid) ?? 0);
      });
      const afterEvents = await sampleAfterGc(inspector, server.pid);
      // Now read what each watcher was sent, until its stream ends or stays idle.
      let lastActivity = Date.now();
      for (const s of streams)
        s.resume(() => {
          lastActivity = Date.now();
        });
      const deadline = Date.now() + DRAIN_MAX_MS;
      while (
        Date.now() < deadline &&
        streams.some((s) => s.status === undefined) &&
        Date.now() - lastActivity < DRAIN_IDLE_MS
      ) {
        await sleep(50);
      }
      const statuses = new Map<string, number>();
      for (const s of streams) {
        const code = s.status === undefined ? "still open" : codeName(s.status);
        statuses.set(code, (statuses.get(code) ?? 0) + 1);
      }
      const received = streams.map((s) => s.received);
      return {
        watchers,
        events,
        baseline,
        beforeWatchers,
        afterEvents,
        peakRss,
        statuses,
        receivedMax: Math.max(...received),
        receivedMin: Math.min(...received),
        addErrors,
      };
    } finally {
      inspector.close();
    }
  } finally {
    for (const s of streams) s.cancel();
    for (const s of sessions) s.close();
    await server.stop();
  }
}

function codeName(status: string): string {
  const code = status.split(" ", 1)[0];
  const names: Record<string, string> = {
    "0": "OK",
    "1": "CANCELLED",
    "8": "RESOURCE_EXHAUSTED",
    "14": "UNAVAILABLE",
  };
  return code !== undefined && names[code] !== undefined ? names[code] : status.slice(0, 60);
}

const q = (values: Float64Array, p: number): string => quantile(values, p).toFixed(1);

async function run(ctx: ScenarioContext): Promise<ScenarioOutcome> {
  const f = await fanout(ctx);
  const s = await slowWatchers(ctx);
  const p99 = quantile(f.fromEventTime, 0.99);
  const growth = s.afterEvents.rss - s.beforeWatchers.rss;
  const exhausted = s.statuses.get("RESOURCE_EXHAUSTED") ?? 0;
  const lines = [
    `Fan-out: ${f.watchers} watchers of one summary thread (memory store, extractive summariser, ` +
      `window ${SUMMARY_WINDOW}, summarize_every ${FOLD_EVERY}), ${f.folds} folds, each made due by an Add ` +
      `of ${FOLD_EVERY} messages; SummaryUpdated events of ${f.eventBytes} bytes. Intervals per (fold, ` +
      `watcher), ${f.fromEventTime.length} in all, in ms. The reference for the goal is the event's ` +
      "`time` field (set by the server when it logs the event, ms resolution; same machine clock); " +
      "the first watcher's arrival and the Add's send time are shown beside it.",
    "",
    "| from | p50 ms | p99 ms | max ms |",
    "| --- | ---: | ---: | ---: |",
    `| event time field | ${q(f.fromEventTime, 0.5)} | ${q(f.fromEventTime, 0.99)} | ${q(f.fromEventTime, 1)} |`,
    `| first watcher's arrival | ${q(f.fromFirstArrival, 0.5)} | ${q(f.fromFirstArrival, 0.99)} | ${q(f.fromFirstArrival, 1)} |`,
    `| Add sent | ${q(f.fromAddSent, 0.5)} | ${q(f.fromAddSent, 0.99)} | ${q(f.fromAddSent, 1)} |`,
    "",
    `Goal p99 <= ${GOAL_P99_MS} ms from the event's time: ${p99 <= GOAL_P99_MS ? "meets" : "**misses**"} ` +
      `(${p99.toFixed(1)} ms). All watchers are read by one node process, so the figures also hold its own ` +
      `reading time: its event-loop delay during the rounds was p50 ${f.driverLagMs[0].toFixed(1)} ms, ` +
      `p99 ${f.driverLagMs[1].toFixed(1)} ms, max ${f.driverLagMs[2].toFixed(1)} ms.`,
    "",
    `Slow watchers: ${s.watchers} watchers (one HTTP/2 session each, every event of the namespace) that do ` +
      `not read while ${s.events} MessagesAdded events pass (Adds of one message over ${SLOW_THREADS} window ` +
      `threads with max_stored ${SLOW_MAX_STORED}). Server memory after forced collections:`,
    "",
    "| point | RSS MiB | heap used MiB | external MiB |",
    "| --- | ---: | ---: | ---: |",
    `| fresh server | ${mib(s.baseline.rss)} | ${mib(s.baseline.heapUsed)} | ${mib(s.baseline.external)} |`,
    `| after ${s.events} events, no watchers | ${mib(s.beforeWatchers.rss)} | ${mib(s.beforeWatchers.heapUsed)} | ${mib(s.beforeWatchers.external)} |`,
    `| after ${s.events} more events, ${s.watchers} watchers not reading | ${mib(s.afterEvents.rss)} | ${mib(s.afterEvents.heapUsed)} | ${mib(s.afterEvents.external)} |`,
    "",
    `Growth while the watchers did not read: ${mib(growth)} MiB RSS ` +
      `(${(growth / s.watchers / 1024).toFixed(1)} KiB per watcher), heap ` +
      `${mib(s.afterEvents.heapUsed - s.beforeWatchers.heapUsed)} MiB; peak RSS during the events ` +
      `(no forced collection) ${mib(s.peakRss)} MiB. When they then read: ` +
      `${[...s.statuses.entries()].map(([k, n]) => `${n} ended ${k}`).join(", ")}; ` +
      `each had received ${s.receivedMin}-${s.receivedMax} events. ` +
      (exhausted === s.watchers
        ? "Goal (bounded): meets: the server ended every slow watcher instead of buffering for it."
        : "Goal (bounded): **not shown**: not every slow watcher was ended by the server."),
  ];
  return { markdown: lines.join("\n"), valid: s.addErrors === 0 };
}

export const watchScenario = {
  title: "watch: SummaryUpdated fan-out to many watchers; watchers that never read",
  budgetMs(ctx: ScenarioContext): number {
    return (
      ctx.options.size("folds") * (ROUND_TIMEOUT_MS + CALL_TIMEOUT_MS) +
      2 * ROUND_TIMEOUT_MS +
      (ctx.options.size("slow-events") / 100) * 1_000 +
      DRAIN_MAX_MS +
      4 * START_TIMEOUT_MS +
      120_000
    );
  },
  run,
};
