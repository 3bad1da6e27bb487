import { describe, expect, it } from "vitest";
import { DecodedMessages } from "../../src/store/redis/codec.js";

const entry = (seq: number, content: string) =>
  `${seq} ${content.length} ${JSON.stringify({ role: "user", content, createTime: 1 })}`;

describe("the Redis store's decoded-message cache", () => {
  it("hands out the same object for the same entry, and decodes a changed entry afresh", () => {
    const cache = new DecodedMessages(100);
    const first = cache.get("inc-a", entry(1, "hello"));
    expect(first).toMatchObject({ seq: 1, content: "hello" });
    expect(cache.get("inc-a", entry(1, "hello"))).toBe(first);
    // Same incarnation and seq, other text (a restored database written again).
    expect(cache.get("inc-a", entry(1, "bye")).content).toBe("bye");
    // Another incarnation with the same seq is another thread.
    expect(cache.get("inc-b", entry(1, "hello"))).not.toBe(first);
    expect(cache.size).toBe(2);
  });

  it("stays within its bound, dropping the thread seen first, even for one thread larger than the bound", () => {
    const cache = new DecodedMessages(3);
    const a1 = cache.get("a", entry(1, "a1"));
    cache.get("a", entry(2, "a2"));
    cache.get("b", entry(1, "b1"));
    cache.get("b", entry(2, "b2")); // over the bound: thread a goes
    expect(cache.size).toBeLessThanOrEqual(3);
    expect(cache.get("a", entry(1, "a1"))).not.toBe(a1);
    for (let seq = 1; seq <= 50; seq++) cache.get("c", entry(seq, `c${seq}`));
    expect(cache.size).toBeLessThanOrEqual(3);
    const last = cache.get("c", entry(50, "c50"));
    expect(cache.get("c", entry(50, "c50"))).toBe(last);
  });

  it("refuses an entry that is not in the store's format", () => {
    const cache = new DecodedMessages(10);
    expect(() => cache.get("a", "not an entry")).toThrow(/not in the store's format/);
  });
});
