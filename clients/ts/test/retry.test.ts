import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createMemoryClient, type MemoryClient, user } from "../src/index.js";
import { type ServerProcess, startServer, waitFor } from "./support/server.js";
import { TcpProxy } from "./support/tcp-proxy.js";

let server: ServerProcess;
let direct: MemoryClient;

beforeAll(async () => {
  server = await startServer();
  direct = createMemoryClient({ baseUrl: server.url("grpc") });
});

afterAll(async () => {
  direct?.close();
  await server?.stop();
});

describe.each(["grpc", "connect"] as const)("add over %s", (transport) => {
  let proxy: TcpProxy;
  let memory: MemoryClient;

  beforeAll(async () => {
    proxy = await TcpProxy.start(transport === "grpc" ? server.grpcPort : server.httpPort);
    memory = createMemoryClient({
      baseUrl: proxy.url(),
      transport,
      retry: { maxAttempts: 5, initialMs: 50, maxMs: 200 },
    });
  });
  afterEach(() => {
    proxy.holdAnswers = false;
  });
  afterAll(async () => {
    memory.close();
    await proxy.close();
  });

  it("is retried after the connection dropped with the answer, and stored once", async () => {
    const thread = `${transport}-dropped`;
    // An open connection first, so the Add below travels on it.
    await memory.get(thread);
    const before = proxy.connections;

    proxy.holdAnswers = true;
    const adding = memory.add(thread, [user("stored exactly once")]);
    // The server has stored it (and answered into the void)...
    await waitFor("the server to store the add", async () => {
      return (await direct.get(thread)).messages.length === 1;
    });
    // ...and now the connection breaks before the client read the answer.
    proxy.holdAnswers = false;
    proxy.dropAll();

    const response = await adding;
    expect([response.firstSeq, response.lastSeq]).toEqual([1n, 1n]);
    expect(proxy.connections).toBeGreaterThan(before);
    const { messages, thread: stored } = await direct.get(thread);
    expect(messages.map((m) => m.content)).toEqual(["stored exactly once"]);
    expect(stored?.lastSeq).toBe(1n);
  });

  it("gives up after maxAttempts with UNAVAILABLE", async () => {
    const target = proxy.target;
    proxy.target = undefined;
    const before = proxy.connections;
    // A client of its own: no open connection to reuse, one per attempt.
    const fresh = createMemoryClient({
      baseUrl: proxy.url(),
      transport,
      retry: { maxAttempts: 5, initialMs: 50, maxMs: 200 },
    });
    try {
      const error = await fresh.add(`${transport}-down`, [user("x")]).catch((e: unknown) => e);
      expect(error).toMatchObject({ codeName: "UNAVAILABLE" });
      expect(proxy.connections - before).toBe(5);
    } finally {
      fresh.close();
      proxy.target = target;
    }
    expect((await direct.get(`${transport}-down`)).messages).toHaveLength(0);
  });
});
