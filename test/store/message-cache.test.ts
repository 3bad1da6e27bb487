import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import type { StoredMessage } from "../../src/core/types.js";
import { type MessageRow, toMessage } from "../../src/store/sqlite/codec.js";
import {
  CACHED_TAIL_MAX,
  MessageCache,
  messageSize,
} from "../../src/store/sqlite/message-cache.js";

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

  it("cuts a rewound entry back to to_seq, so an Add that reuses the seqs follows on from it", () => {
    const c = new MessageCache(1 << 30);
    c.set("a", seqs(1, 10), true, 10);
    const bytesOfTen = c.bytes;
    c.rewind("a", 10, 4);
    expect(seqsOf(c, "a")).toEqual([1, 2, 3, 4]);
    expect(c.get("a")).toMatchObject({ whole: true, lastSeq: 4 });
    const one = messageSize(seqs(1, 1)[0] as StoredMessage);
    expect(bytesOfTen - c.bytes).toBe(6 * one);
    const reused = seqs(5, 6).map((m) => Object.freeze({ ...m, content: `new${m.seq}` }));
    c.update("a", 4, reused, 0);
    expect(c.get("a")?.messages.map((m) => m.content)).toEqual([
      "m1",
      "m2",
      "m3",
      "m4",
      "new5",
      "new6",
    ]);
    // A tail that starts after to_seq is left empty, still up to date.
    c.set("b", seqs(8, 10), false, 10);
    c.rewind("b", 10, 3);
    expect(c.get("b")).toMatchObject({ messages: [], whole: false, lastSeq: 3 });
  });

  it("drops an entry a Rewind does not follow on from", () => {
    const c = new MessageCache(1 << 30);
    c.set("a", seqs(1, 10), true, 10);
    c.rewind("a", 12, 4);
    expect(c.get("a")).toBeUndefined();
    expect(c.bytes).toBe(0);
  });

  it("drops the least recently used entries past its budget, and keeps nothing with budget 0", () => {
    const one = messageSize(seqs(1, 1)[0] as StoredMessage);
    const c = new MessageCache(one * 25 + 400);
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

  it("counts the bytes of heap its messages really hold", () => {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    // Messages made as the store makes them: rows read from SQLite, decoded by toMessage.
    const db = new Database(":memory:");
    db.exec(
      "CREATE TABLE m (seq INTEGER, role TEXT, create_time INTEGER, content TEXT, extra TEXT)",
    );
    const insert = db.prepare("INSERT INTO m VALUES (?, ?, ?, ?, ?)");
    const threads = 40;
    const perThread = 500;
    db.transaction(() => {
      for (let i = 0; i < threads * perThread; i++) {
        // ASCII and two-byte texts of 10 to 1,000 characters.
        const text = (i % 3 === 0 ? "é€ " : "abc ").repeat(3 + (i % 250)) + i;
        insert.run(i + 1, i % 2 === 0 ? "user" : "assistant", Date.now(), text, null);
      }
    })();
    const rows = db
      .prepare<[number, number], MessageRow>(
        "SELECT seq, role, create_time, content, extra FROM m WHERE seq BETWEEN ? AND ?",
      )
      .raw();
    const cache = new MessageCache(1 << 30);
    gc();
    gc();
    const before = process.memoryUsage().heapUsed;
    for (let t = 0; t < threads; t++) {
      const from = t * perThread + 1;
      const messages = rows.all(from, from + perThread - 1).map(toMessage);
      cache.set(`incarnation-${t}`, messages, true, from + perThread - 1);
    }
    gc();
    gc();
    const grown = process.memoryUsage().heapUsed - before;
    db.close();
    expect(cache.get("incarnation-0")?.messages).toHaveLength(perThread);
    // Within 15% either way (measured: 1.00; the old count, characters plus
    // 100 per message, came to about 0.8 here and far less on short texts).
    expect(cache.bytes / grown).toBeGreaterThan(0.85);
    expect(cache.bytes / grown).toBeLessThan(1.18);
  });
});
