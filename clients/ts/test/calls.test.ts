import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  assistant,
  bufferStrategy,
  Code,
  createMemoryClient,
  EventType,
  type MemoryClient,
  MemoryError,
  Role,
  summaryStrategy,
  system,
  toolCall,
  toolResult,
  user,
  windowStrategy,
} from "../src/index.js";
import { type ServerProcess, startServer } from "./support/server.js";

let server: ServerProcess;
let authServer: ServerProcess;

beforeAll(async () => {
  [server, authServer] = await Promise.all([
    startServer(),
    startServer([], { WINDLASS_AUTH_TOKENS: "secret-a=team-a,secret-b=team-b" }),
  ]);
});

afterAll(async () => {
  await Promise.all([server?.stop(), authServer?.stop()]);
});

describe.each(["grpc", "connect"] as const)("over %s", (transport) => {
  let memory: MemoryClient;
  const thread = (name: string): string => `${transport}-${name}`;

  beforeAll(() => {
    memory = createMemoryClient({ baseUrl: server.url(transport), transport });
  });
  afterAll(() => memory.close());

  it("stores every kind of message and returns it unchanged", async () => {
    const id = thread("kinds");
    const added = await memory.add(
      id,
      [
        system("Be brief."),
        user("What is the weather in Oslo?", { name: "ada", metadata: { lang: "en" } }),
        assistant("", {
          toolCalls: [
            toolCall("call-1", "weather", { city: "Oslo" }),
            toolCall("call-2", "time", "{}"),
          ],
        }),
        toolResult("call-1", "4 °C, rain"),
        toolResult("call-2", "14:00"),
        assistant("4 °C and rain, at 14:00."),
      ],
      { strategy: bufferStrategy() },
    );
    expect([added.firstSeq, added.lastSeq]).toEqual([1n, 6n]);

    const { messages, thread: stored } = await memory.get(id);
    expect(stored?.lastSeq).toBe(6n);
    expect(messages.map((m) => [m.role, m.content, m.seq])).toEqual([
      [Role.SYSTEM, "Be brief.", 1n],
      [Role.USER, "What is the weather in Oslo?", 2n],
      [Role.ASSISTANT, "", 3n],
      [Role.TOOL, "4 °C, rain", 4n],
      [Role.TOOL, "14:00", 5n],
      [Role.ASSISTANT, "4 °C and rain, at 14:00.", 6n],
    ]);
    expect(messages[1]?.name).toBe("ada");
    expect(messages[1]?.metadata).toEqual({ lang: "en" });
    expect(messages[2]?.toolCalls.map((c) => [c.id, c.name, c.arguments])).toEqual([
      ["call-1", "weather", '{"city":"Oslo"}'],
      ["call-2", "time", "{}"],
    ]);
    expect(messages.slice(3, 5).map((m) => m.toolCallId)).toEqual(["call-1", "call-2"]);
  });

  it("shapes the thread by its strategy and limit", async () => {
    const id = thread("window");
    await memory.add(id, [user("one"), user("two"), user("three")], {
      strategy: windowStrategy(2),
    });
    expect((await memory.get(id)).messages.map((m) => m.content)).toEqual(["two", "three"]);
    expect((await memory.get(id, { limit: 1 })).messages.map((m) => m.content)).toEqual(["three"]);
  });

  it("reads a thread with its own recall, and adds with keepStrategy without failing", async () => {
    const id = thread("own-view");
    await memory.add(id, [user("one"), user("two"), user("three")], {
      strategy: windowStrategy(2),
    });
    const added = await memory.add(id, [user("four")], {
      strategy: windowStrategy(1),
      keepStrategy: true,
    });
    expect(added.thread?.strategy?.kind.case).toBe("window");
    expect(added.thread?.strategy?.kind.value).toMatchObject({ window: 2 });
    const texts = (r: { messages: { content: string }[] }) => r.messages.map((m) => m.content);
    expect(texts(await memory.get(id, { recall: windowStrategy(1) }))).toEqual(["four"]);
    expect(texts(await memory.get(id, { recall: bufferStrategy() }))).toEqual([
      "one",
      "two",
      "three",
      "four",
    ]);
    // The thread's own strategy is unchanged for a get without recall.
    expect(texts(await memory.get(id))).toEqual(["three", "four"]);
  });

  it("reports errors as MemoryError with the code", async () => {
    const id = thread("errors");
    await memory.add(id, [user("hi")], { strategy: windowStrategy(4) });
    const mismatch = await memory
      .add(id, [user("again")], { strategy: summaryStrategy() })
      .catch((e: unknown) => e);
    expect(mismatch).toBeInstanceOf(MemoryError);
    expect((mismatch as MemoryError).code).toBe(Code.FailedPrecondition);
    expect((mismatch as MemoryError).codeName).toBe("FAILED_PRECONDITION");

    const invalid = await memory.add(id, [{ role: Role.TOOL, content: "x" }]).catch((e) => e);
    expect(invalid).toBeInstanceOf(MemoryError);
    expect((invalid as MemoryError).code).toBe(Code.InvalidArgument);
    expect((invalid as MemoryError).details).toMatch(/tool_call_id/);

    const stale = await memory.add(id, [user("late")], { expectedLastSeq: 0 }).catch((e) => e);
    expect((stale as MemoryError).code).toBe(Code.Aborted);
    expect((await memory.get(id)).messages.map((m) => m.content)).toEqual(["hi"]);
  });

  it("stores an add once when its request id is repeated", async () => {
    const id = thread("idempotent");
    const first = await memory.add(id, [user("once")], { requestId: "r-1" });
    const again = await memory.add(id, [user("once")], { requestId: "r-1" });
    expect(again.lastSeq).toBe(first.lastSeq);
    expect((await memory.get(id)).messages).toHaveLength(1);
  });

  it("pages through threads and clears them", async () => {
    const ids = [thread("page-a"), thread("page-b"), thread("page-c")];
    for (const id of ids) await memory.add(id, [user("x")]);
    const pages: string[][] = [];
    for await (const page of memory.threads({ pageSize: 2 })) pages.push(page);
    expect(pages.every((p) => p.length <= 2)).toBe(true);
    const all = pages.flat();
    expect(all).toEqual([...all].sort());
    expect(all).toEqual(expect.arrayContaining(ids));

    expect(await memory.clear(ids[0] as string)).toBe(1);
    expect(await memory.clear(ids[0] as string)).toBe(0);
    expect((await memory.get(ids[0] as string)).thread).toBeUndefined();
  });

  it("watches messages being added", async () => {
    const id = thread("watch");
    const controller = new AbortController();
    const stream = memory.watch(
      { threadIds: [id], eventTypes: [EventType.MESSAGES_ADDED] },
      { signal: controller.signal },
    );
    const seen: bigint[] = [];
    const done = (async () => {
      for await (const event of stream) {
        if (event.event.case === "messagesAdded") seen.push(event.event.value.lastSeq);
        if (seen.length === 2) controller.abort();
      }
    })();
    // The stream is open once the server has registered it; add until the
    // watcher has seen an add, then one more.
    const adder = memory.add(id, [user("one")]);
    await adder;
    let more = 1;
    while (seen.length === 0) {
      await memory.add(id, [user(`more ${more++}`)]);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await memory.add(id, [user("last")]);
    await done;
    expect(seen).toHaveLength(2);
    expect(seen[1]).toBe((seen[0] as bigint) + 1n);
    expect(stream.resumeToken).not.toBe("");
  });

  it("sends the bearer token, which selects the namespace", async () => {
    const a = createMemoryClient({
      baseUrl: authServer.url(transport),
      transport,
      token: "secret-a",
    });
    const b = createMemoryClient({
      baseUrl: authServer.url(transport),
      transport,
      token: "secret-b",
    });
    const none = createMemoryClient({ baseUrl: authServer.url(transport), transport });
    try {
      await a.add(thread("shared-name"), [user("only team a sees this")]);
      expect((await a.get(thread("shared-name"))).messages).toHaveLength(1);
      expect((await b.get(thread("shared-name"))).messages).toHaveLength(0);
      const refused = await none.get(thread("shared-name")).catch((e: unknown) => e);
      expect((refused as MemoryError).code).toBe(Code.Unauthenticated);
    } finally {
      a.close();
      b.close();
      none.close();
    }
  });
});
