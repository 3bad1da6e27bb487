import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterEach, describe, expect, it } from "vitest";
import { StrategySchema } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { MemoryError } from "../../src/core/errors.js";
import { createSqliteStore } from "../../src/store/sqlite/index.js";
import {
  addReq,
  bufferStrategy,
  contents,
  getReq,
  type Harness,
  startHarness,
  summaryStrategy,
  users,
  waitUntil,
  windowStrategy,
} from "../support/service-harness.js";

/**
 * GetRequest.recall and AddRequest.keep_strategy: memory objects that each
 * read a shared thread with their own strategy, as the original module's
 * objects each applied their own window (README, Semantics: Own views).
 */

let h: Harness | undefined;
let dir: string | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

async function codeOf(p: Promise<unknown>): Promise<MemoryError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(MemoryError);
    return err as MemoryError;
  }
  throw new Error("expected an error");
}

const range = (n: number, prefix = "m") => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

describe("GetRequest.recall", () => {
  it("runs the original's window examples in order on one default thread", async () => {
    h = await startHarness();
    const ctx = h.ctx();
    await h.service.add(
      addReq({
        strategy: windowStrategy(2),
        keepStrategy: true,
        messages: users("one", "two", "three"),
      }),
      ctx,
    );
    const own2 = await h.service.get(getReq({ recall: windowStrategy(2) }), ctx);
    expect(contents(own2)).toEqual(["two", "three"]);

    // WindowMemory(window=1) on the same thread: its Add keeps the thread's
    // strategy instead of failing, and its Get reads with its own window.
    const added = await h.service.add(
      addReq({ strategy: windowStrategy(1), keepStrategy: true, messages: users("a", "b") }),
      ctx,
    );
    expect(added.lastSeq).toBe(5n);
    expect(added.thread?.strategy?.kind).toMatchObject({ case: "window", value: { window: 2 } });
    expect(contents(await h.service.get(getReq({ recall: windowStrategy(1) }), ctx))).toEqual([
      "b",
    ]);
    // Nobody's view changed anybody else's: the thread still reads as window(2).
    expect(contents(await h.service.get(getReq(), ctx))).toEqual(["a", "b"]);
    expect(contents(await h.service.get(getReq({ recall: windowStrategy(2) }), ctx))).toEqual([
      "a",
      "b",
    ]);
  });

  it("reads a thread as a buffer, a window or a ceiling whatever its strategy", async () => {
    h = await startHarness();
    const ctx = h.ctx();
    await h.service.add(addReq({ strategy: windowStrategy(2), messages: users(...range(6)) }), ctx);
    const all = await h.service.get(getReq({ recall: bufferStrategy() }), ctx);
    expect(contents(all)).toEqual(range(6));
    const ceiling = await h.service.get(getReq({ recall: bufferStrategy(4) }), ctx);
    expect(contents(ceiling)).toEqual(["m2", "m3", "m4", "m5"]);
    // limit still overrides the recall's size, as it does the thread's.
    const limited = await h.service.get(getReq({ recall: windowStrategy(5), limit: 1 }), ctx);
    expect(contents(limited)).toEqual(["m5"]);
    // The recall's exclude_system is the reader's, not the thread's.
    await h.service.add(
      addReq({ threadId: "sys", strategy: bufferStrategy(), messages: users("x") }),
      ctx,
    );
    const noSystem = create(StrategySchema, {
      kind: { case: "buffer", value: {} },
      excludeSystem: true,
    });
    expect(
      contents(await h.service.get(getReq({ threadId: "sys", recall: noSystem }), ctx)),
    ).toEqual(["x"]);
  });

  it("reads a window wider than the thread's from a store that reads windows (SQLite)", async () => {
    dir = mkdtempSync(join(tmpdir(), "recall-"));
    h = await startHarness({ store: createSqliteStore(join(dir, "m.db")) });
    const ctx = h.ctx();
    await h.service.add(
      addReq({ strategy: windowStrategy(2), messages: users(...range(60)) }),
      ctx,
    );
    const wide = await h.service.get(getReq({ recall: windowStrategy(50) }), ctx);
    expect(contents(wide)).toEqual(range(60).slice(10));
    expect(wide.messages[0]?.seq).toBe(11n);
  });

  it("gives a summary recall on a window thread the window part, and folds nothing", async () => {
    h = await startHarness();
    const ctx = h.ctx();
    await h.service.add(
      addReq({ strategy: windowStrategy(20), messages: users(...range(8)) }),
      ctx,
    );
    const r = await h.service.get(getReq({ recall: summaryStrategy(2, 2) }), ctx);
    expect(contents(r)).toEqual(["m6", "m7"]);
    expect(r.summary).toBe("");
    const whole = await h.service.get(getReq({ recall: summaryStrategy(0, 2) }), ctx);
    expect(contents(whole)).toEqual(range(8));
    expect(h.llm.requests).toHaveLength(0);
    expect((await h.store.getThread("", "default"))?.summarizedThroughSeq).toBe(0);
  });

  it("reads a summary thread with the recall's window, folding at that size", async () => {
    h = await startHarness();
    const ctx = h.ctx();
    // Window 4, every 2: six messages leave two outside, so one fold of m0, m1.
    h.llm.push({ reply: "first fold" });
    await h.service.add(
      addReq({ strategy: summaryStrategy(4, 2), messages: users(...range(6)) }),
      ctx,
    );
    const h0 = h;
    await waitUntil(
      async () => (await h0.store.getThread("", "default"))?.summary === "first fold",
    );
    // A reader with window 2 waits for the fold its size makes due (m2, m3).
    h.llm.push({ reply: "second fold" });
    const own = await h.service.get(getReq({ recall: summaryStrategy(2, 99, "ignored") }), ctx);
    expect(contents(own)).toEqual([
      "Summary of the earlier conversation:\nsecond fold",
      "m4",
      "m5",
    ]);
    expect(h.llm.requests).toHaveLength(2);
    // The thread's strategy did not change.
    expect(own.thread?.strategy?.kind).toMatchObject({
      case: "summary",
      value: { window: 4, summarizeEvery: 2, model: "openai" },
    });
    // A window reader of the summary thread sees the newest messages, folded or not.
    const win = await h.service.get(getReq({ recall: windowStrategy(5) }), ctx);
    expect(contents(win)).toEqual(["m1", "m2", "m3", "m4", "m5"]);
    expect(win.summary).toBe("");
  });

  it("refuses a recall without a kind or with bad sizes, naming the field", async () => {
    h = await startHarness();
    const ctx = h.ctx();
    const noKind = await codeOf(h.service.get(getReq({ recall: create(StrategySchema, {}) }), ctx));
    expect([noKind.code, noKind.field]).toEqual(["invalid_argument", "recall"]);
    const zero = await codeOf(
      h.service.get(
        getReq({
          recall: create(StrategySchema, { kind: { case: "window", value: { window: 0 } } }),
        }),
        ctx,
      ),
    );
    expect([zero.code, zero.field]).toEqual(["invalid_argument", "recall.window.window"]);
    const enc = await codeOf(
      h.service.get(
        getReq({
          recall: create(StrategySchema, {
            kind: { case: "summary", value: { tokenEncoding: "nope" } },
          }),
        }),
        ctx,
      ),
    );
    expect([enc.code, enc.field]).toEqual(["invalid_argument", "recall.summary.token_encoding"]);
  });
});

describe("AddRequest.keep_strategy", () => {
  it("keeps an existing thread's strategy, and creates a new thread with the given one", async () => {
    h = await startHarness();
    const ctx = h.ctx();
    const created = await h.service.add(
      addReq({
        threadId: "k",
        strategy: bufferStrategy(),
        keepStrategy: true,
        messages: users("a"),
      }),
      ctx,
    );
    expect(created.thread?.strategy?.kind.case).toBe("buffer");
    const kept = await h.service.add(
      addReq({
        threadId: "k",
        strategy: summaryStrategy(2, 2),
        keepStrategy: true,
        messages: users("b"),
      }),
      ctx,
    );
    expect(kept.thread?.strategy?.kind.case).toBe("buffer");
    expect([kept.firstSeq, kept.lastSeq]).toEqual([2n, 2n]);
    // With no messages it stores nothing and answers with the thread as it is.
    const nothing = await h.service.add(
      addReq({ threadId: "k", strategy: windowStrategy(4), keepStrategy: true }),
      ctx,
    );
    expect(nothing.thread?.strategy?.kind.case).toBe("buffer");
    expect([nothing.firstSeq, nothing.lastSeq, nothing.thread?.lastSeq]).toEqual([0n, 0n, 2n]);
    // Without it, a differing strategy is still refused.
    const refused = await codeOf(
      h.service.add(
        addReq({ threadId: "k", strategy: windowStrategy(3), messages: users("c") }),
        ctx,
      ),
    );
    expect([refused.code, refused.field]).toEqual(["failed_precondition", "strategy"]);
  });

  it("replays a retried keep_strategy Add once, and tells it from the same id without it", async () => {
    h = await startHarness();
    const ctx = h.ctx();
    await h.service.add(
      addReq({ threadId: "r", strategy: windowStrategy(2), messages: users("a") }),
      ctx,
    );
    const req = () =>
      addReq({
        threadId: "r",
        strategy: windowStrategy(1),
        keepStrategy: true,
        requestId: "once",
        messages: users("b"),
      });
    const first = await h.service.add(req(), ctx);
    const again = await h.service.add(req(), ctx);
    expect(again.lastSeq).toBe(first.lastSeq);
    expect((await h.store.getThread("", "r"))?.lastSeq).toBe(2);
    const other = await codeOf(
      h.service.add(
        addReq({
          threadId: "r",
          requestId: "once",
          strategy: windowStrategy(1),
          messages: users("b"),
        }),
        ctx,
      ),
    );
    expect([other.code, other.field]).toEqual(["invalid_argument", "request_id"]);
  });

  it("is refused with replace_strategy", async () => {
    h = await startHarness();
    const e = await codeOf(
      h.service.add(
        addReq({
          strategy: windowStrategy(2),
          keepStrategy: true,
          replaceStrategy: true,
          messages: users("a"),
        }),
        h.ctx(),
      ),
    );
    expect([e.code, e.field]).toEqual(["invalid_argument", "keep_strategy"]);
  });
});
