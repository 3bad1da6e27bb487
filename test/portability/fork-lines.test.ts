import { describe, expect, it } from "vitest";
import type { Strategy } from "../../src/core/types.js";
import { exportNamespace } from "../../src/portability/export.js";
import { importLines } from "../../src/portability/import.js";
import {
  decodeThreadLine,
  encodeThreadLine,
  type ThreadLine,
  ThreadLineError,
} from "../../src/portability/thread-line.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/store.js";

const WINDOW: Strategy = { kind: "window", window: 20, excludeSystem: false, maxStored: 1000 };

async function addUsers(store: Store, threadId: string, contents: string[], now: number) {
  return store.append({
    namespace: "ns",
    threadId,
    messages: contents.map((content) => ({ role: "user" as const, content })),
    strategy: WINDOW,
    defaultStrategy: WINDOW,
    replaceStrategy: false,
    requestId: "",
    requestHash: "",
    expectedLastSeq: undefined,
    now,
  });
}

async function exported(store: Store): Promise<string[]> {
  const lines: string[] = [];
  await exportNamespace(store, "ns", async (line) => {
    lines.push(line.trimEnd());
  });
  return lines;
}

async function* linesOf(texts: string[]): AsyncIterable<string> {
  yield* texts;
}

const ORIGIN = { threadId: "p", atSeq: 2, forkTime: 3000, parentCreateTime: 1000 };

const forkLine: ThreadLine = {
  namespace: "ns",
  threadId: "f",
  strategy: WINDOW,
  lastSeq: 2,
  summarizedThroughSeq: 0,
  summary: "",
  summaryTime: 0,
  createTime: 3000,
  updateTime: 3000,
  parent: ORIGIN,
  messages: [
    { seq: 1, createTime: 1000, role: "user", content: "one" },
    { seq: 2, createTime: 1000, role: "user", content: "two" },
  ],
};

describe("export lines of forks", () => {
  it("write a fork's origin and all its messages, shared ones included; other lines have no parent", async () => {
    const store = createMemoryStore();
    await addUsers(store, "p", ["one", "two", "three"], 1000);
    await store.fork({
      namespace: "ns",
      threadId: "p",
      newThreadId: "f",
      atSeq: 2,
      expectedLastSeq: undefined,
      strategy: undefined,
      labels: undefined,
      ttlMs: undefined,
      requestId: "",
      requestHash: "",
      now: 3000,
    });
    await addUsers(store, "f", ["own"], 4000);
    const [fork, parent] = (await exported(store)).map((l) => JSON.parse(l));
    expect(fork.thread_id).toBe("f");
    expect(fork.parent).toEqual({
      thread_id: "p",
      at_seq: 2,
      fork_time: 3000,
      parent_create_time: 1000,
    });
    expect(fork.messages.map((m: { content: string }) => m.content)).toEqual(["one", "two", "own"]);
    expect(parent.thread_id).toBe("p");
    expect("parent" in parent).toBe(false);
    await store.close();
  });

  it("import a fork alone (no parent in the file or the store) with its origin, idempotently", async () => {
    const store = createMemoryStore();
    const text = encodeThreadLine(forkLine);
    expect(await importLines(store, linesOf([text]))).toEqual({ imported: 1, unchanged: 0 });
    const snap = await store.read("ns", "f");
    expect(snap?.thread.parent).toEqual(forkLine.parent);
    expect(snap?.messages.map((m) => m.content)).toEqual(["one", "two"]);
    expect(await store.getThread("ns", "p")).toBeUndefined();
    expect(await importLines(store, linesOf([text]))).toEqual({ imported: 0, unchanged: 1 });
    // The re-exported line is the imported one, origin included.
    expect(await exported(store)).toEqual([text]);
    await store.close();
  });

  it("refuse a thread imported over an existing one that differs only in its origin", async () => {
    const store = createMemoryStore();
    await importLines(store, linesOf([encodeThreadLine(forkLine)]));
    const other = encodeThreadLine({ ...forkLine, parent: { ...ORIGIN, atSeq: 1 } });
    await expect(importLines(store, linesOf([other]))).rejects.toThrow(/already exists/);
    await store.close();
  });
});

describe("the parent field of a thread line", () => {
  it("round-trips, and lines without it (older files) read as before", () => {
    expect(decodeThreadLine(encodeThreadLine(forkLine), "line 1")).toEqual(forkLine);
    const { parent: _, ...plain } = forkLine;
    const text = encodeThreadLine(plain);
    expect(text).not.toContain('"parent"');
    expect(decodeThreadLine(text, "line 1")).toEqual(plain);
  });

  it.each([
    [{ thread_id: "p", at_seq: 2, fork_time: 1, parent_create_time: 1, x: 1 }, "parent.x"],
    [{ thread_id: "", at_seq: 2, fork_time: 1, parent_create_time: 1 }, "parent.thread_id"],
    [{ thread_id: "p", at_seq: -1, fork_time: 1, parent_create_time: 1 }, "parent.at_seq"],
    [{ thread_id: "p", at_seq: 2, parent_create_time: 1 }, "parent.fork_time"],
    [{ thread_id: "p", at_seq: 2, fork_time: 1 }, "parent.parent_create_time"],
    ["p", "parent"],
  ])("refuses a malformed parent %j naming %s", (parent, field) => {
    const json = JSON.parse(encodeThreadLine(forkLine));
    json.parent = parent;
    expect(() => decodeThreadLine(JSON.stringify(json), "line 7")).toThrow(ThreadLineError);
    expect(() => decodeThreadLine(JSON.stringify(json), "line 7")).toThrow(`line 7: ${field}:`);
  });
});
