import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createMemoryClient,
  EventType,
  type MemoryClient,
  ResyncRequiredError,
  user,
  type WatchResponse,
} from "../src/index.js";
import { type ServerProcess, startServer, waitFor } from "./support/server.js";
import { TcpProxy } from "./support/tcp-proxy.js";

type Transport = "grpc" | "connect";
const portOf = (server: ServerProcess, transport: Transport): number =>
  transport === "grpc" ? server.grpcPort : server.httpPort;

/** Reads `client.watch(...)` in the background into `events` until aborted or failed. */
function collect(client: MemoryClient, threadId: string, resumeToken?: string) {
  const controller = new AbortController();
  const events: WatchResponse[] = [];
  const stream = client.watch(
    { threadIds: [threadId], eventTypes: [EventType.MESSAGES_ADDED] },
    { signal: controller.signal, resumeToken },
  );
  const done = (async () => {
    for await (const event of stream) events.push(event);
  })();
  // Keep an early failure from being unhandled before a test awaits `done`.
  done.catch(() => {});
  const added = (): [bigint, bigint][] =>
    events.flatMap((e): [bigint, bigint][] =>
      e.event.case === "messagesAdded" ? [[e.event.value.firstSeq, e.event.value.lastSeq]] : [],
    );
  return { controller, events, stream, done, added };
}

describe.each(["grpc", "connect"] as const)("watch over %s", (transport) => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), `windlass-ts-watch-${transport}-`));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("resumes after the last event across a server restart on a SQLite store", async () => {
    const file = join(dir, "memory.db");
    const flags = ["--store", `sqlite:${file}`];
    let server = await startServer(flags);
    const proxy = await TcpProxy.start(portOf(server, transport));
    const memory = createMemoryClient({ baseUrl: proxy.url(), transport });
    const watcher = collect(memory, "restart");
    try {
      // Add until the watcher sees an add: then its stream is surely open.
      let direct = createMemoryClient({ baseUrl: server.url("grpc") });
      await waitFor("the watcher to see an add", async () => {
        await direct.add("restart", [user("before the restart")]);
        return watcher.added().length > 0;
      });
      direct.close();

      // The server goes away; the watcher's reconnects find nothing behind the proxy.
      proxy.target = undefined;
      await server.stop();
      server = await startServer(flags);
      // Written while the watcher is disconnected: only a resume delivers it.
      direct = createMemoryClient({ baseUrl: server.url("grpc") });
      const during = await direct.add("restart", [user("while it was down")]);
      direct.close();
      proxy.target = portOf(server, transport);

      await waitFor("the watcher to resume", () =>
        watcher.added().some(([, last]) => last === during.lastSeq),
      );
      // Every add from the first one seen on, each once, in order, none missed.
      const seqs = watcher.added().map(([first, last]) => {
        expect(last).toBe(first);
        return first;
      });
      const from = seqs[0] as bigint;
      expect(seqs).toEqual(seqs.map((_, i) => from + BigInt(i)));
      expect(seqs.at(-1)).toBe(during.lastSeq);
    } finally {
      watcher.controller.abort();
      await watcher.done;
      memory.close();
      await proxy.close();
      await server.stop();
    }
  });

  it("backs off while the server is down instead of spinning, then resumes", async () => {
    const server = await startServer();
    // Nothing behind the proxy: every connection is accepted and closed at once.
    const proxy = await TcpProxy.start(undefined);
    const memory = createMemoryClient({ baseUrl: proxy.url(), transport });
    const watcher = collect(memory, "down");
    try {
      const started = Date.now();
      await waitFor("five connection attempts", () => proxy.connections >= 5);
      const elapsed = Date.now() - started;
      // The default backoff waits at least 100, 200, 400 and 800 ms (half of
      // 200 ms doubling, the other half random) between the five attempts; a
      // loop without backoff makes thousands in that time.
      expect(elapsed).toBeGreaterThanOrEqual(1500);
      expect(proxy.connections).toBeLessThanOrEqual(6);

      // The server is back: the same watch delivers.
      proxy.target = portOf(server, transport);
      const direct = createMemoryClient({ baseUrl: server.url("grpc") });
      await waitFor(
        "the watcher to connect and see an add",
        async () => {
          await direct.add("down", [user("back")]);
          return watcher.added().length > 0;
        },
        60_000,
      );
      direct.close();
    } finally {
      watcher.controller.abort();
      await watcher.done;
      memory.close();
      await proxy.close();
      await server.stop();
    }
  });

  it("throws ResyncRequiredError when the events after its token are gone", async () => {
    const server = await startServer(["--event-retention", "3"]);
    const proxy = await TcpProxy.start(portOf(server, transport));
    const memory = createMemoryClient({ baseUrl: proxy.url(), transport });
    const direct = createMemoryClient({ baseUrl: server.url("grpc") });
    const watcher = collect(memory, "gone");
    try {
      await waitFor("the watcher to see an add", async () => {
        await direct.add("gone", [user("seen")]);
        return watcher.added().length > 0;
      });

      // Disconnected while more events happen than the server retains (it
      // keeps between one and two times --event-retention).
      proxy.target = undefined;
      proxy.dropAll();
      const missed = await direct.add("gone", [user("missed 0")]);
      for (let i = 1; i < 10; i++) await direct.add("gone", [user(`missed ${i}`)]);
      proxy.target = portOf(server, transport);

      let error: unknown;
      watcher.done.then(
        () => {
          error = new Error("the watch ended without an error");
        },
        (e: unknown) => {
          error = e;
        },
      );
      await waitFor("the watch to fail", () => error !== undefined);
      expect(error).toBeInstanceOf(ResyncRequiredError);
      // It names the token of the last event it delivered...
      expect(error).toMatchObject({
        codeName: "OUT_OF_RANGE",
        resumeToken: watcher.events.at(-1)?.resumeToken,
      });
      // ...and delivered nothing after the gap: nothing was skipped silently.
      expect(watcher.added().every(([, last]) => last < missed.firstSeq)).toBe(true);
    } finally {
      watcher.controller.abort();
      memory.close();
      direct.close();
      await proxy.close();
      await server.stop();
    }
  });
});
