import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  Code,
  createMemoryClient,
  type MemoryClient,
  MemoryError,
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

async function collect<T>(pages: AsyncIterable<T[]>): Promise<T[]> {
  const out: T[] = [];
  for await (const page of pages) out.push(...page);
  return out;
}

describe.each(["grpc", "connect"] as const)("fork over %s", (transport) => {
  let memory: MemoryClient;
  const thread = (name: string): string => `${transport}-fk-${name}`;
  const contents = async (id: string) => (await memory.get(id)).messages.map((m) => m.content);

  beforeAll(() => {
    memory = createMemoryClient({ baseUrl: server.url(transport), transport });
  });
  afterAll(() => memory.close());

  it("holds the parent's messages up to atSeq, then both change independently", async () => {
    const id = thread("at");
    await memory.add(id, texts("1", "2", "3", "4"));
    const forked = await memory.fork(id, `${id}-f`, { atSeq: 2 });
    expect(forked.sharedCount).toBe(2);
    expect(forked.summaryInherited).toBe(false);
    expect(forked.thread?.lastSeq).toBe(2n);
    expect(forked.thread?.parent).toMatchObject({ threadId: id, atSeq: 2n });
    await memory.add(`${id}-f`, texts("fork 3"));
    await memory.rewind(id, 1);
    await memory.clear(id);
    expect(await contents(`${id}-f`)).toEqual(["1", "2", "fork 3"]);
  });

  it("refuses with the RPC's codes and creates nothing", async () => {
    const id = thread("errors");
    expect((await failure(memory.fork(id, `${id}-f`))).code).toBe(Code.NotFound);
    await memory.add(id, texts("1"));
    await memory.add(`${id}-taken`, texts("x"));
    const taken = await failure(memory.fork(id, `${id}-taken`));
    expect(taken.codeName).toBe("ALREADY_EXISTS");
    expect(taken.details).toMatch(/^new_thread_id:/);
    expect((await failure(memory.fork(id, `${id}-f`, { atSeq: 5 }))).code).toBe(Code.OutOfRange);
    const stale = await failure(memory.fork(id, `${id}-f`, { expectedLastSeq: 7 }));
    expect(stale.code).toBe(Code.Aborted);
    expect((await failure(memory.fork(id, id))).code).toBe(Code.InvalidArgument);
    expect(() => memory.fork(id, `${id}-f`, { atSeq: -1 })).toThrow(RangeError);
    expect(() => memory.fork(id, `${id}-f`, { ttl: -1 })).toThrow(RangeError);
    expect(await collect(memory.threads({ forksOf: id }))).toEqual([]);
  });

  it("answers a retried requestId with the first fork's current state", async () => {
    const id = thread("retry");
    await memory.add(id, texts("1", "2"));
    await memory.fork(id, `${id}-f`, { requestId: "once" });
    await memory.add(`${id}-f`, texts("3"));
    const again = await memory.fork(id, `${id}-f`, { requestId: "once" });
    expect(again.sharedCount).toBe(2);
    expect(again.thread?.lastSeq).toBe(3n);
    expect((await failure(memory.fork(id, `${id}-f`))).code).toBe(Code.AlreadyExists);
  });

  it("takes the given strategy, labels and ttl", async () => {
    const id = thread("own");
    await memory.add(id, texts("1", "2", "3"));
    const forked = await memory.fork(id, `${id}-f`, {
      strategy: windowStrategy(2),
      labels: { team: "a" },
      ttl: 3600,
    });
    expect(forked.thread?.strategy?.kind.case).toBe("window");
    expect(forked.thread?.labels).toEqual({ team: "a" });
    expect(forked.thread?.ttl?.seconds).toBe(3600n);
    expect(await contents(`${id}-f`)).toEqual(["2", "3"]);
  });

  it("lists the direct forks, with their origin, by forksOf and labels", async () => {
    const id = thread("list");
    await memory.add(id, texts("1", "2"));
    await memory.fork(id, `${id}-b`, { atSeq: 1, labels: { k: "b" } });
    await memory.fork(id, `${id}-a`);
    await memory.fork(`${id}-a`, `${id}-a2`);
    expect(await collect(memory.threads({ forksOf: id, pageSize: 1 }))).toEqual([
      `${id}-a`,
      `${id}-b`,
    ]);
    const listed = await collect(memory.listThreads({ forksOf: id }));
    expect(listed.map((t) => [t.threadId, t.parent?.atSeq])).toEqual([
      [`${id}-a`, 2n],
      [`${id}-b`, 1n],
    ]);
    const labelled = await collect(memory.threads({ forksOf: id, labels: { k: "b" } }));
    expect(labelled).toEqual([`${id}-b`]);
  });

  it("is a threadForked event on the new thread, then its own messagesAdded", async () => {
    const id = thread("watch");
    await memory.add(id, texts("1", "2"));
    const controller = new AbortController();
    const events: WatchResponse[] = [];
    const stream = memory.watch({ threadIds: [`${id}-f`] }, { signal: controller.signal });
    const done = (async () => {
      for await (const event of stream) events.push(event);
    })();
    done.catch(() => {});
    await waitFor("the watch's first Progress", () => events.length > 0);
    await memory.fork(id, `${id}-f`, { atSeq: 1 });
    await memory.add(`${id}-f`, texts("2b"));
    const real = () => events.filter((e) => e.event.case !== "progress");
    await waitFor("two events", () => real().length >= 2);
    controller.abort();
    await done;
    const [forked, added] = real();
    expect(forked?.event.case).toBe("threadForked");
    expect(forked?.event.value).toMatchObject({ parentThreadId: id, atSeq: 1n, sharedCount: 1 });
    expect(added?.event.case).toBe("messagesAdded");
    expect(added?.event.value).toMatchObject({ firstSeq: 2n, lastSeq: 2n });
  });
});
