import { describe, expect, it } from "vitest";
import type { StoredMessage } from "../../src/core/types.js";
import { CACHED_TAIL_MAX, MessageCache } from "../../src/store/sqlite/message-cache.js";

/** Messages with seqs from..to, frozen as the store hands them out. */
function seqs(from: number, to: number): StoredMessage[] {
  return Array.from({ length: to - from + 1 }, (_, i) =>
    Object.freeze({ role: "user" as const, content: `m${from + i}`, seq: from + i, createTime: 1 }),
  );
}
const seqsOf = (c: MessageCache, key: string) => c.get(key)?.messages.map((m) => m.seq);

describe("SQLite message cache (a tail per thread)", () => {
  it("keeps at most CACHED_TAIL_MAX newest messages of a thread, and says when that is not all", () => {
    const c = new MessageCache(1 << 30);
    c.set("a", seqs(1, 5000), true, 5000);
    expect(c.get("a")?.whole).toBe(false);
    expect(seqsOf(c, "a")).toEqual(seqs(5000 - CACHED_TAIL_MAX + 1, 5000).map((m) => m.seq));
    c.set("b", seqs(3, 10), true, 10);
    expect(c.get("b")?.whole).toBe(true);
  });

  it("follows appends and trims, and halves an entry that outgrows the cap", () => {
    const c = new MessageCache(1 << 30);
    c.set("a", seqs(1, 10), true, 10);
    c.update("a", 10, seqs(11, 12), 3);
    expect(seqsOf(c, "a")).toEqual(seqs(4, 12).map((m) => m.seq));
    expect(c.get("a")).toMatchObject({ whole: true, lastSeq: 12 });
    c.update("a", 12, seqs(13, 12 + CACHED_TAIL_MAX), 0);
    const tail = c.get("a");
    expect(tail?.whole).toBe(false);
    expect(tail?.messages).toHaveLength(CACHED_TAIL_MAX / 2);
    expect(tail?.messages.at(-1)?.seq).toBe(12 + CACHED_TAIL_MAX);
  });

  it("drops an entry a commit does not follow on from, instead of serving it stale", () => {
    const c = new MessageCache(1 << 30);
    c.set("a", seqs(1, 10), true, 10);
    c.update("a", 11, seqs(12, 12), 0);
    expect(c.get("a")).toBeUndefined();
    c.set("b", seqs(1, 10), true, 10);
    c.delete("b");
    c.update("b", 10, seqs(11, 11), 0);
    expect(c.get("b")).toBeUndefined();
  });

  it("drops the least recently used entries past its budget, and keeps nothing with budget 0", () => {
    const one = 100 + "m1".length;
    const c = new MessageCache(one * 25);
    c.set("a", seqs(1, 10), true, 10);
    c.set("b", seqs(1, 10), true, 10);
    c.get("a");
    c.set("c", seqs(1, 10), true, 10);
    expect(c.get("b")).toBeUndefined();
    expect(c.get("a")).toBeDefined();
    expect(c.get("c")).toBeDefined();
    const none = new MessageCache(0);
    none.set("a", [], true, 0);
    none.update("a", 0, seqs(1, 1), 0);
    expect(none.get("a")).toBeUndefined();
  });
});
