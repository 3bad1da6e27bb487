import { execFile } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it, onTestFinished, vi } from "vitest";
import {
  AddRequestSchema,
  ClearRequestSchema,
  EventType,
  ForkRequestSchema,
  GetRequestSchema,
  GetResponseSchema,
  ListThreadsRequestSchema,
  Role,
  WatchRequestSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { type ErrorCode, invalidArgument, MemoryError } from "../../src/core/errors.js";
import type { MemoryServiceCore } from "../../src/service/context.js";
import { errorCodeTable } from "../../src/transport/error-table.js";
import type { StartServersOptions } from "../../src/transport/servers.js";
import { type ConnectClientOptions, createConnectClient } from "./clients.js";
import { startTestServers } from "./harness.js";
import { aborted, progressEvent, scriptedCore } from "./scripted-core.js";

type Overrides = Partial<Omit<StartServersOptions, "core" | "logger">>;

async function serve(script: Partial<MemoryServiceCore> = {}, overrides: Overrides = {}) {
  const core = scriptedCore(script);
  const servers = await startTestServers(core, overrides);
  onTestFinished(() => servers.shutdown(2_000));
  return { core, servers };
}

function connectClient(baseUrl: string, options: ConnectClientOptions) {
  const handle = createConnectClient(baseUrl, options);
  onTestFinished(() => handle.close());
  return handle.client;
}

function connectErrorOf(promise: Promise<unknown>): Promise<ConnectError> {
  return promise.then(
    () => expect.unreachable("the call succeeded"),
    (err: unknown) => ConnectError.from(err),
  );
}

const domainCodes = (Object.keys(errorCodeTable) as ErrorCode[]).filter((c) => c !== "internal");

const clientKinds: { kind: string; options: ConnectClientOptions }[] = [
  { kind: "Connect JSON, HTTP/1.1", options: { protocol: "connect", httpVersion: "1.1" } },
  {
    kind: "Connect binary, HTTP/2",
    options: { protocol: "connect", httpVersion: "2", useBinaryFormat: true },
  },
  { kind: "gRPC, HTTP/2", options: { protocol: "grpc" } },
  {
    kind: "gRPC-Web binary, HTTP/1.1",
    options: { protocol: "grpc-web", httpVersion: "1.1", useBinaryFormat: true },
  },
];

describe.each(clientKinds)("Connect server with $kind", ({ options }) => {
  it("hands each RPC's decoded request and the namespace to the core", async () => {
    const { core, servers } = await serve();
    const client = connectClient(servers.httpUrl, options);

    const addInit = {
      threadId: "t1",
      messages: [
        {
          role: Role.ASSISTANT,
          toolCalls: [{ id: "c1", name: "lookup", arguments: "{}" }],
          metadata: { lang: "en" },
        },
        { role: Role.TOOL, toolCallId: "c1", content: "42" },
      ],
      strategy: { kind: { case: "summary" as const, value: { window: 3, model: "m" } } },
      expectedLastSeq: 0n,
    };
    expect((await client.add(addInit)).lastSeq).toBe(2n);
    const getInit = { threadId: "t1", limit: 5, query: "q" };
    expect((await client.get(getInit, { timeoutMs: 5_000 })).summary).toBe("summary of t1");
    expect((await client.clear({ threadId: "t1" })).clearedThreads).toBe(1);
    expect((await client.listThreads({ pageSize: 2 })).threadIds).toEqual(["a", "b"]);
    const forkInit = { threadId: "t1", newThreadId: "t2", atSeq: 0n, labels: { k: "v" } };
    expect((await client.fork(forkInit)).thread?.threadId).toBe("t2");
    const watchInit = { threadIds: ["t1"], eventTypes: [EventType.MESSAGES_ADDED] };
    const abort = new AbortController();
    for await (const event of client.watch(watchInit, { signal: abort.signal })) {
      expect(event).toEqual(progressEvent("1"));
      break;
    }

    expect(core.calls.map((c) => [c.method, c.request])).toEqual([
      ["add", create(AddRequestSchema, addInit)],
      ["get", create(GetRequestSchema, getInit)],
      ["clear", create(ClearRequestSchema, { threadId: "t1" })],
      ["listThreads", create(ListThreadsRequestSchema, { pageSize: 2 })],
      ["fork", create(ForkRequestSchema, forkInit)],
      ["watch", create(WatchRequestSchema, watchInit)],
    ]);
    expect(core.calls[0]?.request).toMatchObject({ expectedLastSeq: 0n });
    expect(core.calls.every((c) => c.ctx.namespace === "")).toBe(true);
    expect(core.calls[0]?.ctx.deadline).toBeUndefined();
    const getDeadline = core.calls[1]?.ctx.deadline ?? 0;
    expect(Math.abs(getDeadline - (Date.now() + 5_000))).toBeLessThan(2_000);
  });

  it.each(domainCodes)("maps MemoryError %s to its Connect code and message", async (code) => {
    const thrown =
      code === "invalid_argument"
        ? invalidArgument("messages[0].role", "unknown role 9")
        : new MemoryError(code, `problem: ${code}`);
    const { servers } = await serve({
      clear: async () => {
        throw thrown;
      },
    });
    const err = await connectErrorOf(connectClient(servers.httpUrl, options).clear({}));
    expect(err.code).toBe(errorCodeTable[code].connect);
    expect(err.rawMessage).toBe(thrown.message);
  });

  it("answers INTERNAL without the error's message, and logs the cause", async () => {
    const secret = new Error("redis at 10.0.0.7:6379 refused AUTH hunter2");
    const { servers } = await serve({
      listThreads: async () => {
        throw secret;
      },
    });
    const err = await connectErrorOf(connectClient(servers.httpUrl, options).listThreads({}));
    expect(err.code).toBe(Code.Internal);
    expect(err.rawMessage).toBe("internal error");
    expect(JSON.stringify([...err.metadata])).not.toContain("hunter2");
    const logged = servers.logs.filter((l) => l.level === "error");
    expect(logged.map((l) => l.fields.err)).toEqual([secret]);
  });

  it("ends a Watch with the mapped code when the core fails mid-stream", async () => {
    const { servers } = await serve({
      async *watch() {
        yield progressEvent("1");
        throw new MemoryError("resource_exhausted", "watcher fell behind; resume from 1");
      },
    });
    const client = connectClient(servers.httpUrl, options);
    const tokens: string[] = [];
    const err = await connectErrorOf(
      (async () => {
        for await (const event of client.watch({})) tokens.push(event.resumeToken);
      })(),
    );
    expect(tokens).toEqual(["1"]);
    expect(err.code).toBe(Code.ResourceExhausted);
    expect(err.rawMessage).toBe("watcher fell behind; resume from 1");
  });

  it("aborts the core's signal at the client's deadline: DEADLINE_EXCEEDED", async () => {
    const { core, servers } = await serve({
      get: async (_req, ctx) => {
        await aborted(ctx.signal);
        throw ctx.signal.reason;
      },
    });
    const client = connectClient(servers.httpUrl, options);
    const err = await connectErrorOf(client.get({}, { timeoutMs: 1_000 }));
    expect(err.code).toBe(Code.DeadlineExceeded);
    const { ctx } = await core.callOf("get");
    await aborted(ctx.signal);
    expect(ctx.signal.reason).toMatchObject({ code: "deadline_exceeded" });
  });

  it("aborts the core's signal and releases its iterator when the client cancels a Watch", async () => {
    let released = false;
    const { core, servers } = await serve({
      async *watch() {
        try {
          for (let i = 1; ; i++) {
            yield progressEvent(String(i));
            await sleep(5);
          }
        } finally {
          released = true;
        }
      },
    });
    const client = connectClient(servers.httpUrl, options);
    const abort = new AbortController();
    const stream = client.watch({}, { signal: abort.signal })[Symbol.asyncIterator]();
    await stream.next();
    abort.abort();
    const { ctx } = await core.callOf("watch");
    await aborted(ctx.signal);
    expect(ctx.signal.reason).toMatchObject({ code: "cancelled" });
    await vi.waitFor(() => expect(released).toBe(true), { timeout: 10_000 });
  });

  it("maps bearer tokens to namespaces and refuses calls without a known token", async () => {
    const auth = new Map([["alpha-token", "alpha"]]);
    const { core, servers } = await serve({}, { auth });
    const anonymous = connectClient(servers.httpUrl, options);
    expect((await connectErrorOf(anonymous.listThreads({}))).code).toBe(Code.Unauthenticated);
    const stranger = connectClient(servers.httpUrl, { ...options, token: "beta-token" });
    expect((await connectErrorOf(stranger.get({}))).code).toBe(Code.Unauthenticated);
    expect(core.calls).toEqual([]);
    const alpha = connectClient(servers.httpUrl, { ...options, token: "alpha-token" });
    await alpha.listThreads({});
    expect(core.calls.map((c) => c.ctx.namespace)).toEqual(["alpha"]);
  });
});

describe("Connect server over plain HTTP", () => {
  const path = "/windlass.memory.v1.MemoryService";

  async function postJson(url: string, body: unknown, headers: Record<string, string> = {}) {
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as unknown };
  }

  it("serves every unary RPC as JSON to fetch over HTTP/1.1", async () => {
    const { core, servers } = await serve();
    const add = await postJson(`${servers.httpUrl}${path}/Add`, {
      threadId: "t1",
      messages: [{ role: "ROLE_USER", content: "hello" }],
      strategy: { window: { window: 4 } },
      expectedLastSeq: "0",
    });
    expect(add).toEqual({
      status: 200,
      body: { thread: { threadId: "t1", lastSeq: "1" }, firstSeq: "1", lastSeq: "1" },
    });
    expect(await postJson(`${servers.httpUrl}${path}/Get`, { threadId: "t1" })).toEqual({
      status: 200,
      body: { summary: "summary of t1" },
    });
    expect(await postJson(`${servers.httpUrl}${path}/Clear`, { all: true })).toEqual({
      status: 200,
      body: { clearedThreads: 2 },
    });
    expect(await postJson(`${servers.httpUrl}${path}/ListThreads`, {})).toEqual({
      status: 200,
      body: { threadIds: ["a", "b"] },
    });
    expect(core.calls.map((c) => [c.method, c.request])).toEqual([
      [
        "add",
        create(AddRequestSchema, {
          threadId: "t1",
          messages: [{ role: Role.USER, content: "hello" }],
          strategy: { kind: { case: "window", value: { window: 4 } } },
          expectedLastSeq: 0n,
        }),
      ],
      ["get", create(GetRequestSchema, { threadId: "t1" })],
      ["clear", create(ClearRequestSchema, { all: true })],
      ["listThreads", create(ListThreadsRequestSchema, {})],
    ]);
  });

  it("answers errors as Connect JSON errors with the mapped HTTP status", async () => {
    const { servers } = await serve({
      add: async () => {
        throw invalidArgument("thread_id", "must be at most 256 bytes");
      },
      get: async () => {
        throw new RangeError("index 7 out of bounds in /srv/app/secret.ts");
      },
    });
    expect(await postJson(`${servers.httpUrl}${path}/Add`, {})).toEqual({
      status: 400,
      body: { code: "invalid_argument", message: "thread_id: must be at most 256 bytes" },
    });
    expect(await postJson(`${servers.httpUrl}${path}/Get`, {})).toEqual({
      status: 500,
      body: { code: "internal", message: "internal error" },
    });
  });

  it("refuses calls without a token with 401 when auth is on", async () => {
    const { servers } = await serve({}, { auth: new Map([["tok", "ns"]]) });
    expect(await postJson(`${servers.httpUrl}${path}/ListThreads`, {})).toMatchObject({
      status: 401,
      body: { code: "unauthenticated" },
    });
    expect(
      await postJson(`${servers.httpUrl}${path}/ListThreads`, {}, { authorization: "Bearer tok" }),
    ).toMatchObject({ status: 200 });
  });

  it("answers curl with its default settings", async () => {
    const { servers } = await serve();
    const { stdout } = await promisify(execFile)("curl", [
      "-sS",
      "-X",
      "POST",
      "-H",
      "Content-Type: application/json",
      "--data",
      "{}",
      `${servers.httpUrl}${path}/ListThreads`,
    ]);
    expect(JSON.parse(stdout)).toEqual({ threadIds: ["a", "b"] });
  });

  it.each(["1.1", "2"] as const)(
    "reads a large request intact over HTTP/%s (bytes sniffed for routing are not lost)",
    async (httpVersion) => {
      const { core, servers } = await serve();
      const client = connectClient(servers.httpUrl, { protocol: "connect", httpVersion });
      const content = Array.from({ length: 300_000 }, (_, i) => String(i % 10)).join("");
      await client.add({ threadId: "big", messages: [{ role: Role.USER, content }] });
      const { request } = await core.callOf("add");
      expect(request).toMatchObject({ threadId: "big", messages: [{ content }] });
    },
  );

  it.each(["1.1", "2"] as const)(
    "refuses a message above the size limit over HTTP/%s with RESOURCE_EXHAUSTED",
    async (httpVersion) => {
      const { core, servers } = await serve(
        { get: async (req) => create(GetResponseSchema, { summary: "y".repeat(req.limit ?? 0) }) },
        { maxMessageBytes: 1024 },
      );
      const client = connectClient(servers.httpUrl, {
        protocol: "connect",
        httpVersion,
        useBinaryFormat: true,
      });
      const big = { threadId: "t", messages: [{ role: Role.USER, content: "x".repeat(2_000) }] };
      expect((await connectErrorOf(client.add(big))).code).toBe(Code.ResourceExhausted);
      expect(core.calls).toEqual([]);
      expect((await connectErrorOf(client.get({ limit: 2_000 }))).code).toBe(
        Code.ResourceExhausted,
      );
    },
  );
});
