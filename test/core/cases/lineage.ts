import type { CutPlan, FloorPlan, Lineage, SegmentRange } from "../../../src/core/lineage.js";

/**
 * core/lineage.ts raiseFloor and cutLineage: what a trim and a Rewind do
 * to a thread's frozen entries and its owned head. Run against the core
 * (test/core/decision-cases.test.ts) and, for the entries (the Lua's part
 * of the decision; the head is the scripts' list arithmetic), against the
 * Redis store's Lua (src/store/redis/lua/lineage.ts,
 * test/store/redis-lua-decisions.test.ts). core/fork.ts forkTrimCount is
 * proven against the Lua by test/core/cases/trim-count.ts (it equals
 * trimCount over consecutive seqs).
 */
export interface RaiseFloorCase {
  name: string;
  lineage: Lineage;
  newFloor: number;
  expected: FloorPlan;
}

export interface RangesForCase {
  name: string;
  lineage: Lineage;
  lastSeq: number;
  from: number;
  to: number;
  expected: SegmentRange[];
}

export interface CutLineageCase {
  name: string;
  lineage: Lineage;
  lastSeq: number;
  toSeq: number;
  expected: CutPlan;
}

const a = { segment: "a", low: 1, through: 200 };
const b = { segment: "b", low: 201, through: 400 };
const two: Lineage = { entries: [a, b], head: { segment: "h", low: 401 } };

export const RAISE_FLOOR_CASES: readonly RaiseFloorCase[] = [
  {
    name: "below every entry: nothing changes",
    lineage: two,
    newFloor: 1,
    expected: { lineage: two, released: [], headDropThrough: undefined },
  },
  {
    name: "inside the first entry: its low rises",
    lineage: two,
    newFloor: 150,
    expected: {
      lineage: { entries: [{ ...a, low: 150 }, b], head: two.head },
      released: [],
      headDropThrough: undefined,
    },
  },
  {
    name: "just past the first entry: it is released",
    lineage: two,
    newFloor: 201,
    expected: {
      lineage: { entries: [b], head: two.head },
      released: [a],
      headDropThrough: undefined,
    },
  },
  {
    name: "inside the head: every entry released, the head's front dropped",
    lineage: two,
    newFloor: 410,
    expected: {
      lineage: { entries: [], head: { segment: "h", low: 410 } },
      released: [a, b],
      headDropThrough: 409,
    },
  },
  {
    name: "no head: entries only",
    lineage: { entries: [a, b], head: undefined },
    newFloor: 300,
    expected: {
      lineage: { entries: [{ ...b, low: 300 }], head: undefined },
      released: [a],
      headDropThrough: undefined,
    },
  },
];

export const CUT_LINEAGE_CASES: readonly CutLineageCase[] = [
  {
    name: "inside the head: dropped in place after to_seq",
    lineage: two,
    lastSeq: 450,
    toSeq: 420,
    expected: { lineage: two, released: [], headDropAfter: 420, headDropped: false },
  },
  {
    name: "at the last entry's through: the head goes whole",
    lineage: two,
    lastSeq: 450,
    toSeq: 400,
    expected: {
      lineage: { entries: [a, b], head: undefined },
      released: [],
      headDropAfter: undefined,
      headDropped: true,
    },
  },
  {
    name: "inside the first entry: the second released, the first cut short",
    lineage: two,
    lastSeq: 450,
    toSeq: 120,
    expected: {
      lineage: { entries: [{ ...a, through: 120 }], head: undefined },
      released: [b],
      headDropAfter: undefined,
      headDropped: true,
    },
  },
  {
    name: "to the floor minus one: everything released",
    lineage: { entries: [a, b], head: undefined },
    lastSeq: 400,
    toSeq: 0,
    expected: {
      lineage: { entries: [], head: undefined },
      released: [a, b],
      headDropAfter: undefined,
      headDropped: false,
    },
  },
  {
    name: "to last_seq: unchanged",
    lineage: two,
    lastSeq: 450,
    toSeq: 450,
    expected: { lineage: two, released: [], headDropAfter: undefined, headDropped: false },
  },
];

export const RANGES_FOR_CASES: readonly RangesForCase[] = [
  {
    name: "a window in the head only",
    lineage: two,
    lastSeq: 450,
    from: 431,
    to: 450,
    expected: [{ segment: "h", from: 431, to: 450 }],
  },
  {
    name: "across both entries and the head",
    lineage: two,
    lastSeq: 450,
    from: 150,
    to: 450,
    expected: [
      { segment: "a", from: 150, to: 200 },
      { segment: "b", from: 201, to: 400 },
      { segment: "h", from: 401, to: 450 },
    ],
  },
  {
    name: "inside one entry",
    lineage: two,
    lastSeq: 450,
    from: 210,
    to: 220,
    expected: [{ segment: "b", from: 210, to: 220 }],
  },
  {
    name: "an empty head is left out",
    lineage: two,
    lastSeq: 400,
    from: 1,
    to: 400,
    expected: [
      { segment: "a", from: 1, to: 200 },
      { segment: "b", from: 201, to: 400 },
    ],
  },
  {
    name: "nothing stored in the range",
    lineage: { entries: [], head: { segment: "h", low: 11 } },
    lastSeq: 10,
    from: 1,
    to: 10,
    expected: [],
  },
];
