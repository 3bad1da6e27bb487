import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import { afterEach, describe, expect, it } from "vitest";
import { WatchRequestSchema } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { MemoryError } from "../../src/core/errors.js";
import { createSqliteStore } from "../../src/store/sqlite/index.js";
import { addReq, getReq, type Harness, startHarness, users } from "../support/service-harness.js";

const ms = (n: number) =>
  create(DurationSchema, { seconds: BigInt(Math.floor(n / 1000)), nanos: (n % 1000) * 1e6 });

async function invalid(p: Promise<unknown>, field: string, text: string): Promise<void> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(MemoryError);
  expect((err as MemoryError).field).toBe(field);
  expect((err as MemoryError).message).toContain(text);
}

describe("thread retention in the service", () => {
  let h: Harness | undefined;
  const dirs: string[] = [];
  afterEach(async () => {
    await h?.close();
    h = undefined;
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  for (const kind of ["memory", "sqlite"] as const) {
    it(`sweeps an idle thread away and tells watchers it expired (${kind})`, async () => {
      const dir = mkdtempSync(join(tmpdir(), "windlass-ttl-"));
      dirs.push(dir);
      h = await startHarness({
        limits: { ttlSweepIntervalMs: 20 },
        ...(kind === "sqlite" ? { store: createSqliteStore(join(dir, "t.db")) } : {}),
      });
      const harness = h;
      const ac = new AbortController();
      const events = harness.service
        .watch(
          create(WatchRequestSchema, { threadIds: ["short"] }),
          harness.ctx({ signal: ac.signal }),
        )
        [Symbol.asyncIterator]();
      const added = await harness.service.add(
        addReq({ threadId: "short", messages: users("hi"), ttl: ms(300) }),
        harness.ctx(),
      );
      expect(added.thread?.ttl).toEqual(ms(300));
      const expireTime = added.thread?.expireTime;
      expect(expireTime).toBeDefined();
      // Wait for the event itself (the bound only fails a stuck run).
      let cleared: { reason: string } | undefined;
      const deadline = Date.now() + 15_000;
      while (cleared === undefined && Date.now() < deadline) {
        const next = await events.next();
        if (next.done === true) break;
        if (next.value.event.case === "threadCleared") cleared = next.value.event.value;
      }
      ac.abort();
      expect(cleared).toEqual(expect.objectContaining({ reason: "expired" }));
      // Not before its time: the sweep ran at or after the expire time.
      expect(Date.now()).toBeGreaterThanOrEqual(
        Number(expireTime?.seconds ?? 0n) * 1000 + (expireTime?.nanos ?? 0) / 1e6,
      );
      const after = await harness.service.get(getReq({ threadId: "short" }), harness.ctx());
      expect(after.thread).toBeUndefined();
      expect(after.messages).toEqual([]);
    });
  }

  it("checks ttl, applies the server's default to new threads, and counts ttl in request_id", async () => {
    h = await startHarness({ limits: { defaultTtlMs: 60_000 } });
    const harness = h;
    const add = (ttl: ReturnType<typeof ms> | undefined, requestId = "") =>
      harness.service.add(
        addReq({ threadId: "t", messages: users("x"), requestId, ...(ttl ? { ttl } : {}) }),
        harness.ctx(),
      );
    await invalid(
      add(create(DurationSchema, { seconds: 1n, nanos: 500 })),
      "ttl",
      "whole milliseconds",
    );
    await invalid(add(create(DurationSchema, { seconds: -1n })), "ttl", "from 0 to 10 years");
    await invalid(
      add(create(DurationSchema, { seconds: 11n * 365n * 86_400n })),
      "ttl",
      "from 0 to 10 years",
    );
    expect(await harness.store.getThread("", "t")).toBeUndefined();
    const first = await add(undefined);
    expect(first.thread?.ttl).toEqual(ms(60_000));
    const kept = await add(undefined);
    expect(kept.thread?.ttl).toEqual(ms(60_000));
    const off = await add(ms(0));
    expect(off.thread?.ttl).toBeUndefined();
    expect(off.thread?.expireTime).toBeUndefined();
    await add(ms(5000), "r1");
    await invalid(add(ms(6000), "r1"), "request_id", "different request");
  });
});
