import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { type AppHarness, DRIVERS, startAppHarness } from "./app-harness.js";
import { CallFailed, type Driver, grpcDriver } from "./drivers.js";

/**
 * Limits the README promises, checked on the whole server over every
 * transport: a response larger than --max-message-bytes is
 * RESOURCE_EXHAUSTED (not only a request), in words naming the flag, and
 * ListThreads pages hold 100 thread ids by default and never more than 1,000.
 */

const MAX_MESSAGE_BYTES = 4096;
const CONTENT_BYTES = 1500;

async function failure(p: Promise<unknown>): Promise<CallFailed> {
  try {
    await p;
  } catch (err) {
    if (err instanceof CallFailed) return err;
    throw err;
  }
  throw new Error("expected the call to fail");
}

describe.each(DRIVERS)("the message size limit over %s", (name, makeDriver) => {
  let h: AppHarness;
  let c: Driver;
  beforeAll(async () => {
    h = await startAppHarness(["--max-message-bytes", String(MAX_MESSAGE_BYTES)]);
    c = makeDriver(h.app);
  });
  afterAll(async () => {
    c.close();
    await h.close();
  });

  it("answers RESOURCE_EXHAUSTED to a Get whose response would exceed --max-message-bytes", async () => {
    const threadId = `big-${name}`;
    // Three Adds, each well under the limit; together over it.
    for (const letter of ["a", "b", "c"]) {
      await c.add({
        threadId,
        strategy: { kind: { case: "buffer", value: {} } },
        messages: [{ role: Role.USER, content: letter.repeat(CONTENT_BYTES) }],
      });
    }
    const tooBig = await failure(c.get({ threadId }));
    expect(tooBig.code).toBe("RESOURCE_EXHAUSTED");
    expect(tooBig.message).toMatch(
      new RegExp(
        `RESOURCE_EXHAUSTED: response message (of \\d+ bytes )?is larger than --max-message-bytes \\(${MAX_MESSAGE_BYTES}\\); ask for less`,
      ),
    );
    // The limit is on the response, not the thread: a smaller read still works.
    const newest = await c.get({ threadId, limit: 2 });
    expect(newest.messages.map((m) => m.content)).toEqual([
      "b".repeat(CONTENT_BYTES),
      "c".repeat(CONTENT_BYTES),
    ]);
    expect(newest.thread?.lastSeq).toBe(3n);
  });

  it("answers RESOURCE_EXHAUSTED to an Add over --max-message-bytes, naming the flag, and stores nothing", async () => {
    const threadId = `too-big-${name}`;
    const content = "x".repeat(MAX_MESSAGE_BYTES + 1);
    const refused = await failure(c.add({ threadId, messages: [{ role: Role.USER, content }] }));
    expect(refused.code).toBe("RESOURCE_EXHAUSTED");
    if (name === "grpc") {
      // grpc-js refuses it while reading, before any code of ours runs, in its own words.
      expect(refused.message).toMatch(
        /^RESOURCE_EXHAUSTED: Received message larger than max \(\d+ vs \d+\)$/,
      );
    } else {
      expect(refused.message).toMatch(
        new RegExp(
          `RESOURCE_EXHAUSTED: request message (of \\d+ bytes )?is larger than --max-message-bytes \\(${MAX_MESSAGE_BYTES}\\)$`,
        ),
      );
    }
    expect((await c.get({ threadId })).thread).toBeUndefined();
  });
});

describe("ListThreads page sizes", () => {
  const THREADS = 1_234;
  let h: AppHarness;
  beforeAll(async () => {
    h = await startAppHarness();
    // Filled over gRPC, many Adds in flight at once.
    const filler = grpcDriver(h.app.grpcPort);
    try {
      const ids = Array.from({ length: THREADS }, (_, i) => `t-${String(i).padStart(5, "0")}`);
      const inFlight = 64;
      for (let i = 0; i < ids.length; i += inFlight) {
        await Promise.all(
          ids
            .slice(i, i + inFlight)
            .map((threadId) =>
              filler.add({ threadId, messages: [{ role: Role.USER, content: "x" }] }),
            ),
        );
      }
    } finally {
      filler.close();
    }
  }, 120_000);
  afterAll(async () => {
    await h.close();
  });

  it.each(DRIVERS)(
    "returns 100 ids without page_size and at most 1,000 with page_size 5000 over %s",
    async (_name, makeDriver) => {
      const c = makeDriver(h.app);
      try {
        const first = await c.listThreads({});
        expect(first.threadIds).toHaveLength(100);
        expect(first.threadIds[0]).toBe("t-00000");
        expect(first.threadIds[99]).toBe("t-00099");
        expect(first.nextPageToken).not.toBe("");

        const capped = await c.listThreads({ pageSize: 5000 });
        expect(capped.threadIds).toHaveLength(1000);
        expect(capped.threadIds[999]).toBe("t-00999");
        expect(capped.nextPageToken).not.toBe("");
        // The rest comes on the next page, and nothing after it.
        const rest = await c.listThreads({ pageSize: 5000, pageToken: capped.nextPageToken });
        expect(rest.threadIds).toHaveLength(THREADS - 1000);
        expect(rest.threadIds[0]).toBe("t-01000");
        expect(rest.nextPageToken).toBe("");
      } finally {
        c.close();
      }
    },
  );
});
