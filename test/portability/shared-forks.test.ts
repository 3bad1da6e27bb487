/**
 * Export and import of fork families on every store: the file holds each
 * shared message once (v2 lines), the same file whichever store wrote it,
 * and an import into any store shares the prefixes again — the target's
 * message quota is set to what the source stores physically, so an import
 * that copied the prefixes would be refused.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { importLines } from "../../src/portability/import.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/store.js";
import { backends } from "../store/contract/backends.js";
import { addUsers, exported, forkOf, linesOf } from "./support.js";

const numbered = (n: number, tag: string) => Array.from({ length: n }, (_, i) => `${tag}${i + 1}`);

/**
 * "main" 300 messages (its head frozen by the first Fork); "branch" a fork at
 * 250 plus 2 of its own; "leaf" a fork of branch at 251 (copies branch's one
 * head message it takes) plus 1; "aside" a fork of main at 10 whose id comes
 * before its parent's; "short" 20 messages and "copy" a fork of it at 15
 * (copied: at most 128 of a head are copied) plus 1.
 * Physically: 300 + 2 + (1 + 1) + 0 + 20 + (15 + 1) = 340 messages.
 *
 * An import writes the forks in file order, each parent's forks by id:
 * "aside" comes before "branch", while main's head is not frozen yet, so it
 * copies its 10 messages (as a live Fork in that order would): 350.
 */
async function family(store: Store): Promise<void> {
  await addUsers(store, "main", numbered(300, "m"), 1000);
  await forkOf(store, "main", "branch", 250, 2000);
  await addUsers(store, "branch", ["b1", "b2"], 2100);
  await forkOf(store, "branch", "leaf", 251, 2200);
  await addUsers(store, "leaf", ["l1"], 2300);
  await forkOf(store, "main", "aside", 10, 2400);
  await addUsers(store, "short", numbered(20, "s"), 1000);
  await forkOf(store, "short", "copy", 15, 2500);
  await addUsers(store, "copy", ["c1"], 2600);
}
const PHYSICAL = 340;
const IMPORTED = 350;
const IDS = ["aside", "branch", "copy", "leaf", "main", "short"];

let file: string[] = [];
const reads: Record<string, unknown> = {};

beforeAll(async () => {
  const source = createMemoryStore({ maxMessagesPerNamespace: PHYSICAL });
  await family(source);
  file = await exported(source);
  for (const id of IDS) reads[id] = (await source.read("ns", id))?.messages;
  await source.close();
});

describe("a fork family's export file", () => {
  it("writes each parent before its forks and each shared message once", () => {
    const lines = file.map((l) => JSON.parse(l));
    expect(lines.map((l) => [l.thread_id, l.shared?.through_seq, l.messages.length])).toEqual([
      ["main", undefined, 300],
      ["aside", 10, 0],
      ["branch", 250, 2],
      ["leaf", 251, 1],
      ["short", undefined, 20],
      ["copy", 15, 1],
    ]);
  });
});

describe.each(backends)("export and import of fork families: $name", (backend) => {
  beforeAll(() => backend.start(), 60_000);
  afterAll(() => backend.stop(), 120_000);

  it("imports the family sharing as the source did, exports the same file, re-imports unchanged", async () => {
    // A sharded namespace enforces quotas per shard (contract/support.ts): not this count.
    const exactQuotas = backend.namespaceShards === undefined;
    const store = await backend.open(exactQuotas ? { maxMessagesPerNamespace: IMPORTED } : {});
    try {
      expect(await importLines(store, linesOf(file))).toEqual({ imported: 6, unchanged: 0 });
      for (const id of IDS) expect((await store.read("ns", id))?.messages).toEqual(reads[id]);
      expect(await exported(store)).toEqual(file);
      expect(await importLines(store, linesOf(file))).toEqual({ imported: 0, unchanged: 6 });
      // The store is full: the forks share, as their Forks did.
      if (exactQuotas) {
        await expect(addUsers(store, "more", ["x"], 9000)).rejects.toMatchObject({
          code: "resource_exhausted",
        });
      }
    } finally {
      await store.close();
    }
  });

  it("keeps a family written on this store the same through export and import elsewhere", async () => {
    const store = await backend.open({});
    const target = createMemoryStore({ maxMessagesPerNamespace: IMPORTED });
    try {
      await family(store);
      expect(await exported(store)).toEqual(file);
      expect(await importLines(target, linesOf(file))).toEqual({ imported: 6, unchanged: 0 });
      for (const id of IDS) expect((await target.read("ns", id))?.messages).toEqual(reads[id]);
    } finally {
      await store.close();
      await target.close();
    }
  });
});
