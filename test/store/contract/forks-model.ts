/**
 * The Fork property: random Adds, Forks, Rewinds and Clears on a few
 * threads, some with a small max_stored (trims), against a model that copies
 * messages; every thread's full read must equal the model's whatever the
 * store shares, copies or freezes.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { Strategy } from "../../../src/core/types.js";
import type { Store } from "../../../src/store/store.js";
import { user, window20 } from "../fixtures.js";
import { type ContractBackend, cmd, forkCmd, rewindCmd } from "./support.js";

const IDS = ["a", "b", "c"] as const;
type Id = (typeof IDS)[number];

type Op =
  | { kind: "add"; id: Id; count: number }
  | { kind: "fork"; from: Id; to: Id; point: number; maxStored: number | undefined }
  | { kind: "rewind"; id: Id; point: number }
  | { kind: "clear"; id: Id };

const idArb = fc.constantFrom(...IDS);
const pointArb = fc.double({ min: 0, max: 1, noNaN: true });

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant("add" as const),
      id: idArb,
      // Some Adds are long, so a later Fork takes more than FORK_COPY_MAX and freezes.
      count: fc.oneof(fc.integer({ min: 0, max: 5 }), fc.integer({ min: 120, max: 160 })),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant("fork" as const),
      from: idArb,
      to: idArb,
      point: pointArb,
      maxStored: fc.option(fc.constantFrom(3, 40, 150), { nil: undefined }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant("rewind" as const), id: idArb, point: pointArb }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("clear" as const), id: idArb }) },
);

/** A thread of the model: its messages as [seq, content, createTime], copied on a fork. */
interface ModelThread {
  lastSeq: number;
  maxStored: number;
  messages: [number, string, number][];
}

type Model = Map<Id, ModelThread>;

const trimTo = (t: ModelThread) => {
  if (t.messages.length > t.maxStored)
    t.messages = t.messages.slice(t.messages.length - t.maxStored);
};

/** The floor-1 .. last_seq point of `t` that `point` (0..1) picks. */
function pick(t: ModelThread, point: number): number {
  const low = t.lastSeq - t.messages.length;
  return low + Math.round(point * (t.lastSeq - low));
}

async function apply(store: Store, model: Model, op: Op, now: number): Promise<void> {
  if (op.kind === "add") {
    const messages = Array.from({ length: op.count }, (_, i) => user(`${now}-${i}`));
    await store.append(cmd({ threadId: op.id, messages, now }));
    const t = model.get(op.id) ?? { lastSeq: 0, maxStored: window20.maxStored, messages: [] };
    for (const m of messages) t.messages.push([++t.lastSeq, m.content, now]);
    trimTo(t);
    model.set(op.id, t);
  } else if (op.kind === "fork") {
    const from = model.get(op.from);
    if (from === undefined || model.has(op.to)) return;
    const at = pick(from, op.point);
    const strategy: Strategy | undefined =
      op.maxStored === undefined ? undefined : { ...window20, maxStored: op.maxStored };
    await store.fork(forkCmd(op.to, { threadId: op.from, atSeq: at, strategy, now }));
    const t = {
      lastSeq: at,
      maxStored: op.maxStored ?? from.maxStored,
      messages: from.messages.filter((m) => m[0] <= at),
    };
    trimTo(t);
    model.set(op.to, t);
  } else if (op.kind === "rewind") {
    const t = model.get(op.id);
    if (t === undefined) return;
    const to = pick(t, op.point);
    await store.rewind(rewindCmd(to, { threadId: op.id, now }));
    t.lastSeq = to;
    t.messages = t.messages.filter((m) => m[0] <= to);
  } else {
    await store.clear("ns", op.id, now);
    model.delete(op.id);
  }
}

export function forkPropertyContract(backend: ContractBackend): void {
  describe("fork property", () => {
    it("random forks, rewinds, adds, trims and clears read as a model that copies", async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(opArb, { minLength: 4, maxLength: 30, size: "max" }),
          async (ops) => {
            const store = await backend.open({});
            try {
              const model: Model = new Map();
              let now = 1000;
              for (const op of ops) {
                now += 10;
                await apply(store, model, op, now);
              }
              for (const id of IDS) {
                const snap = await store.read("ns", id);
                const want = model.get(id);
                if (want === undefined) {
                  expect(snap).toBeUndefined();
                  continue;
                }
                expect(snap?.thread.lastSeq).toBe(want.lastSeq);
                expect(snap?.messages.map((m) => [m.seq, m.content, m.createTime])).toEqual(
                  want.messages,
                );
              }
            } finally {
              await store.close();
            }
          },
        ),
        { numRuns: 40 },
      );
    }, 120_000);
  });
}
