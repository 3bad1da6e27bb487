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
  /** Options of every get (limit, allowStale). */
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
 * instead of the state's messages; after the run the final answer is
 * appended. Invoke with only the new messages and
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
      return handler({ ...request, messages: messages.map(fromChatMessage) });
    },
  });
}
