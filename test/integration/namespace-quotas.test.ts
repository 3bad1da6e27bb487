import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config.js";
import { startAppHarness } from "./app-harness.js";
import { CallFailed, grpcDriver } from "./drivers.js";

const users = (...texts: string[]) => texts.map((content) => ({ role: 1, content }));

describe("namespace quotas: configuration and wiring", () => {
  it("defaults to 10,000 threads, 1,000,000 messages and 1 GiB with auth, to none without, with flags and WINDLASS_ twins", () => {
    expect(loadConfig([], { WINDLASS_AUTH_TOKENS: "t=team" })).toMatchObject({
      maxThreadsPerNamespace: 10_000,
      maxMessagesPerNamespace: 1_000_000,
      maxBytesPerNamespace: 1024 * 1024 * 1024,
    });
    // Without auth every caller shares one namespace: its quotas would be the whole server's.
    expect(loadConfig([], {})).toMatchObject({
      maxThreadsPerNamespace: 0,
      maxMessagesPerNamespace: 0,
      maxBytesPerNamespace: 0,
    });
    const env = {
      WINDLASS_MAX_THREADS_PER_NAMESPACE: "7",
      WINDLASS_MAX_MESSAGES_PER_NAMESPACE: "8",
      WINDLASS_MAX_BYTES_PER_NAMESPACE: "0",
    };
    expect(loadConfig(["--max-messages-per-namespace=9"], env)).toMatchObject({
      maxThreadsPerNamespace: 7,
      maxMessagesPerNamespace: 9,
      maxBytesPerNamespace: 0,
    });
    expect(() => loadConfig(["--max-bytes-per-namespace", "-1"], {})).toThrow(ConfigError);
    expect(() => loadConfig([], { WINDLASS_MAX_THREADS_PER_NAMESPACE: "ten" })).toThrow(
      /--max-threads-per-namespace \/ WINDLASS_MAX_THREADS_PER_NAMESPACE/,
    );
  });

  it("refuses an Add past --max-threads-per-namespace with RESOURCE_EXHAUSTED naming the quota", async () => {
    const h = await startAppHarness(["--max-threads-per-namespace", "2", "--store", "memory"]);
    const c = grpcDriver(h.app.grpcPort);
    try {
      await c.add({ threadId: "a", messages: users("x") });
      await c.add({ threadId: "b", messages: users("y") });
      const err = await c.add({ threadId: "c", messages: users("z") }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(CallFailed);
      expect((err as CallFailed).code).toBe("RESOURCE_EXHAUSTED");
      expect((err as CallFailed).message).toContain("max_threads_per_namespace (2)");
      expect((await c.listThreads({})).threadIds).toEqual(["a", "b"]);
      await c.clear({ threadId: "a" });
      await c.add({ threadId: "c", messages: users("z") });
    } finally {
      c.close();
      await h.close();
    }
  });
});
