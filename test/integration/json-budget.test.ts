import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AppHarness, startAppHarness } from "./app-harness.js";

/**
 * The JSON a curl user sees for token budgets (README "Token budgets"):
 * `tokens` and `maxTokens` are there, `overBudget` only when it is true,
 * since proto3 JSON leaves out fields at their default.
 */
let h: AppHarness;
beforeAll(async () => {
  h = await startAppHarness();
});
afterAll(async () => {
  await h.close();
});

async function call(method: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(
    `http://127.0.0.1:${h.app.httpPort}/windlass.memory.v1.MemoryService/${method}`,
    { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) },
  );
  const json = (await res.json()) as Record<string, unknown>;
  expect(res.status, JSON.stringify(json)).toBe(200);
  return json;
}

describe("a Get with a token budget, in Connect JSON", () => {
  it("has tokens and maxTokens, and overBudget only when the list is over the budget", async () => {
    await call("Add", {
      threadId: "t1",
      strategy: { window: { window: 20, maxTokens: 8000 } },
      messages: [
        { role: "ROLE_USER", content: "What is the weather in Oslo?" },
        {
          role: "ROLE_ASSISTANT",
          toolCalls: [{ id: "c1", name: "weather", arguments: '{"city":"Oslo"}' }],
        },
        { role: "ROLE_TOOL", toolCallId: "c1", content: "rain" },
      ],
    });
    const within = await call("Get", { threadId: "t1", maxTokens: 2000 });
    expect(within).toMatchObject({ maxTokens: 2000 });
    expect(within.tokens).toBeGreaterThan(0);
    expect(within).not.toHaveProperty("overBudget");

    // Room for the tool result alone: widened back to its call, the list is over.
    const messages = within.messages as { tokens: number }[];
    const last = messages.at(-1)?.tokens ?? 0;
    const over = await call("Get", { threadId: "t1", maxTokens: last });
    expect(over).toMatchObject({ maxTokens: last, overBudget: true });
    expect(over.tokens).toBeGreaterThan(last);
  });
});
