import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { promisify } from "node:util";
import { create, toJson } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  GetResponseSchema,
  ListThreadsRequestSchema,
  StrategySchema,
  SummaryPlacement,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { runImport } from "../../src/portability/command.js";
import { EXPORT_PAGE, exportNamespace } from "../../src/portability/export.js";
import { importLines } from "../../src/portability/import.js";
import { ThreadLineError } from "../../src/portability/thread-line.js";
import { decodeThreadLine } from "../../src/portability/thread-line-decode.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { createRedisStore } from "../../src/store/redis/index.js";
import type { Store } from "../../src/store/store.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";
import {
  addReq,
  bufferStrategy,
  getReq,
  type Harness,
  msg,
  startHarness,
  summaryStrategy,
  users,
  waitUntil,
  windowStrategy,
} from "../support/service-harness.js";

/** The compiled command (npm test builds dist/ first). */
const BIN = new URL("../../bin/windlass-memory.js", import.meta.url).pathname;
const exec = promisify(execFile);
const NAMESPACES = ["", "team"];

let dir: string;
let redis: RedisServer;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "windlass-portability-"));
  redis = await startRedisServer();
});
afterAll(async () => {
  await redis.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Runs the real command; resolves with its exit status and output, whatever the status. */
async function command(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await exec(process.execPath, [BIN, ...args], {
      env: { PATH: process.env.PATH ?? "" },
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

/**
 * Gets of every thread (the strategy's size, limits 1 and 2), as JSON. Not
 * limit 0: on the summary thread it would make a fold due, changing the
 * thread between two readings (every message is compared through the
 * export files instead).
 */
async function everyGet(h: Harness): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const namespace of NAMESPACES) {
    const ctx = () => h.ctx({ namespace });
    const list = await h.service.listThreads(
      create(ListThreadsRequestSchema, { pageSize: 1000 }),
      ctx(),
    );
    const labeled = await h.service.listThreads(
      create(ListThreadsRequestSchema, { labels: { user_id: "ana" } }),
      ctx(),
    );
    out[`${namespace} labeled`] = labeled.threadIds;
    for (const threadId of list.threadIds) {
      for (const limit of [undefined, 1, 2]) {
        const r = await h.service.get(getReq({ threadId, limit }), ctx());
        out[`${namespace}/${threadId}/${limit}`] = toJson(GetResponseSchema, r);
      }
    }
  }
  return out;
}

/** Threads of every strategy, with tool calls, trims and a fold, in two namespaces. */
async function populate(h: Harness): Promise<void> {
  const ctx = h.ctx();
  await h.service.add(
    addReq({
      threadId: "chat",
      strategy: windowStrategy(3),
      labels: { user_id: "ana", agent: "weather" },
      ttl: create(DurationSchema, { seconds: 3600n }),
      messages: [
        msg("system", "Be brief."),
        msg("user", "Weather in Oslo?", { name: "ana", metadata: { lang: "en" } }),
        msg("assistant", "", {
          toolCalls: [{ id: "call-1", name: "weather", arguments: '{"city":"Oslo"}' }],
        }),
        msg("tool", "4 °C, rain", { toolCallId: "call-1" }),
        msg("assistant", "4 °C and rain."),
      ],
    }),
    ctx,
  );
  await h.service.add(
    addReq({
      threadId: "trimmed",
      strategy: create(StrategySchema, {
        kind: { case: "buffer", value: {} },
        maxStored: 3,
      }),
      messages: users("one", "two", "three", "four", "five"),
    }),
    ctx,
  );
  await h.service.add(
    addReq({ threadId: "buffer", strategy: bufferStrategy(2), messages: users("a", "b", "c") }),
    ctx,
  );
  await h.service.add(
    addReq({
      threadId: "folded",
      strategy: summaryStrategy(2, 2, "extractive"),
      messages: users(
        "We plan a trip to Oslo in May.",
        "The budget is two thousand euros.",
        "Ana prefers trains over planes.",
        "Hotels near the station are best.",
        "Book the museum on Tuesday.",
        "Pack a rain coat.",
      ),
    }),
    ctx,
  );
  // Token budgets and summary placement travel with the strategy.
  await h.service.add(
    addReq({
      threadId: "budgeted",
      strategy: create(StrategySchema, {
        kind: {
          case: "window",
          value: { window: 10, maxTokens: 40, tokenEncoding: "cl100k_base" },
        },
      }),
      messages: users("a short one", "another short one", "and a third, a little longer"),
    }),
    ctx,
  );
  await h.service.add(
    addReq({
      threadId: "placed",
      strategy: create(StrategySchema, {
        kind: {
          case: "summary",
          value: {
            window: 2,
            summarizeEvery: 10,
            model: "extractive",
            maxTokens: 500,
            summaryPlacement: SummaryPlacement.USER,
          },
        },
      }),
      messages: users("one", "two"),
    }),
    ctx,
  );
  // Folded as far as it goes (six messages, window 2: through seq 4), so no
  // fold is due on any store afterwards and every Get is stable.
  await waitUntil(async () => {
    const r = await h.service.get(getReq({ threadId: "folded" }), h.ctx());
    return r.thread?.summarizedThroughSeq === 4n;
  });
  await h.service.add(
    addReq({ threadId: "chat", messages: users("Same id, other tenant.") }),
    h.ctx({ namespace: "team" }),
  );
}

async function exportToFile(store: Store, path: string): Promise<void> {
  const lines: string[] = [];
  for (const ns of NAMESPACES) {
    await exportNamespace(store, ns, async (line) => {
      lines.push(line);
    });
  }
  writeFileSync(path, lines.join(""));
}

function io() {
  const stderr = new PassThrough();
  let err = "";
  stderr.on("data", (d: Buffer) => {
    err += d.toString();
  });
  return {
    io: { stdin: new PassThrough(), stdout: new PassThrough(), stderr, env: {} },
    err: () => err,
  };
}

describe("export and import", () => {
  it("moves two namespaces memory -> SQLite -> Redis with every Get unchanged, idempotently", async () => {
    const memory = await startHarness();
    await populate(memory);
    const before = await everyGet(memory);
    expect(Object.keys(before)).toHaveLength(7 * 3 + 2);
    expect(before[" labeled"]).toEqual(["chat"]);
    expect(before["/chat/undefined"]).toMatchObject({ thread: { ttl: "3600s" } });
    const fromMemory = join(dir, "from-memory.jsonl");
    await exportToFile(memory.store, fromMemory);
    await memory.close();

    // Into SQLite through the function the command runs.
    const sqlitePath = join(dir, "moved.db");
    const first = io();
    expect(
      await runImport(["--store", `sqlite:${sqlitePath}`, "--input", fromMemory], first.io),
    ).toBe(0);
    expect(first.err()).toContain("imported 7 threads, 0 already there unchanged");

    // Out of SQLite and into Redis with the real command.
    const fromSqlite = join(dir, "from-sqlite.jsonl");
    const exported = await command([
      "export",
      "--store",
      `sqlite:${sqlitePath}`,
      "--namespace",
      "",
      "--namespace=team",
      "--output",
      fromSqlite,
    ]);
    expect(exported).toMatchObject({ code: 0 });
    expect(exported.stderr).toContain("exported 7 threads");
    expect(readFileSync(fromSqlite, "utf8")).toBe(readFileSync(fromMemory, "utf8"));
    const imported = await command(["import", "--store", redis.url, "--input", fromSqlite]);
    expect(imported.stderr).toContain("imported 7 threads");
    expect(imported.code).toBe(0);

    const onRedis = await startHarness({ store: await createRedisStore(redis.url) });
    try {
      expect(await everyGet(onRedis)).toEqual(before);
      const fromRedis = await command([
        "export",
        "--store",
        redis.url,
        "--namespace=",
        "--namespace=team",
      ]);
      expect(fromRedis.stdout).toBe(readFileSync(fromMemory, "utf8"));

      // Again: nothing changes.
      const again = await command(["import", "--store", redis.url, "--input", fromSqlite]);
      expect(again.code).toBe(0);
      expect(again.stderr).toContain("imported 0 threads, 7 already there unchanged");
      expect(await everyGet(onRedis)).toEqual(before);

      // A thread of the file that differs from the stored one is refused, by line.
      const lines = readFileSync(fromSqlite, "utf8").split("\n");
      const at = lines.findIndex((l) => l.includes('"thread_id":"trimmed"'));
      lines[at] = (lines[at] ?? "").replace('"content":"five"', '"content":"FIVE"');
      const edited = join(dir, "edited.jsonl");
      writeFileSync(edited, lines.join("\n"));
      const refused = await command(["import", "--store", redis.url, "--input", edited]);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain(
        `line ${at + 1}: thread "trimmed" of namespace "" already exists with other content`,
      );
      expect(await everyGet(onRedis)).toEqual(before);
    } finally {
      await onRedis.close();
    }
  }, 60_000); // Three stores and two imports: slow on a loaded machine, not stuck.

  it("answers bad usage with status 2 and a missing file with status 1", async () => {
    const unknown = await command(["export", "--store", "memory", "--colour", "red"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown flag --colour");
    const missing = await command(["import", "--input", join(dir, "nope.jsonl")]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("nope.jsonl");
    const help = await command(["import", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("windlass-memory import [--input FILE]");
  });

  it("reads one page of ids and one thread at a time, writing each line before reading on", async () => {
    const store = createMemoryStore();
    const total = EXPORT_PAGE * 2 + 7;
    for (let i = 0; i < total; i++) {
      await store.append({
        namespace: "ns",
        threadId: `t${String(i).padStart(4, "0")}`,
        messages: [{ role: "user", content: `m${i}` }],
        strategy: undefined,
        defaultStrategy: { kind: "window", window: 20, excludeSystem: false, maxStored: 1000 },
        replaceStrategy: false,
        requestId: "",
        requestHash: "",
        expectedLastSeq: undefined,
        now: 1000 + i,
      });
    }
    const trace: string[] = [];
    const observed: Store = {
      ...store,
      listThreads: async (ns, after, limit, labels, forksOf) => {
        trace.push(forksOf === undefined ? `list ${limit}` : `forks of ${forksOf}`);
        return store.listThreads(ns, after, limit, labels, forksOf);
      },
      read: async (ns, id, view) => {
        trace.push("read");
        return store.read(ns, id, view);
      },
    };
    const ids: string[] = [];
    const n = await exportNamespace(observed, "ns", async (line) => {
      trace.push("write");
      ids.push(decodeThreadLine(line, "out").threadId);
    });
    expect(n).toBe(total);
    expect(ids).toEqual([...ids].sort());
    expect(new Set(ids).size).toBe(total);
    expect(trace.filter((t) => t.startsWith("list"))).toEqual(Array(3).fill(`list ${EXPORT_PAGE}`));
    // Each thread's forks are asked for once, after its line (none here).
    expect(trace.filter((t) => t.startsWith("forks of"))).toEqual(
      ids.map((id) => `forks of ${id}`),
    );
    // Strictly alternating: no thread is read before the previous one is written.
    const reads = trace.filter((t) => t === "read" || t === "write").join(",");
    expect(trace.slice(0, 4)).toEqual([`list ${EXPORT_PAGE}`, "read", "write", "forks of t0000"]);
    expect(reads).toBe(Array(total).fill("read,write").join(","));
    await store.close();
  });

  it("refuses a malformed line naming the line and the field, keeping the lines before it", async () => {
    const good = (id: string) =>
      JSON.stringify({
        format: "windlass-memory.thread.v1",
        namespace: "ns",
        thread_id: id,
        strategy: { kind: "window", window: 5, exclude_system: false, max_stored: 100 },
        last_seq: 3,
        summarized_through_seq: 0,
        summary: "",
        summary_time: 0,
        create_time: 10,
        update_time: 20,
        messages: [
          { seq: 2, create_time: 11, role: "user", content: "x" },
          { seq: 3, create_time: 12, role: "user", content: "y" },
        ],
      });
    const bad: [string, string][] = [
      [good("a").replace('"seq":3', '"seq":4'), "line 2: messages[1].seq: is 4"],
      [good("a").replace('"window":5', '"window":0'), "line 2: strategy.window: must be positive"],
      [
        good("a").replace('"window":5', '"window":5,"max_tokens":0'),
        "line 2: strategy.max_tokens: must be from 1",
      ],
      [
        good("a").replace('"window":5', '"window":5,"token_encoding":"p50k"'),
        "line 2: strategy.token_encoding: must be one of",
      ],
      [
        good("a").replace('"window":5', '"window":5,"summary_placement":"user"'),
        "line 2: strategy.summary_placement: is not a known field",
      ],
      [good("a").replace('"role":"user"', '"role":"robot"'), "line 2: messages[0].role"],
      [good("a").replace('"summary":""', '"summary":"s"'), "line 2: summary: must be empty"],
      [
        good("a").replace('"format"', '"colour":1,"format"'),
        "line 2: colour: is not a known field",
      ],
      [good("a").replace('"thread_id":"a"', '"thread_id":"a\\u0001"'), "line 2: thread_id:"],
      ["{not json", "line 2: not JSON"],
    ];
    for (const [line, message] of bad) {
      const store = createMemoryStore();
      const lines = (async function* () {
        yield good("first");
        yield line;
      })();
      const err = await importLines(store, lines).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ThreadLineError);
      expect((err as Error).message).toContain(message);
      expect(await store.listThreads("ns", "", 10)).toEqual(["first"]);
      await store.close();
    }
  });
});
