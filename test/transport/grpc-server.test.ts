import { once } from "node:events";
import { setTimeout as sleep } from "node:timers/promises";
import { create, createFileRegistry } from "@bufbuild/protobuf";
import { type ClientReadableStream, type ServiceError, status } from "@grpc/grpc-js";
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
  type WatchResponse,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { type ErrorCode, invalidArgument, MemoryError } from "../../src/core/errors.js";
import type { MemoryServiceCore } from "../../src/service/context.js";
import { errorCodeTable } from "../../src/transport/error-table.js";
import type { StartServersOptions } from "../../src/transport/servers.js";
import { createGrpcClient, grpcHealthCheck, reflect } from "./clients.js";
import { startTestServers } from "./harness.js";
import { aborted, progressEvent, scriptedCore } from "./scripted-core.js";

async function serve(
  script: Partial<MemoryServiceCore> = {},
  overrides: Partial<Omit<StartServersOptions, "core" | "logger">> = {},
) {
  const core = scriptedCore(script);
  const servers = await startTestServers(core, overrides);
  const client = createGrpcClient(servers.grpcAddress);
  onTestFinished(async () => {
    client.close();
    await servers.shutdown(2_000);
  });
  return { core, servers, client };
}

/** How a server stream ended: its events and, if it failed, the error. */
function outcome(
  stream: ClientReadableStream<WatchResponse>,
): Promise<{ events: WatchResponse[]; error?: ServiceError }> {
  const events: WatchResponse[] = [];
  return new Promise((resolve) => {
    stream.on("data", (event: WatchResponse) => events.push(event));
    stream.on("error", (error: ServiceError) => resolve({ events, error }));
    stream.on("end", () => resolve({ events }));
  });
}

const domainCodes = (Object.keys(errorCodeTable) as ErrorCode[]).filter((c) => c !== "internal");

describe("gRPC server (grpc-js)", () => {
  it("hands each RPC's decoded request and the namespace to the core", async () => {
    const { core, client } = await serve();

    const addInit = {
      threadId: "t1",
      messages: [
        {
          role: Role.ASSISTANT,
          content: "calling",
          toolCalls: [{ id: "c1", name: "lookup", arguments: '{"q":1}' }],
          metadata: { lang: "en" },
        },
        { role: Role.TOOL, toolCallId: "c1", content: "42" },
      ],
      strategy: { kind: { case: "window" as const, value: { window: 4 } }, maxStored: 50 },
      requestId: "r-1",
      expectedLastSeq: 0n,
    };
    const added = await client.add(addInit);
    expect(added.lastSeq).toBe(2n);
    expect(added.thread?.threadId).toBe("t1");

    const getInit = { threadId: "t1", limit: 0, allowStale: true };
    const deadline = Date.now() + 5_000;
    expect((await client.get(getInit, { deadline })).summary).toBe("summary of t1");
    expect((await client.clear({ all: true })).clearedThreads).toBe(2);
    expect((await client.listThreads({ pageSize: 10, pageToken: "p" })).threadIds).toEqual([
      "a",
      "b",
    ]);
    const forkInit = { threadId: "t1", newThreadId: "t2", atSeq: 0n, labels: { k: "v" } };
    expect((await client.fork(forkInit)).thread?.threadId).toBe("t2");
    const watchInit = {
      threadIds: ["t1"],
      eventTypes: [EventType.SUMMARY_UPDATED],
      resumeToken: "r",
      sendInitialState: true,
    };
    const watch = client.watch(watchInit);
    watch.on("error", () => {});
    const [first] = (await once(watch, "data")) as [WatchResponse];
    expect(first).toEqual(progressEvent("1"));
    watch.cancel();

    const requests = core.calls.map((c) => [c.method, c.request]);
    expect(requests).toEqual([
      ["add", create(AddRequestSchema, addInit)],
      ["get", create(GetRequestSchema, getInit)],
      ["clear", create(ClearRequestSchema, { all: true })],
      ["listThreads", create(ListThreadsRequestSchema, { pageSize: 10, pageToken: "p" })],
      ["fork", create(ForkRequestSchema, forkInit)],
      ["watch", create(WatchRequestSchema, watchInit)],
    ]);
    // Presence of an optional field set to zero survives the wire.
    expect(core.calls[0]?.request).toMatchObject({ expectedLastSeq: 0n });
    expect(core.calls.every((c) => c.ctx.namespace === "")).toBe(true);
    expect(core.calls[0]?.ctx.deadline).toBeUndefined();
    expect(Math.abs((core.calls[1]?.ctx.deadline ?? 0) - deadline)).toBeLessThan(1_000);
  });

  it.each(domainCodes)("maps MemoryError %s to its gRPC code and message", async (code) => {
    const thrown =
      code === "invalid_argument"
        ? invalidArgument("strategy.window.window", "must be at least 1")
        : new MemoryError(code, `problem: ${code}`);
    const { client } = await serve({
      get: async () => {
        throw thrown;
      },
    });
    await expect(client.get({ threadId: "t" })).rejects.toMatchObject({
      code: errorCodeTable[code].grpc,
      details: thrown.message,
    });
    if (code === "invalid_argument") expect(thrown.message).toMatch(/^strategy\.window\.window: /);
  });

  it("answers INTERNAL without the error's message or stack, and logs the cause", async () => {
    const secret = new TypeError("cannot read 'x' of undefined at /srv/secret-path.ts:12");
    const { client, servers } = await serve({
      add: async () => {
        throw secret;
      },
    });
    const err = await client.add({ threadId: "t" }).then(
      () => expect.unreachable("Add succeeded"),
      (e: ServiceError) => e,
    );
    expect(err.code).toBe(status.INTERNAL);
    expect(err.details).toBe("internal error");
    expect(JSON.stringify(err.metadata.toJSON())).not.toContain("secret");
    const logged = servers.logs.filter((l) => l.level === "error");
    expect(logged).toHaveLength(1);
    expect(logged[0]?.fields).toMatchObject({ method: "windlass.memory.v1.MemoryService/Add" });
    expect(logged[0]?.fields.err).toBe(secret);
  });

  it("ends a Watch with the mapped code when the core fails mid-stream", async () => {
    const { client } = await serve({
      async *watch() {
        yield progressEvent("1");
        throw new MemoryError("out_of_range", "resume_token: older than the retained history");
      },
    });
    const { events, error } = await outcome(client.watch({ resumeToken: "old" }));
    expect(events.map((e) => e.resumeToken)).toEqual(["1"]);
    expect(error?.code).toBe(status.OUT_OF_RANGE);
    expect(error?.details).toBe("resume_token: older than the retained history");
  });

  it("aborts the core's signal at the client's deadline and answers DEADLINE_EXCEEDED", async () => {
    const { core, client } = await serve({
      get: async (_req, ctx) => {
        await aborted(ctx.signal);
        throw ctx.signal.reason;
      },
    });
    const started = Date.now();
    await expect(client.get({}, { deadline: started + 1_000 })).rejects.toMatchObject({
      code: status.DEADLINE_EXCEEDED,
    });
    const { ctx } = await core.callOf("get");
    await aborted(ctx.signal);
    expect(ctx.signal.reason).toMatchObject({ code: "deadline_exceeded" });
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("aborts the core's signal and releases its iterator when the client cancels a Watch", async () => {
    let released = false;
    const { core, client } = await serve({
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
    const watch = client.watch({});
    watch.on("error", () => {});
    await once(watch, "data");
    watch.cancel();
    const { ctx } = await core.callOf("watch");
    await aborted(ctx.signal);
    expect(ctx.signal.reason).toMatchObject({ code: "cancelled" });
    await vi.waitFor(() => expect(released).toBe(true), { timeout: 10_000 });
  });

  it("refuses a request above the message size limit with RESOURCE_EXHAUSTED", async () => {
    const { core, client } = await serve(
      { get: async (req) => create(GetResponseSchema, { summary: "y".repeat(req.limit ?? 0) }) },
      { maxMessageBytes: 1024 },
    );
    await expect(
      client.add({ threadId: "t", messages: [{ role: Role.USER, content: "x".repeat(2_000) }] }),
    ).rejects.toMatchObject({ code: status.RESOURCE_EXHAUSTED });
    expect(core.calls).toEqual([]);
    // Responses are held to the same limit.
    await expect(client.get({ limit: 2_000 })).rejects.toMatchObject({
      code: status.RESOURCE_EXHAUSTED,
    });
    expect((await client.get({ limit: 100 })).summary).toHaveLength(100);
  });

  describe("with auth", () => {
    const auth = new Map([
      ["alpha-token", "alpha"],
      ["beta-token", "beta"],
    ]);

    it("maps each token to its namespace and refuses calls without a known token", async () => {
      const { core, client } = await serve({}, { auth });
      await expect(client.listThreads({})).rejects.toMatchObject({
        code: status.UNAUTHENTICATED,
      });
      await expect(client.listThreads({}, { token: "gamma-token" })).rejects.toMatchObject({
        code: status.UNAUTHENTICATED,
      });
      const { error } = await outcome(client.watch({}));
      expect(error?.code).toBe(status.UNAUTHENTICATED);
      expect(core.calls).toEqual([]);

      await client.listThreads({}, { token: "alpha-token" });
      await client.get({ threadId: "x" }, { token: "beta-token" });
      expect(core.calls.map((c) => [c.method, c.ctx.namespace])).toEqual([
        ["listThreads", "alpha"],
        ["get", "beta"],
      ]);
    });

    it("leaves health and reflection open", async () => {
      const { servers } = await serve({}, { auth });
      expect(await grpcHealthCheck(servers.grpcAddress, "")).toBe("SERVING");
      const [listed] = await reflect(servers.grpcAddress, "v1", [{ list_services: "*" }]);
      expect(listed).toMatchObject({ kind: "services" });
    });
  });

  it("reports SERVING for the server and MemoryService, NOT_FOUND for others", async () => {
    const { servers } = await serve();
    expect(await grpcHealthCheck(servers.grpcAddress, "")).toBe("SERVING");
    expect(await grpcHealthCheck(servers.grpcAddress, "windlass.memory.v1.MemoryService")).toBe(
      "SERVING",
    );
    await expect(grpcHealthCheck(servers.grpcAddress, "other.Service")).rejects.toMatchObject({
      code: status.NOT_FOUND,
    });
  });

  it.each(["v1", "v1alpha"] as const)(
    "describes the service through reflection %s",
    async (version) => {
      const { servers } = await serve();
      const answers = await reflect(servers.grpcAddress, version, [
        { list_services: "*" },
        { file_containing_symbol: "windlass.memory.v1.MemoryService" },
        { file_containing_symbol: "windlass.memory.v1.AddRequest" },
        { file_containing_symbol: "windlass.memory.v1.NoSuchThing" },
      ]);
      expect(answers).toHaveLength(4);
      const [listed, byService, byMessage, missing] = answers;
      if (listed?.kind !== "services") throw new Error(`expected services, got ${listed?.kind}`);
      expect(listed.services).toEqual(
        expect.arrayContaining(["windlass.memory.v1.MemoryService", "grpc.health.v1.Health"]),
      );
      for (const answer of [byService, byMessage]) {
        if (answer?.kind !== "files") throw new Error(`expected files, got ${answer?.kind}`);
        const memory = answer.files.find((f) => f.package === "windlass.memory.v1");
        expect(memory?.service.map((s) => s.name)).toEqual(["MemoryService"]);
        expect(memory?.service[0]?.method.map((m) => m.name)).toEqual([
          "Add",
          "Get",
          "Clear",
          "ListThreads",
          "Rewind",
          "Fork",
          "Watch",
        ]);
        expect(memory?.messageType.map((m) => m.name)).toContain("AddRequest");
        // Its imports come along, so a client can resolve every type.
        const wellKnown = answer.files.filter((f) => f.package === "google.protobuf");
        expect(wellKnown.flatMap((f) => f.messageType.map((m) => m.name)).sort()).toEqual([
          "Duration",
          "Timestamp",
        ]);
        expect(memory?.dependency).toEqual(wellKnown.map((f) => f.name).sort());
        // A client can link what it got: every import is resolved by name.
        const [asked] = answer.files;
        if (asked === undefined) throw new Error("no files");
        const registry = createFileRegistry(asked, (name) =>
          answer.files.find((f) => f.name === name),
        );
        const add = registry.getService("windlass.memory.v1.MemoryService")?.methods[0];
        expect(add?.input.typeName).toBe("windlass.memory.v1.AddRequest");
        expect(
          registry.getMessage("windlass.memory.v1.ChatMessage")?.field.createTime?.message
            ?.typeName,
        ).toBe("google.protobuf.Timestamp");
      }
      expect(missing).toMatchObject({ kind: "error", code: status.NOT_FOUND });

      const [health] = await reflect(servers.grpcAddress, version, [
        { file_containing_symbol: "grpc.health.v1.Health" },
      ]);
      if (health?.kind !== "files") throw new Error(`expected files, got ${health?.kind}`);
      const [healthFile] = health.files;
      if (healthFile === undefined) throw new Error("no health file");
      expect(healthFile.name).toBe("grpc/health/v1/health.proto");
      const healthRegistry = createFileRegistry(healthFile, () => undefined);
      const list = healthRegistry.getMessage("grpc.health.v1.HealthListResponse");
      expect(list?.fields[0]?.fieldKind).toBe("map");
      // The map entry has the name protoc gives it (grpcurl insists).
      const listProto = healthFile.messageType.find((m) => m.name === "HealthListResponse");
      expect(listProto?.nestedType.map((m) => m.name)).toEqual(["StatusesEntry"]);
    },
  );
});
