import { describe, expect, it } from "vitest";
import { MemoryError } from "../../src/core/errors.js";
import {
  cutLineage,
  FORK_COPY_MAX,
  floorOf,
  type Lineage,
  MAX_LINEAGE,
  planForkLineage,
  raiseFloor,
  rangesFor,
} from "../../src/core/lineage.js";

/** Segments A 1..200, B 201..400, then the owned head H from 401 (last_seq 450). */
const shared: Lineage = {
  entries: [
    { segment: "A", low: 1, through: 200 },
    { segment: "B", low: 201, through: 400 },
  ],
  head: { segment: "H", low: 401 },
};

describe("floorOf", () => {
  it("is the first entry's low, else the head's, else past last_seq", () => {
    expect(floorOf(shared, 450)).toBe(1);
    expect(floorOf({ entries: [], head: { segment: "H", low: 7 } }, 9)).toBe(7);
    expect(floorOf({ entries: [], head: undefined }, 9)).toBe(10);
  });
});

describe("rangesFor", () => {
  it.each([
    ["inside one entry", 10, 20, [{ segment: "A", from: 10, to: 20 }]],
    [
      "across entries and the head",
      150,
      420,
      [
        { segment: "A", from: 150, to: 200 },
        { segment: "B", from: 201, to: 400 },
        { segment: "H", from: 401, to: 420 },
      ],
    ],
    ["the head only, clamped to last_seq", 440, 999, [{ segment: "H", from: 440, to: 450 }]],
    ["nothing past last_seq", 451, 999, []],
  ] as const)("%s", (_name, from, to, want) => {
    expect(rangesFor(shared, 450, from, to)).toEqual(want);
  });
});

describe("planForkLineage", () => {
  it("copies at most FORK_COPY_MAX messages of the head, the parent unchanged", () => {
    const plan = planForkLineage(shared, 450, 401 + FORK_COPY_MAX - 1);
    expect(plan).toEqual({
      forkEntries: shared.entries,
      copy: { segment: "H", from: 401, to: 528 },
      parent: shared,
      headFrozen: false,
      sharedCount: 528,
    });
  });

  it("freezes the head past FORK_COPY_MAX: the parent's new last entry and the fork's name it", () => {
    const plan = planForkLineage(shared, 600, 401 + FORK_COPY_MAX);
    expect(plan.headFrozen).toBe(true);
    expect(plan.copy).toBeUndefined();
    expect(plan.parent).toEqual({
      entries: [...shared.entries, { segment: "H", low: 401, through: 600 }],
      head: undefined,
    });
    expect(plan.forkEntries.at(-1)).toEqual({ segment: "H", low: 401, through: 529 });
  });

  it("takes only the entries up to at_seq, the last one cut", () => {
    const plan = planForkLineage(shared, 450, 250);
    expect(plan.forkEntries).toEqual([
      { segment: "A", low: 1, through: 200 },
      { segment: "B", low: 201, through: 250 },
    ]);
    expect(plan).toMatchObject({ copy: undefined, headFrozen: false, sharedCount: 250 });
    expect(planForkLineage(shared, 450, 0)).toMatchObject({ forkEntries: [], sharedCount: 0 });
  });

  it("refuses a fork referencing more than MAX_LINEAGE segments", () => {
    const entries = Array.from({ length: MAX_LINEAGE }, (_, i) => ({
      segment: `s${i}`,
      low: i * 200 + 1,
      through: (i + 1) * 200,
    }));
    const last = MAX_LINEAGE * 200;
    const long: Lineage = { entries, head: { segment: "H", low: last + 1 } };
    expect(planForkLineage(long, last + 10, last + 5).forkEntries).toHaveLength(MAX_LINEAGE);
    try {
      planForkLineage(long, last + 300, last + 200);
      throw new Error("not refused");
    } catch (err) {
      expect(err).toBeInstanceOf(MemoryError);
      expect(err).toMatchObject({ code: "failed_precondition", field: "thread_id" });
    }
  });
});

describe("raiseFloor", () => {
  it("releases entries wholly below, cuts the one it lands in", () => {
    expect(raiseFloor(shared, 250)).toEqual({
      lineage: { entries: [{ segment: "B", low: 250, through: 400 }], head: shared.head },
      released: [shared.entries[0]],
      headDropThrough: undefined,
    });
  });

  it("drops the head's front in place when the floor reaches it", () => {
    expect(raiseFloor(shared, 411)).toEqual({
      lineage: { entries: [], head: { segment: "H", low: 411 } },
      released: shared.entries,
      headDropThrough: 410,
    });
  });
});

describe("cutLineage", () => {
  it("changes nothing at last_seq", () => {
    expect(cutLineage(shared, 450, 450)).toEqual({
      lineage: shared,
      released: [],
      headDropAfter: undefined,
      headDropped: false,
    });
  });

  it("cuts the head in place when to_seq lies in it", () => {
    expect(cutLineage(shared, 450, 420)).toMatchObject({
      lineage: shared,
      headDropAfter: 420,
      headDropped: false,
    });
  });

  it("drops the head and releases the entries after to_seq, cutting the one it lands in", () => {
    expect(cutLineage(shared, 450, 150)).toEqual({
      lineage: { entries: [{ segment: "A", low: 1, through: 150 }], head: undefined },
      released: [shared.entries[1]],
      headDropAfter: undefined,
      headDropped: true,
    });
  });
});
