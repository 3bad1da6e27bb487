import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  Code,
  createMemoryClient,
  EventType,
  type MemoryClient,
  MemoryError,
  summaryStrategy,
  user,
  type WatchResponse,
  windowStrategy,
} from "../src/index.js";
import { type ServerProcess, startServer, waitFor } from "./support/server.js";

let server: ServerProcess;

beforeAll(async () => {
  // Idle Watch streams get a Progress this often: proof that a stream is open.
  server = await startServer(["--progress-interval-ms", "100"]);
});

afterAll(async () => {
  await server?.stop();
});

const texts = (...words: string[]) => words.map((w) => user(w));

async function failure(p: Promise<unknown>): Promise<MemoryError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(MemoryError);
  return err as MemoryError;
}

describe.each(["grpc", "connect"] as const)("rewind over %s", (transport) => {
  let memory: MemoryClient;
  const thread = (name: string): string => `${transport}-rw-${name}`;

  beforeAll(() => {
    memory = createMemoryClient({ baseUrl: server.url(transport), transport });
  });
  afterAll(() => memory.close());

  it("drops the messages after toSeq and the next add reuses their seqs", async () => {
    const id = thread("drop");
    await memory.add(id, texts("1", "2", "3", "4"));
    const rewound = await memory.rewind(id, 2);
    expect(rewound.removedCount).toBe(2);
    expect(rewound.summaryDropped).toBe(false);
    expect(rewound.thread?.lastSeq).toBe(2n);
    const added = await memory.add(id, texts("3b"));
    expect(added.firstSeq).toBe(3n);
    const got = await memory.get(id);
    expect(got.messages.map((m) => m.content)).toEqual(["1", "2", "3b"]);
  });

  it("refuses a stale expectedLastSeq with ABORTED and drops nothing", async () => {
    const id = thread("expected");
    await memory.add(id, texts("1", "2"));
    const err = await failure(memory.rewind(id, 1, { expectedLastSeq: 1 }));
    expect(err.code).toBe(Code.Aborted);
    expect(err.details).toMatch(/^expected_last_seq:/);
    expect((await memory.get(id)).messages).toHaveLength(2);
    expect((await memory.rewind(id, 1, { expectedLastSeq: 2n })).removedCount).toBe(1);
  });

  it("answers a repeated requestId with the first response", async () => {
    const id = thread("replay");
    await memory.add(id, texts("1", "2", "3"));
    const first = await memory.rewind(id, 1, { requestId: "once" });
    const again = await memory.rewind(id, 1, { requestId: "once" });
    expect(again.removedCount).toBe(first.removedCount);
    expect(again.removedCount).toBe(2);
  });

  it("names the field of a bad request and changes nothing", async () => {
    const id = thread("bad");
    expect((await failure(memory.rewind(id, 0))).code).toBe(Code.NotFound);
    await memory.add(id, texts("1"));
    const past = await failure(memory.rewind(id, 3));
    expect(past.code).toBe(Code.OutOfRange);
    expect(past.details).toMatch(/^to_seq:/);
    const long = await failure(memory.rewind(id, 0, { requestId: "r".repeat(129) }));
    expect(long.code).toBe(Code.InvalidArgument);
    expect(long.details).toMatch(/^request_id:/);
    expect(() => memory.rewind(id, -1)).toThrow(/toSeq/);
    expect(() => memory.rewind(id, 0, { expectedLastSeq: 1.5 })).toThrow(/expectedLastSeq/);
    expect((await memory.get(id)).messages.map((m) => m.content)).toEqual(["1"]);
  });

  it("pops the newest message, whatever the strategy, until none is left", async () => {
    const id = thread("pop");
    await memory.add(id, texts("a", "b"), { strategy: windowStrategy(1) });
    expect((await memory.newest(id, 5)).map((m) => m.content)).toEqual(["a", "b"]);
    expect(await memory.newest(id, 0)).toEqual([]);
    expect((await memory.pop(id))?.content).toBe("b");
    expect((await memory.pop(id))?.content).toBe("a");
    expect(await memory.pop(id)).toBeUndefined();
    expect(await memory.pop(thread("none"))).toBeUndefined();
  });

  it("drops a summary that covered a dropped message", async () => {
    const id = thread("summary");
    await memory.add(id, texts("one fact", "two facts", "three facts", "four facts"), {
      strategy: summaryStrategy({ window: 2, summarizeEvery: 2 }),
    });
    expect((await memory.get(id)).summary).not.toBe("");
    const rewound = await memory.rewind(id, 1);
    expect(rewound.summaryDropped).toBe(true);
    expect(rewound.thread?.summarizedThroughSeq).toBe(0n);
  });

  it("is a threadRewound event to a watch filtering on THREAD_REWOUND", async () => {
    const id = thread("watch");
    const controller = new AbortController();
    const events: WatchResponse[] = [];
    const stream = memory.watch(
      { threadIds: [id], eventTypes: [EventType.THREAD_REWOUND] },
      { signal: controller.signal },
    );
    const done = (async () => {
      for await (const event of stream) events.push(event);
    })();
    done.catch(() => {});
    await waitFor("the watch's first Progress", () => events.length > 0);
    await memory.add(id, texts("1", "2", "3"));
    await memory.rewind(id, 1);
    const rewound = () => events.filter((e) => e.event.case === "threadRewound");
    await waitFor("the threadRewound event", () => rewound().length > 0);
    controller.abort();
    await done;
    expect(events.every((e) => e.event.case !== "messagesAdded")).toBe(true);
    expect(rewound()[0]?.event.value).toMatchObject({ toSeq: 1n, removedCount: 2 });
  });

  it("never drops a message added by a concurrent pop's rival unseen", async () => {
    const id = thread("race");
    await memory.add(id, texts("1", "2", "3", "4", "5", "6"));
    const pops = await Promise.allSettled([memory.pop(id), memory.pop(id), memory.pop(id)]);
    const taken = pops.flatMap((p) =>
      p.status === "fulfilled" && p.value ? [p.value.content] : [],
    );
    for (const p of pops) {
      if (p.status === "rejected") expect((p.reason as MemoryError).code).toBe(Code.Aborted);
    }
    const left = (await memory.get(id)).messages.map((m) => m.content);
    expect(taken.length).toBeGreaterThan(0);
    expect([...left, ...taken].sort()).toEqual(["1", "2", "3", "4", "5", "6"]);
  });
});
