import { type BaseMessage, SystemMessage } from "@langchain/core/messages";
import type { GetOptions, MemoryClient, StrategyInit } from "@windlass-memory/client";
import { createMiddleware } from "langchain";
import { z } from "zod";
import { fromChatMessage, toChatMessage } from "./convert.js";

export interface WindlassMemoryMiddlewareInput {
  /** A client from createMemoryClient (@windlass-memory/client). */
  client: MemoryClient;
  /** Strategy of the thread when the middleware creates it; an existing thread keeps its own. */
  strategy?: StrategyInit;
  /** A fixed thread; without it each run's `configurable.thread_id` names the thread. */
  threadId?: string;
  /** Options of every get (limit, allowStale, recall, profile, clearToolResults). */
  getOptions?: Omit<GetOptions, "signal">;
}

interface RunLike {
  configurable?: { thread_id?: unknown; [key: string]: unknown };
}

/**
 * A LangChain.js v1 agent middleware (createAgent) that keeps the agent's
 * conversation in a windlass-memory thread.
 *
 * Before each model call the messages of the run not stored yet (the user's
 * message, the model's tool calls, the tool results) are appended to the
 * thread in one Add, and the model is given the thread as the service
 * returns it (everything, a window, or a summary plus the recent turns)
 * instead of the state's messages (a summary joins the system prompt, after
 * it); after the run the final answer is appended. Invoke with only the new messages and
 * `{ configurable: { thread_id } }` (or pass `threadId`).
 */
export function windlassMemoryMiddleware(input: WindlassMemoryMiddlewareInput) {
  const { client, strategy, threadId, getOptions = {} } = input;
  if (threadId !== undefined && (typeof threadId !== "string" || threadId === "")) {
    throw new TypeError("windlassMemoryMiddleware: threadId must be a non-empty string");
  }
  const thread = (runtime: RunLike): string => {
    if (threadId !== undefined) return threadId;
    const id = runtime.configurable?.thread_id;
    if (typeof id !== "string" || id === "") {
      throw new Error(
        "windlassMemoryMiddleware needs a thread: invoke with { configurable: { thread_id } } or pass threadId",
      );
    }
    return id;
  };
  // The state's messages from index _windlassSaved on are not in the thread
  // yet; a private field (no input or output), fresh in every run without a
  // checkpointer, where the state holds only that run's messages.
  const save = async (
    state: { messages: Parameters<typeof toChatMessage>[0][]; _windlassSaved?: number },
    runtime: RunLike,
  ) => {
    const saved = state._windlassSaved ?? 0;
    if (saved >= state.messages.length) return undefined;
    const fresh = state.messages.slice(saved).map(toChatMessage);
    await client.add(thread(runtime), fresh, { strategy });
    return { _windlassSaved: state.messages.length };
  };
  return createMiddleware({
    name: "WindlassMemoryMiddleware",
    stateSchema: z.object({ _windlassSaved: z.number().optional() }),
    beforeModel: (state, runtime) => save(state, runtime),
    afterAgent: (state, runtime) => save(state, runtime),
    wrapModelCall: async (request, handler) => {
      const { messages } = await client.get(thread(request.runtime), getOptions);
      return handler(withThread(request, messages.map(fromChatMessage)));
    },
  });
}

/**
 * The request with the thread as its messages. The thread's leading system
 * messages (a summary thread's summary) join the agent's system prompt, after
 * it, so the model gets one system message, first: some providers take no other.
 */
function withThread<R extends { messages: BaseMessage[]; systemMessage: SystemMessage }>(
  request: R,
  recalled: BaseMessage[],
): R {
  const messages = [...recalled];
  const lead: string[] = [];
  while (messages[0] !== undefined && SystemMessage.isInstance(messages[0])) {
    lead.push((messages.shift() as BaseMessage).text);
  }
  if (lead.length === 0) return { ...request, messages };
  const text = lead.join("\n\n");
  const prompt = request.systemMessage;
  const systemMessage = prompt.text === "" ? new SystemMessage(text) : prompt.concat(`\n\n${text}`);
  return { ...request, messages, systemMessage };
}
