import { getEventListeners } from "node:events";
import { afterEach, describe, expect, it } from "vitest";
import type { ChatMessage } from "../../src/core/types.js";
import {
  createOpenAiSummarizer,
  type OpenAiSummarizerOptions,
  SummarizerError,
} from "../../src/summarizer/openai.js";
import { type FakeLlm, type FakeStep, startFakeLlm } from "../support/fake-llm.js";
import { watchTimersOf } from "../support/held-timers.js";

const API_KEY = "sk-test-0123456789-secret";
const SECRET_TEXT = "my card number is 4111 1111 1111 1111";

const messages: ChatMessage[] = [
  { role: "user", content: `Hello.\n${SECRET_TEXT}` },
  {
    role: "assistant",
    content: "",
    toolCalls: [{ id: "c1", name: "lookup", arguments: '{"q":1}' }],
  },
  { role: "tool", content: "found it", toolCallId: "c1" },
  { role: "assistant", content: "Done.", name: "helper" },
];
const input = { previousSummary: "The user greeted us.", messages };

let llm: FakeLlm | undefined;
afterEach(async () => {
  await llm?.close();
  llm = undefined;
});

async function setup(
  script: FakeStep[],
  options: Partial<OpenAiSummarizerOptions> = {},
): Promise<{ llm: FakeLlm; summarize: (signal?: AbortSignal) => Promise<string> }> {
  const server = await startFakeLlm({ script });
  llm = server;
  const summarizer = createOpenAiSummarizer({
    baseUrl: server.baseUrl,
    model: "fake-model",
    apiKey: API_KEY,
    timeoutMs: 2000,
    maxRetries: 2,
    initialBackoffMs: 1,
    maxBackoffMs: 5,
    ...options,
  });
  return {
    llm: server,
    summarize: (signal = new AbortController().signal) => summarizer.summarize(input, signal),
  };
}

/** Runs `promise`, expecting a rejection; returns the reason. */
async function failure(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error("expected a rejection");
}

async function waitFor(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** The error is a SummarizerError whose message leaks neither secrets nor contents. */
function expectSafeError(err: unknown): SummarizerError {
  expect(err).toBeInstanceOf(SummarizerError);
  const message = (err as SummarizerError).message;
  expect(message).not.toContain(API_KEY);
  expect(message).not.toContain("4111");
  expect(message).not.toContain("found it");
  expect(message).not.toContain("BODY-TEXT");
  return err as SummarizerError;
}

describe("openai summarizer: request", () => {
  it("posts a chat completion with the model, the key and a progressive prompt", async () => {
    const { llm, summarize } = await setup([{ reply: "  The user shared a card number.\n" }]);
    expect(await summarize()).toBe("The user shared a card number.");

    expect(llm.requests).toHaveLength(1);
    const [request] = llm.requests;
    expect(request?.method).toBe("POST");
    expect(request?.path).toBe("/v1/chat/completions");
    expect(request?.headers.authorization).toBe(`Bearer ${API_KEY}`);
    expect(request?.headers["content-type"]).toBe("application/json");
    const body = request?.body;
    expect(body?.model).toBe("fake-model");
    expect(body?.temperature).toBe(0);
    expect(body?.messages.map((m) => m.role)).toEqual(["system", "user"]);
    expect(body?.messages[0]?.content).toContain("summary");
    const prompt = body?.messages[1]?.content ?? "";
    expect(prompt).toContain("The user greeted us.");
    expect(prompt).toContain(`user: Hello.\n  ${SECRET_TEXT}`);
    expect(prompt).toContain('assistant called tool lookup with arguments {"q":1}');
    expect(prompt).toContain("tool result (lookup): found it");
    expect(prompt).toContain("assistant (helper): Done.");
    // Oldest first, after the previous summary.
    expect(prompt.indexOf("The user greeted us.")).toBeLessThan(prompt.indexOf("user: Hello."));
    expect(prompt.indexOf("user: Hello.")).toBeLessThan(prompt.indexOf("Done."));
  });

  it.each([
    ["no key", undefined],
    ["an empty key", ""],
  ])("sends no authorization header with %s", async (_label, apiKey) => {
    const { llm, summarize } = await setup([], { apiKey });
    await summarize();
    expect(llm.requests[0]?.headers.authorization).toBeUndefined();
  });

  it("accepts a base URL with a trailing slash", async () => {
    const server = await startFakeLlm();
    llm = server;
    const summarizer = createOpenAiSummarizer({ baseUrl: `${server.baseUrl}/`, model: "m" });
    await summarizer.summarize(input, new AbortController().signal);
    expect(server.requests[0]?.path).toBe("/v1/chat/completions");
  });

  it('says "(none)" when there is no previous summary', async () => {
    const server = await startFakeLlm();
    llm = server;
    const summarizer = createOpenAiSummarizer({ baseUrl: server.baseUrl, model: "m" });
    await summarizer.summarize({ previousSummary: "", messages }, new AbortController().signal);
    expect(server.requests[0]?.body?.messages[1]?.content).toMatch(/Summary so far:\n\(none\)\n/);
  });

  it("cuts a reply longer than maxSummaryChars and asks the model for that bound", async () => {
    const { llm, summarize } = await setup([{ reply: "x".repeat(500) }], { maxSummaryChars: 100 });
    expect(await summarize()).toBe("x".repeat(100));
    expect(llm.requests[0]?.body?.messages[0]?.content).toContain("at most 100 characters");
  });
});

describe("openai summarizer: retries", () => {
  it("retries server errors and then succeeds", async () => {
    const { llm, summarize } = await setup([{ status: 500 }, { status: 503 }, { reply: "ok" }]);
    expect(await summarize()).toBe("ok");
    expect(llm.requests).toHaveLength(3);
  });

  it.each<[string, FakeStep]>([
    ["a body that is not JSON", { malformed: true }],
    ["a reply without choices", { status: 200, body: '{"choices":[]}' }],
    ["a reply without content", { status: 200, body: '{"choices":[{"message":{}}]}' }],
    ["an empty reply", { reply: "  \n " }],
    ["HTTP 408", { status: 408 }],
    ["HTTP 429", { status: 429 }],
  ])("retries after %s", async (_label, fault) => {
    const { llm, summarize } = await setup([fault, { reply: "recovered" }]);
    expect(await summarize()).toBe("recovered");
    expect(llm.requests).toHaveLength(2);
  });

  it("gives up after maxRetries with a safe SummarizerError", async () => {
    const { llm, summarize } = await setup([], { maxRetries: 2 });
    llm.setFallback({ status: 503, body: `BODY-TEXT ${API_KEY} ${SECRET_TEXT}` });
    const err = expectSafeError(await failure(summarize()));
    expect(llm.requests).toHaveLength(3);
    expect(err).toMatchObject({ kind: "http", status: 503, attempts: 3, retryable: true });
    expect(err.message).toBe(
      'summarizer "openai" (model fake-model) failed: HTTP 503 Service Unavailable (3 attempts)',
    );
  });

  it("makes a single attempt with maxRetries 0", async () => {
    const { llm, summarize } = await setup([{ malformed: true }], { maxRetries: 0 });
    const err = expectSafeError(await failure(summarize()));
    expect(err).toMatchObject({ kind: "malformed", attempts: 1 });
    expect(err.message).toContain("(1 attempt)");
    expect(llm.requests).toHaveLength(1);
  });

  it.each([400, 401, 403, 404, 422])("does not retry HTTP %i", async (status) => {
    const { llm, summarize } = await setup([
      { status, body: `{"error":{"message":"BODY-TEXT Incorrect API key provided: ${API_KEY}"}}` },
      { reply: "never reached" },
    ]);
    const err = expectSafeError(await failure(summarize()));
    expect(err).toMatchObject({ kind: "http", status, attempts: 1, retryable: false });
    expect(err.message).toContain(`HTTP ${status}`);
    expect(llm.requests).toHaveLength(1);
  });

  it("honours Retry-After up to maxBackoffMs", async () => {
    const { llm, summarize } = await setup(
      [{ status: 429, headers: { "retry-after": "30" } }, { reply: "ok" }],
      { maxBackoffMs: 300 },
    );
    const started = Date.now();
    expect(await summarize()).toBe("ok");
    const elapsed = Date.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(280);
    // Retry-After asked for 30 s.
    expect(elapsed).toBeLessThan(5_000);
    expect(llm.requests).toHaveLength(2);
  });

  it("reports network errors by code, after retrying", async () => {
    const closed = await startFakeLlm();
    await closed.close();
    const summarizer = createOpenAiSummarizer({
      baseUrl: closed.baseUrl,
      model: "m",
      apiKey: API_KEY,
      maxRetries: 1,
      initialBackoffMs: 1,
    });
    const err = expectSafeError(
      await failure(summarizer.summarize(input, new AbortController().signal)),
    );
    expect(err).toMatchObject({ kind: "network", attempts: 2, status: undefined });
    expect(err.message).toContain("network error (ECONNREFUSED)");
  });
});

describe("openai summarizer: timeouts and cancellation", () => {
  it("bounds each attempt by timeoutMs when the server hangs", async () => {
    const { llm, summarize } = await setup([{ hang: true }, { hang: true }], {
      timeoutMs: 200,
      maxRetries: 1,
    });
    const started = Date.now();
    const err = expectSafeError(await failure(summarize()));
    const elapsed = Date.now() - started;
    expect(err).toMatchObject({ kind: "timeout", attempts: 2 });
    expect(err.message).toContain("timed out after 200 ms");
    expect(llm.requests).toHaveLength(2);
    expect(elapsed).toBeGreaterThanOrEqual(380);
    // Unbounded, the hung requests would never end.
    expect(elapsed).toBeLessThan(5_000);
  });

  it("bounds the body too: a reply that stalls after its headers times out", async () => {
    const { summarize } = await setup([{ hang: true, afterHeaders: true }], {
      timeoutMs: 200,
      maxRetries: 0,
    });
    const err = expectSafeError(await failure(summarize()));
    expect(err).toMatchObject({ kind: "timeout", attempts: 1 });
  });

  it("retries a reply slower than timeoutMs and takes the next one", async () => {
    const { llm, summarize } = await setup([{ reply: "late", delayMs: 1000 }, { reply: "fast" }], {
      timeoutMs: 200,
    });
    expect(await summarize()).toBe("fast");
    expect(llm.requests).toHaveLength(2);
  });

  it("ends a hung request promptly when the caller aborts", async () => {
    const { llm, summarize } = await setup([{ hang: true }], { timeoutMs: 10_000 });
    const controller = new AbortController();
    const pending = failure(summarize(controller.signal));
    await waitFor(() => llm.requests.length === 1);
    const abortedAt = Date.now();
    const reason = new Error("client went away");
    controller.abort(reason);
    expect(await pending).toBe(reason);
    expect(Date.now() - abortedAt).toBeLessThan(2_000);
    expect(llm.requests).toHaveLength(1);
  });

  it("ends a backoff promptly when the caller aborts", async () => {
    const { llm, summarize } = await setup([{ status: 500 }, { reply: "too late" }], {
      initialBackoffMs: 10_000,
      maxBackoffMs: 10_000,
    });
    const controller = new AbortController();
    const pending = failure(summarize(controller.signal));
    // Once the 500 is out, the summariser reads it and sleeps before its retry.
    await waitFor(() => llm.answered() === 1);
    const abortedAt = Date.now();
    controller.abort();
    const err = await pending;
    expect(err).toMatchObject({ name: "AbortError" });
    expect(err).not.toBeInstanceOf(SummarizerError);
    expect(Date.now() - abortedAt).toBeLessThan(2_000);
    expect(llm.requests).toHaveLength(1);
  });
});

describe("openai summarizer: the attempt timer", () => {
  it("clears its timer and its listener on the caller's signal however an attempt ends", async () => {
    const { llm, summarize } = await setup([], { timeoutMs: 60_000, maxRetries: 0 });
    // One long-lived caller signal, as a server's shutdown signal would be.
    const caller = new AbortController();
    const timers = watchTimersOf(60_000);
    try {
      const during: number[] = [];
      llm.setFallback({
        route: () => {
          during.push(timers.pending());
          return { reply: "ok" };
        },
      });
      expect(await summarize(caller.signal)).toBe("ok");
      llm.setFallback({ status: 400 });
      await failure(summarize(caller.signal));
      llm.setFallback({ malformed: true });
      await failure(summarize(caller.signal));
      // While an attempt runs its timer is armed (held, so it fires); after,
      // every attempt's timer has been cleared.
      expect(during).toEqual([1]);
      expect(timers.armed).toHaveLength(3);
      for (const timer of timers.armed) expect(timers.cleared.has(timer)).toBe(true);
      expect(getEventListeners(caller.signal, "abort")).toHaveLength(0);
    } finally {
      timers.restore();
    }
  });
});

describe("openai summarizer: configuration", () => {
  it.each<[string, Partial<OpenAiSummarizerOptions>]>([
    ["a base URL that is not a URL", { baseUrl: "not a url" }],
    ["a non-http base URL", { baseUrl: "ftp://example.com/v1" }],
    ["an empty model", { model: "" }],
    ["a zero timeout", { timeoutMs: 0 }],
    ["negative retries", { maxRetries: -1 }],
    ["a backoff ceiling below the initial backoff", { initialBackoffMs: 100, maxBackoffMs: 10 }],
  ])("rejects %s", (_label, bad) => {
    expect(() =>
      createOpenAiSummarizer({ baseUrl: "http://127.0.0.1:1/v1", model: "m", ...bad }),
    ).toThrow(/summarizer "openai"/);
  });

  it("rejects credentials in the base URL without echoing them", () => {
    expect(() =>
      createOpenAiSummarizer({ baseUrl: "http://user:hunter2@127.0.0.1:1/v1", model: "m" }),
    ).toThrow(expect.objectContaining({ message: expect.not.stringContaining("hunter2") }));
  });

  it("takes its name from the options", () => {
    const summarizer = createOpenAiSummarizer({
      name: "local-llama",
      baseUrl: "http://127.0.0.1:1/v1",
      model: "m",
    });
    expect(summarizer.name).toBe("local-llama");
  });
});
