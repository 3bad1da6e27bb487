import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ListThreadsRequestSchema } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { MemoryError } from "../../src/core/errors.js";
import { labelsFrom } from "../../src/service/labels.js";
import { addReq, type Harness, startHarness, users } from "../support/service-harness.js";

async function invalid(p: Promise<unknown>, field: string, text: string): Promise<void> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(MemoryError);
  expect((err as MemoryError).code).toBe("invalid_argument");
  expect((err as MemoryError).field).toBe(field);
  expect((err as MemoryError).message).toContain(text);
}

describe("thread labels in the service", () => {
  let h: Harness;
  beforeEach(async () => {
    h = await startHarness();
  });
  afterEach(async () => h.close());

  it("checks count, key and value sizes, naming the label, and stores nothing", async () => {
    const many = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"]));
    const add = (labels: Record<string, string>) =>
      h.service.add(addReq({ threadId: "t", messages: users("x"), labels }), h.ctx());
    await invalid(add(many), "labels", "at most 16 labels (got 17)");
    await invalid(add({ ["k".repeat(65)]: "v" }), `labels["${"k".repeat(65)}"]`, "1 to 64 bytes");
    await invalid(add({ "a=b": "v" }), 'labels["a=b"]', "letters, digits");
    await invalid(add({ k: "é".repeat(129) }), 'labels["k"]', "at most 256 bytes");
    await invalid(
      h.service.listThreads(create(ListThreadsRequestSchema, { labels: many }), h.ctx()),
      "labels",
      "at most 16",
    );
    expect(await h.store.listThreads("", "", 10)).toEqual([]);
    // The limits themselves are accepted.
    const sixteen = Object.fromEntries(
      Array.from({ length: 16 }, (_, i) => [
        `${"k".repeat(62)}${String(i).padStart(2, "0")}`,
        "é".repeat(128),
      ]),
    );
    expect(labelsFrom(sixteen, "labels")).toEqual(sixteen);
    const r = await add(sixteen);
    expect(r.thread?.labels).toEqual(sixteen);
  });

  it("counts labels in the payload a request_id stands for", async () => {
    const add = (labels: Record<string, string>) =>
      h.service.add(
        addReq({ threadId: "t", messages: users("x"), requestId: "r1", labels }),
        h.ctx(),
      );
    await add({ a: "1" });
    const again = await add({ a: "1" });
    expect(again.lastSeq).toBe(1n);
    await invalid(add({ a: "2" }), "request_id", "different request");
    expect((await h.store.getThread("", "t"))?.labels).toEqual({ a: "1" });
  });

  it("creates a thread from an Add with labels only", async () => {
    const r = await h.service.add(addReq({ threadId: "t", labels: { a: "1" } }), h.ctx());
    expect(r.thread?.labels).toEqual({ a: "1" });
    expect(r.thread?.lastSeq).toBe(0n);
  });
});
