import { BaseListChatMessageHistory } from "@langchain/core/chat_history";
import type { BaseMessage } from "@langchain/core/messages";
import type { GetOptions, MemoryClient, StrategyInit } from "@windlass-memory/client";
import { fromChatMessage, toChatMessage } from "./convert.js";

export interface WindlassChatMessageHistoryInput {
  /** A client from createMemoryClient (@windlass-memory/client). */
  client: MemoryClient;
  /** The thread (LangChain's session id). */
  threadId: string;
  /** Strategy of the thread when this history creates it; an existing thread keeps its own. */
  strategy?: StrategyInit;
  /** Options of every get (limit, allowStale, recall, profile, clearToolResults). */
  getOptions?: Omit<GetOptions, "signal">;
}

/**
 * LangChain.js chat history kept in a windlass-memory thread.
 *
 * getMessages() returns the thread as its strategy shapes it: everything,
 * the newest window, or for the summary strategy a SystemMessage with the
 * summary followed by the recent messages. addMessages() stores its messages
 * in one Add (all or none, retried safely after UNAVAILABLE).
 */
export class WindlassChatMessageHistory extends BaseListChatMessageHistory {
  lc_namespace = ["windlass_memory", "langchain"];
  readonly client: MemoryClient;
  readonly threadId: string;
  readonly #strategy: StrategyInit | undefined;
  readonly #getOptions: Omit<GetOptions, "signal">;

  constructor(input: WindlassChatMessageHistoryInput) {
    super();
    if (typeof input.threadId !== "string" || input.threadId === "") {
      throw new TypeError("WindlassChatMessageHistory: threadId must be a non-empty string");
    }
    this.client = input.client;
    this.threadId = input.threadId;
    this.#strategy = input.strategy;
    this.#getOptions = input.getOptions ?? {};
  }

  override async getMessages(): Promise<BaseMessage[]> {
    const { messages } = await this.client.get(this.threadId, this.#getOptions);
    return messages.map(fromChatMessage);
  }

  override async addMessage(message: BaseMessage): Promise<void> {
    await this.addMessages([message]);
  }

  override async addMessages(messages: BaseMessage[]): Promise<void> {
    const converted = messages.map(toChatMessage);
    if (converted.length === 0) return;
    await this.client.add(this.threadId, converted, { strategy: this.#strategy });
  }

  override async clear(): Promise<void> {
    await this.client.clear(this.threadId);
  }
}
