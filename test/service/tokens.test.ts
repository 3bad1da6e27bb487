import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { countTokens as cl100k } from "gpt-tokenizer/encoding/cl100k_base";
import { countTokens as o200k } from "gpt-tokenizer/encoding/o200k_base";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  addReq,
  getReq,
  type Harness,
  msg,
  startHarness,
  users,
} from "../support/service-harness.js";

describe("MemoryService: token counts", () => {
  let h: Harness;
  beforeEach(async () => {
    h = await startHarness();
  });
  afterEach(async () => h.close());

  it("counts each message once at Add with the strategy's encoding and stores the count", async () => {
    const text = "数据库连接池的最大连接数";
    await h.service.add(
      addReq({
        threadId: "cl",
        strategy: { kind: { case: "window", value: { tokenEncoding: "cl100k_base" } } },
        messages: users(text),
      }),
      h.ctx(),
    );
    await h.service.add(addReq({ threadId: "o", messages: users(text) }), h.ctx());
    const cl = await h.store.read(h.ctx().namespace, "cl");
    const o = await h.store.read(h.ctx().namespace, "o");
    expect(cl?.messages[0]).toMatchObject({
      tokens: 3 + cl100k(text),
      tokenEncoding: "cl100k_base",
    });
    expect(o?.messages[0]?.tokens).toBe(3 + o200k(text));
    expect(o?.messages[0]?.tokenEncoding).toBeUndefined();
    const got = await h.service.get(getReq({ threadId: "cl" }), h.ctx());
    expect(got.tokens).toBe(3 + cl100k(text));
    expect(got.messages[0]?.tokens).toBe(3 + cl100k(text));
  });

  it("stores a message whose text names a special token, counted as plain text", async () => {
    // Before: gpt-tokenizer refused the text and the Add failed as internal.
    const text = "what does <|endoftext|> do?";
    await h.service.add(addReq({ threadId: "special", messages: users(text) }), h.ctx());
    const got = await h.service.get(getReq({ threadId: "special" }), h.ctx());
    expect(got.messages[0]?.content).toBe(text);
    expect(got.tokens).toBe(3 + o200k(text, { disallowedSpecial: new Set() }));
  });

  it("counts a message stored without a count when a Get needs it", async () => {
    // As a message stored before counting existed: straight into the store.
    await h.store.append({
      namespace: h.ctx().namespace,
      threadId: "legacy",
      messages: [{ role: "user", content: "stored before counts" }],
      strategy: undefined,
      defaultStrategy: { kind: "window", window: 20, excludeSystem: false, maxStored: 1000 },
      replaceStrategy: false,
      requestId: "",
      requestHash: "",
      expectedLastSeq: undefined,
      now: Date.now(),
    });
    const got = await h.service.get(getReq({ threadId: "legacy", maxTokens: 100 }), h.ctx());
    expect(got.tokens).toBe(3 + o200k("stored before counts"));
    expect(got.messages[0]?.tokens).toBe(3 + o200k("stored before counts"));
    expect(got.maxTokens).toBe(100);
  });

  it("lets other work run while it counts a large message", async () => {
    // About 1 MiB of varied text without spaces: well over one 10 ms slice of counting.
    let text = "";
    for (let i = 0; text.length < 1 << 20; i++)
      text += String.fromCharCode(0x4e00 + ((i * 7919) % 3000));
    let turns = 0;
    let adding = true;
    const ticker = (async () => {
      while (adding) {
        await yieldToEventLoop();
        turns += 1;
      }
    })();
    const turnsBefore = turns;
    await h.service.add(addReq({ threadId: "big", messages: [msg("user", text)] }), h.ctx());
    const turnsDuring = turns - turnsBefore;
    adding = false;
    await ticker;
    // Counted in one piece the event loop would not turn until the Add's store write.
    expect(turnsDuring).toBeGreaterThanOrEqual(3);
    const got = await h.service.get(getReq({ threadId: "big" }), h.ctx());
    expect(got.tokens).toBeGreaterThan(1000);
  });

  it("stops counting and stores nothing when the call is cancelled", async () => {
    let text = "";
    for (let i = 0; text.length < 1 << 20; i++)
      text += String.fromCharCode(0x4e00 + ((i * 7919) % 3000));
    const cancel = new AbortController();
    const adding = h.service.add(
      addReq({ threadId: "cancelled", messages: [msg("user", text)] }),
      h.ctx({ signal: cancel.signal }),
    );
    cancel.abort(new Error("cancelled by the client"));
    await expect(adding).rejects.toThrow("cancelled by the client");
    expect(await h.store.read(h.ctx().namespace, "cancelled")).toBeUndefined();
  });

  it("makes no call signal for an Add of short messages (it costs a timer per call)", async () => {
    const base = h.ctx();
    // The transports make a call's signal when it is first read; reading it here would throw.
    const ctx = {
      namespace: base.namespace,
      deadline: undefined,
      get signal(): AbortSignal {
        throw new Error("the signal was read");
      },
    };
    const done = await h.service.add(
      addReq({ threadId: "short", messages: [msg("user", "hello there"), msg("assistant", "hi")] }),
      ctx,
    );
    expect(done.lastSeq).toBe(2n);
  });
});
