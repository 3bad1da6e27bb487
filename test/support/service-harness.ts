import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  AddRequestSchema,
  type ChatMessage,
  ChatMessageSchema,
  GetRequestSchema,
  Role,
  StrategySchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import type { Strategy } from "../../src/core/types.js";
import { silentLogger } from "../../src/logger.js";
import type { ServerMetrics } from "../../src/metrics.js";
import type { CallContext } from "../../src/service/context.js";
import {
  createMemoryService,
  type MemoryService,
  type ServiceLimits,
} from "../../src/service/memory-service.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/store.js";
import { createExtractiveSummarizer } from "../../src/summarizer/extractive.js";
import { createOpenAiSummarizer } from "../../src/summarizer/openai.js";
import { createSummarizerRegistry } from "../../src/summarizer/registry.js";
import { type FakeLlm, startFakeLlm } from "./fake-llm.js";

/** A service over a real store, the extractive summariser and a fake model server ("openai"). */
export interface Harness {
  service: MemoryService;
  store: Store;
  llm: FakeLlm;
  ctx(over?: Partial<CallContext>): CallContext;
  close(): Promise<void>;
}

export const windowDefault: Strategy = {
  kind: "window",
  window: 20,
  excludeSystem: false,
  maxStored: 1000,
};

export async function startHarness(
  opts: {
    limits?: Partial<ServiceLimits>;
    store?: Store;
    openaiRetries?: number;
    metrics?: ServerMetrics;
  } = {},
): Promise<Harness> {
  const llm = await startFakeLlm();
  const store = opts.store ?? createMemoryStore();
  const summarizers = createSummarizerRegistry(
    [
      createExtractiveSummarizer(),
      createOpenAiSummarizer({
        baseUrl: llm.baseUrl,
        model: "fake",
        timeoutMs: 2000,
        maxRetries: opts.openaiRetries ?? 0,
        initialBackoffMs: 10,
      }),
    ],
    "extractive",
  );
  const service = createMemoryService({
    store,
    summarizers,
    defaultStrategy: windowDefault,
    logger: silentLogger,
    ...(opts.metrics === undefined ? {} : { metrics: opts.metrics }),
    limits: { foldRetryInitialMs: 50, foldRetryMaxMs: 200, getFoldWaitMs: 3000, ...opts.limits },
  });
  const controllers: AbortController[] = [];
  return {
    service,
    store,
    llm,
    ctx(over = {}) {
      const ac = new AbortController();
      controllers.push(ac);
      return { namespace: "", signal: ac.signal, deadline: undefined, ...over };
    },
    async close() {
      for (const c of controllers) c.abort(new Error("test over"));
      await service.close();
      await store.close();
      await llm.close();
    },
  };
}

export function msg(
  role: "system" | "user" | "assistant" | "tool",
  content: string,
  extra: {
    name?: string;
    toolCalls?: { id: string; name: string; arguments: string }[];
    toolCallId?: string;
    metadata?: Record<string, string>;
  } = {},
): ChatMessage {
  const roles = {
    system: Role.SYSTEM,
    user: Role.USER,
    assistant: Role.ASSISTANT,
    tool: Role.TOOL,
  };
  return create(ChatMessageSchema, { role: roles[role], content, ...extra });
}

export const users = (...contents: string[]) => contents.map((c) => msg("user", c));

export function addReq(init: MessageInitShape<typeof AddRequestSchema>) {
  return create(AddRequestSchema, init);
}

export function getReq(init: MessageInitShape<typeof GetRequestSchema> = {}) {
  return create(GetRequestSchema, init);
}

export function summaryStrategy(
  window: number,
  summarizeEvery: number,
  model = "openai",
  extra: { excludeSystem?: boolean; maxStored?: number } = {},
) {
  return create(StrategySchema, {
    kind: { case: "summary", value: { window, summarizeEvery, model } },
    ...extra,
  });
}

export function windowStrategy(window?: number, extra: { excludeSystem?: boolean } = {}) {
  return create(StrategySchema, { kind: { case: "window", value: { window } }, ...extra });
}

export function bufferStrategy(maxMessages?: number) {
  return create(StrategySchema, { kind: { case: "buffer", value: { maxMessages } } });
}

export const contents = (r: { messages: ChatMessage[] }) => r.messages.map((m) => m.content);

/** Waits for `cond`; the bound only fails a truly stuck run (generous for a loaded machine). */
export async function waitUntil(
  cond: () => boolean | Promise<boolean>,
  ms = 15_000,
): Promise<void> {
  const until = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > until) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 5));
  }
}
