import type { AgentInputItem, Session } from "@openai/agents";
import {
  createMemoryClient,
  type MemoryClient,
  type MemoryClientOptions,
  type StrategyInit,
} from "@windlass-memory/client";
import { toItem, toMessage } from "./items.js";

/** How a WindlassSession reaches the server and shapes its thread. */
export interface WindlassSessionOptions extends Partial<MemoryClientOptions> {
  /**
   * The server's gRPC URL, e.g. "http://127.0.0.1:50051". Default: the
   * WINDLASS_MEMORY_TARGET environment variable (host:port), else
   * 127.0.0.1:50051.
   */
  baseUrl?: string;
  /** A client of your own instead (not closed by close()). */
  client?: MemoryClient;
  /**
   * Strategy of a new thread (an existing thread keeps its own). getItems()
   * without a limit returns the thread as its strategy shapes it: a window,
   * or a summary thread's summary (a system item) and its newest items.
   * Default: the server's default strategy.
   */
  strategy?: StrategyInit;
}

const DEFAULT_TARGET = "127.0.0.1:50051";

function defaultBaseUrl(): string {
  const target = process.env.WINDLASS_MEMORY_TARGET || DEFAULT_TARGET;
  return /^[a-z]+:\/\//.test(target) ? target : `http://${target}`;
}

/** The Agents SDK's Session over one windlass-memory thread (the session id). */
export class WindlassSession implements Session {
  readonly #sessionId: string;
  readonly #client: MemoryClient;
  readonly #ownsClient: boolean;
  readonly #strategy: StrategyInit | undefined;

  constructor(sessionId: string, options: WindlassSessionOptions = {}) {
    if (typeof sessionId !== "string" || sessionId === "") {
      throw new TypeError("sessionId: expected a non-empty string (the thread id)");
    }
    const { client, strategy, ...clientOptions } = options;
    this.#sessionId = sessionId;
    this.#strategy = strategy;
    this.#ownsClient = client === undefined;
    this.#client =
      client ??
      createMemoryClient({ ...clientOptions, baseUrl: options.baseUrl ?? defaultBaseUrl() });
  }

  async getSessionId(): Promise<string> {
    return this.#sessionId;
  }

  /** The items, oldest first: the thread as its strategy shapes it; with `limit`, the newest `limit` stored items. */
  async getItems(limit?: number): Promise<AgentInputItem[]> {
    if (limit !== undefined) {
      return (await this.#client.newest(this.#sessionId, Math.max(0, limit))).map(toItem);
    }
    return (await this.#client.get(this.#sessionId)).messages.map(toItem);
  }

  /** Appends the items in one add: all or none are stored, once, even when retried. */
  async addItems(items: AgentInputItem[]): Promise<void> {
    const messages = items.map((item, i) => toMessage(item, `items[${i}]`));
    if (messages.length === 0) return;
    await this.#client.add(this.#sessionId, messages, {
      ...(this.#strategy === undefined ? {} : { strategy: this.#strategy }),
      keepStrategy: this.#strategy !== undefined,
    });
  }

  /**
   * Removes and returns the newest item: a Rewind guarded by
   * expected_last_seq, so an item another run added meanwhile is never
   * removed unseen (MemoryClient.pop: it reads again, up to 3 times, then
   * rejects with ABORTED).
   */
  async popItem(): Promise<AgentInputItem | undefined> {
    const message = await this.#client.pop(this.#sessionId);
    return message === undefined ? undefined : toItem(message);
  }

  async clearSession(): Promise<void> {
    await this.#client.clear(this.#sessionId);
  }

  /** Closes the connections of a client this session made. */
  close(): void {
    if (this.#ownsClient) this.#client.close();
  }
}
