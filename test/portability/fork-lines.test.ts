import { describe, expect, it } from "vitest";
import type { Strategy } from "../../src/core/types.js";
import { importLines } from "../../src/portability/import.js";
import {
  encodeThreadLine,
  type ThreadLine,
  ThreadLineError,
} from "../../src/portability/thread-line.js";
import { decodeThreadLine } from "../../src/portability/thread-line-decode.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { addUsers, exported, forkOf, linesOf } from "./support.js";

const WINDOW: Strategy = { kind: "window", window: 20, excludeSystem: false, maxStored: 1000 };

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

const contentsOf = (line: { messages: { content: string }[] }) =>
  line.messages.map((m) => m.content);

describe("export lines of forks", () => {
  it("write a fork after its parent, sharing the parent's prefix once (v2); other lines are v1 without parent", async () => {
    const store = createMemoryStore();
    await addUsers(store, "p", ["one", "two", "three"], 1000);
    await forkOf(store, "p", "f", 2);
    await addUsers(store, "f", ["own"], 4000);
    const [parent, fork] = (await exported(store)).map((l) => JSON.parse(l));
    expect(parent.thread_id).toBe("p");
    expect(parent.format).toBe("windlass-memory.thread.v1");
    expect("parent" in parent).toBe(false);
    expect(contentsOf(parent)).toEqual(["one", "two", "three"]);
    expect(fork.thread_id).toBe("f");
    expect(fork.format).toBe("windlass-memory.thread.v2");
    expect(fork.parent).toEqual({
      thread_id: "p",
      at_seq: 2,
      fork_time: 3000,
      parent_create_time: 1000,
    });
    expect(fork.shared).toEqual({
      through_seq: 2,
      count: 2,
      digest: expect.stringMatching(/^[0-9a-f]{64}$/),
    });
    expect(contentsOf(fork)).toEqual(["own"]);
    await store.close();
  });

  it("write a family in depth-first order whatever the ids, each fork after its parent", async () => {
    const store = createMemoryStore();
    await addUsers(store, "m", ["one", "two", "three"], 1000);
    await forkOf(store, "m", "z", 3);
    await forkOf(store, "m", "b", 1);
    await forkOf(store, "z", "a", 2);
    await addUsers(store, "c", ["plain"], 1000);
    const lines = (await exported(store)).map((l) => JSON.parse(l));
    expect(lines.map((l) => l.thread_id)).toEqual(["c", "m", "b", "z", "a"]);
    expect(lines.map((l) => l.shared?.through_seq)).toEqual([undefined, undefined, 1, 3, 2]);
    expect(lines.map((l) => l.messages.length)).toEqual([1, 3, 0, 0, 0]);
    await store.close();
  });

  it("write a fork whose parent holds other messages, or is gone, with all its messages (v1)", async () => {
    const store = createMemoryStore();
    await addUsers(store, "p", ["one", "two", "three"], 1000);
    await forkOf(store, "p", "f", 3);
    await forkOf(store, "p", "g", 3);
    await store.rewind({
      namespace: "ns",
      threadId: "p",
      toSeq: 0,
      expectedLastSeq: undefined,
      requestId: "",
      requestHash: "",
      now: 5000,
    });
    await addUsers(store, "p", ["other"], 6000);
    await store.clear("ns", "p", 7000);
    await addUsers(store, "q", ["one"], 1000);
    await forkOf(store, "q", "h", 1);
    await store.rewind({
      namespace: "ns",
      threadId: "q",
      toSeq: 0,
      expectedLastSeq: undefined,
      requestId: "",
      requestHash: "",
      now: 5000,
    });
    await addUsers(store, "q", ["two"], 6000);
    const lines = (await exported(store)).map((l) => JSON.parse(l));
    expect(lines.map((l) => [l.thread_id, l.format, l.shared, contentsOf(l)])).toEqual([
      ["f", "windlass-memory.thread.v1", undefined, ["one", "two", "three"]],
      ["g", "windlass-memory.thread.v1", undefined, ["one", "two", "three"]],
      ["q", "windlass-memory.thread.v1", undefined, ["two"]],
      ["h", "windlass-memory.thread.v1", undefined, ["one"]],
    ]);
    await store.close();
  });

  it("import a family sharing as it was, idempotently, and export it again the same", async () => {
    const source = createMemoryStore();
    await addUsers(
      source,
      "m",
      Array.from({ length: 300 }, (_, i) => `m${i}`),
      1000,
    );
    await forkOf(source, "m", "a", 250);
    await addUsers(source, "a", ["own a"], 4000);
    await forkOf(source, "a", "b", 251);
    await addUsers(source, "b", ["own b"], 5000);
    const text = await exported(source);
    // Each of the 302 messages once in the file.
    expect(text.map((l) => JSON.parse(l).messages.length)).toEqual([300, 1, 1]);
    // Stored as in the source: m's 300, a's own, and b's own plus the one of
    // a's head its Fork copied (at most FORK_COPY_MAX are copied, not shared):
    // 303 fit, where 803 would without sharing.
    const target = createMemoryStore({ maxMessagesPerNamespace: 303 });
    expect(await importLines(target, linesOf(text))).toEqual({ imported: 3, unchanged: 0 });
    for (const id of ["m", "a", "b"]) {
      expect(await target.read("ns", id)).toMatchObject({
        messages: (await source.read("ns", id))?.messages,
      });
    }
    expect(await importLines(target, linesOf(text))).toEqual({ imported: 0, unchanged: 3 });
    expect(await exported(target)).toEqual(text);
    await source.close();
    await target.close();
  });

  it("refuse a shared line whose parent is missing or holds other messages, naming the line", async () => {
    const source = createMemoryStore();
    await addUsers(source, "p", ["one", "two"], 1000);
    await forkOf(source, "p", "f", 2);
    const [parentLine = "", forkLine2 = ""] = await exported(source);
    const target = createMemoryStore();
    await expect(importLines(target, linesOf([forkLine2]))).rejects.toThrow(
      /^line 1: shared: .*parent "p", which the store does not have/,
    );
    await importLines(target, linesOf([parentLine.replace('"two"', '"TWO"')]));
    await expect(importLines(target, linesOf(["", forkLine2]))).rejects.toThrow(
      /^line 2: shared: .*which the store holds otherwise/,
    );
    expect(await target.getThread("ns", "f")).toBeUndefined();
    await source.close();
    await target.close();
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

describe("the shared field of a v2 line", () => {
  const shared = { throughSeq: 1, count: 1, digest: "a".repeat(64) };
  const v2: ThreadLine = { ...forkLine, shared, messages: forkLine.messages.slice(1) };

  it("round-trips with the v2 format, its messages only the thread's own", () => {
    const text = encodeThreadLine(v2);
    expect(JSON.parse(text).format).toBe("windlass-memory.thread.v2");
    expect(decodeThreadLine(text, "line 1")).toEqual(v2);
  });

  it.each([
    [
      (j: Record<string, unknown>) => Object.assign(j, { format: "windlass-memory.thread.v1" }),
      "shared",
    ],
    [(j: Record<string, unknown>) => Object.assign(j, { shared: undefined }), "shared"],
    [(j: Record<string, unknown>) => Object.assign(j, { parent: undefined }), "parent"],
    [(j: Record<string, unknown>) => Object.assign(j, { messages: [] }), "messages"],
    [
      (j: Record<string, unknown>) =>
        Object.assign(j, { shared: { through_seq: 3, count: 1, digest: "a".repeat(64) } }),
      "shared.through_seq",
    ],
    [
      (j: Record<string, unknown>) =>
        Object.assign(j, { shared: { through_seq: 1, count: 2, digest: "a".repeat(64) } }),
      "shared.count",
    ],
    [
      (j: Record<string, unknown>) =>
        Object.assign(j, { shared: { through_seq: 1, count: 1, digest: "A".repeat(64) } }),
      "shared.digest",
    ],
    [
      (j: Record<string, unknown>) =>
        Object.assign(j, { shared: { through_seq: 1, count: 1, digest: "a".repeat(64), x: 1 } }),
      "shared.x",
    ],
  ])("refuses a malformed v2 line (%#) naming %s", (edit, field) => {
    const json = edit(JSON.parse(encodeThreadLine(v2)));
    const text = JSON.stringify(json);
    expect(() => decodeThreadLine(text, "line 4")).toThrow(ThreadLineError);
    expect(() => decodeThreadLine(text, "line 4")).toThrow(`line 4: ${field}`);
  });
});
