import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { compareBytes, compareCodePoints, SortedIds } from "../../src/store/memory/sorted-ids.js";

const sign = (n: number) => Math.sign(n);

describe("SortedIds", () => {
  it("orders like UTF-8 bytes without encoding", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme" }), fc.string({ unit: "grapheme" }), (a, b) => {
        expect(sign(compareCodePoints(a, b))).toBe(sign(compareBytes(a, b)));
      }),
      { numRuns: 2000 },
    );
    expect(compareCodePoints("\u{1F600}", "\uFF21")).toBeGreaterThan(0);
    expect(compareCodePoints("\uE000", "\uD7FF")).toBeGreaterThan(0);
  });

  it("keeps order across many chunks, in any insertion order", () => {
    const ids = new SortedIds();
    const all = Array.from({ length: 20_000 }, (_, i) => `id-${(i * 7919) % 20_000}`);
    for (const x of all) ids.add(x);
    for (const x of all.filter((_, i) => i % 3 === 0)) ids.delete(x);
    const expected = all.filter((_, i) => i % 3 !== 0).sort(compareBytes);
    expect(ids.size).toBe(expected.length);
    expect(ids.after("", 100_000)).toEqual(expected);
    const mid = expected[6000] ?? "";
    expect(ids.after(mid, 3)).toEqual(expected.slice(6001, 6004));
    expect(ids.shift(1500)).toEqual(expected.slice(0, 1500));
    expect(ids.after("", 2)).toEqual(expected.slice(1500, 1502));
  });

  it("agrees with a sorted copy for any mix of adds, deletes, shifts and pages", () => {
    const id = fc.oneof(
      fc.string({ unit: "grapheme", maxLength: 3 }),
      fc.integer({ min: 0, max: 3000 }).map((n) => `t${n}`),
    );
    const op = fc.oneof(
      { weight: 6, arbitrary: fc.record({ add: fc.array(id, { maxLength: 400 }) }) },
      { weight: 3, arbitrary: fc.record({ del: fc.array(id, { maxLength: 200 }) }) },
      { weight: 1, arbitrary: fc.record({ shift: fc.integer({ min: 0, max: 700 }) }) },
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 12 }), id, fc.nat(50), (ops, after, limit) => {
        const ids = new SortedIds();
        const ref = new Set<string>();
        const sorted = () => [...ref].sort(compareBytes);
        for (const o of ops) {
          if ("add" in o) {
            for (const x of o.add) {
              const fresh = !ref.has(x);
              ref.add(x);
              expect(ids.add(x)).toBe(fresh);
            }
          } else if ("del" in o) {
            for (const x of o.del) expect(ids.delete(x)).toBe(ref.delete(x));
          } else {
            const gone = sorted().slice(0, o.shift);
            expect(ids.shift(o.shift)).toEqual(gone);
            for (const x of gone) ref.delete(x);
          }
          expect(ids.size).toBe(ref.size);
        }
        const all = sorted();
        expect(ids.after("", all.length + 1)).toEqual(all.filter((x) => x !== ""));
        expect(ids.after(after, limit)).toEqual(
          all.filter((x) => compareBytes(x, after) > 0).slice(0, limit),
        );
      }),
      { numRuns: 300 },
    );
  });
});
