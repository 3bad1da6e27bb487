import { randomUUID } from "node:crypto";
import { Agent as HttpAgent } from "node:http";
import { Agent as HttpsAgent } from "node:https";
import {
  type Client,
  Code,
  createClient,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import { type BackoffOptions, backoffDelay, sleep } from "./backoff.js";
import { ResyncRequiredError, toMemoryError } from "./errors.js";
import { type ForkOptions, forkFields, type ListThreadsOptions, listFields } from "./fork.js";
import {
  type AddResponse,
  type ChatMessage,
  type EventType,
  type ForkResponse,
  type GetResponse,
  type ListThreadsResponse,
  MemoryService,
  type RewindResponse,
  type Thread,
  type WatchResponse,
} from "./gen/windlass/memory/v1/memory_pb.js";
import type { MessageInit, StrategyInit } from "./messages.js";
import { newestMessages, popNewest, type RewindOptions, seqArgument } from "./rewind.js";
import { type ShapingOptions, shapingFields } from "./shaping.js";

/** How createMemoryClient connects. */
export interface MemoryClientOptions {
  /**
   * The server, e.g. "http://127.0.0.1:50051": its gRPC port for transport
   * "grpc", its HTTP port (Connect) for transport "connect"; https:// for TLS.
   */
  baseUrl: string;
  /** "grpc" (HTTP/2, the default) or "connect" (Connect protocol, binary, over HTTP/1.1). */
  transport?: "grpc" | "connect";
  /** Bearer token, when the server requires one (it selects your namespace). */
  token?: string;
  /** Deadline of each unary call (each attempt of add), in ms. Default 30000. Not applied to watch. */
  timeoutMs?: number;
  /** Retries of add after UNAVAILABLE. */
  retry?: RetryOptions;
  /** Waits of watch between reconnects. */
  watchBackoff?: BackoffOptions;
}

/** Retries of add: the same request_id each time, so the server stores it once. */
export interface RetryOptions extends BackoffOptions {
  /** Attempts in all, the first included. Default 5; 1 turns retries off. */
  maxAttempts?: number;
}

/** Per-call options of add. */
export interface AddOptions {
  /** Strategy of a new thread (an existing thread keeps its own unless replaceStrategy). */
  strategy?: StrategyInit;
  /** Replace the existing thread's strategy with `strategy`; messages stay. */
  replaceStrategy?: boolean;
  /**
   * Use `strategy` only if this add creates the thread: an existing thread
   * keeps its own instead of failing with FAILED_PRECONDITION (read it your
   * way with get's `recall`). Not with replaceStrategy.
   */
  keepStrategy?: boolean;
  /** Idempotency key. Default: a new random UUID per add() call, reused by its retries. */
  requestId?: string;
  /** Fail with ABORTED unless the thread's last_seq equals this (0: the thread must not exist). */
  expectedLastSeq?: bigint | number;
  signal?: AbortSignal;
  timeoutMs?: number;
}

/** Per-call options of get (profile, clearToolResults: see ShapingOptions). */
export interface GetOptions extends ShapingOptions {
  /** Overrides the strategy's size for this call (0: all, or for summary: the unfolded messages). */
  limit?: number;
  /** Summary strategy: do not wait for a fold that is due or running. */
  allowStale?: boolean;
  /**
   * Shape this get with this strategy instead of the thread's, without
   * changing the thread's (e.g. windowStrategy(5) on any thread). A summary
   * recall on a thread without a summary returns its window part.
   */
  recall?: StrategyInit;
  signal?: AbortSignal;
  timeoutMs?: number;
}

/** Which events watch delivers. */
export interface WatchFilter {
  /** Only these threads; empty or unset: every thread of your namespace. */
  threadIds?: string[];
  /** Only these event types; empty or unset: all. Progress events always come. */
  eventTypes?: EventType[];
  /** First send one summaryUpdated per watched thread that has a summary. */
  sendInitialState?: boolean;
}

/** Options of watch. */
export interface WatchOptions {
  /** Ends the watch: the loop over it finishes without an error. */
  signal?: AbortSignal;
  /** Start after the event that carried this token (saved from `stream.resumeToken`). Default: from now. */
  resumeToken?: string;
}

/** A watch: an async iterable of events that resumes by itself. */
export interface WatchStream extends AsyncIterable<WatchResponse> {
  /** Token of the last event delivered ("" before the first): keep it to resume later. */
  readonly resumeToken: string;
}

export interface MemoryClient {
  /**
   * Appends messages to a thread (created on first use), atomically. Retried
   * after UNAVAILABLE with backoff and the same request_id, so a retry whose
   * first attempt did reach the server stores nothing twice.
   */
  add(threadId: string, messages: MessageInit[], options?: AddOptions): Promise<AddResponse>;
  /** The thread shaped by its strategy (or `recall`); a missing thread has no messages and no `thread`. */
  get(threadId: string, options?: GetOptions): Promise<GetResponse>;
  /**
   * Drops the thread's messages after toSeq (last_seq - 1: the newest);
   * the next add reuses their seqs. Retried after UNAVAILABLE with the same
   * request_id, as add is, so a retry drops nothing more. ABORTED when
   * expectedLastSeq differs, NOT_FOUND, OUT_OF_RANGE (toSeq past last_seq),
   * FAILED_PRECONDITION (the messages after toSeq are no longer all stored).
   */
  rewind(
    threadId: string,
    toSeq: bigint | number,
    options?: RewindOptions,
  ): Promise<RewindResponse>;
  /**
   * Creates newThreadId holding threadId's messages up to atSeq (default:
   * all), shared with the parent, not copied; then both change
   * independently. Strategy, labels and ttl are the parent's unless given.
   * Retried after UNAVAILABLE with the same request_id, as add is, so a retry
   * answers the first fork instead of ALREADY_EXISTS. NOT_FOUND (no parent),
   * ALREADY_EXISTS (newThreadId is taken), ABORTED (expectedLastSeq),
   * OUT_OF_RANGE (atSeq past last_seq), FAILED_PRECONDITION (messages up to
   * atSeq trimmed), RESOURCE_EXHAUSTED, INVALID_ARGUMENT.
   */
  fork(threadId: string, newThreadId: string, options?: ForkOptions): Promise<ForkResponse>;
  /**
   * Removes and returns the newest stored message (undefined when there is
   * none), guarded by expected_last_seq: a message added meanwhile is never
   * dropped unseen; pop reads again after that ABORTED, up to 3 times.
   */
  pop(threadId: string, options?: { signal?: AbortSignal }): Promise<ChatMessage | undefined>;
  /** The newest `count` stored messages, oldest first, whatever the thread's strategy. */
  newest(
    threadId: string,
    count: number,
    options?: { signal?: AbortSignal },
  ): Promise<ChatMessage[]>;
  /** Forgets one thread; resolves to 1 if it existed, else 0. */
  clear(threadId: string, options?: { signal?: AbortSignal }): Promise<number>;
  /** Forgets every thread of your namespace; resolves to how many existed. */
  clearAll(options?: { signal?: AbortSignal }): Promise<number>;
  /** Your thread ids, sorted, one page (array) at a time; forksOf and labels narrow it. */
  threads(options?: ListThreadsOptions): AsyncIterable<string[]>;
  /** As threads, but each thread with its state (`parent`: a fork's origin). */
  listThreads(options?: ListThreadsOptions): AsyncIterable<Thread[]>;
  /**
   * Events of your namespace, in order. After UNAVAILABLE, RESOURCE_EXHAUSTED
   * (a slow reader was cut off) or the end of the stream it reconnects with
   * exponential backoff and jitter and continues after the last event it
   * delivered. Throws ResyncRequiredError when the server cannot continue
   * there (OUT_OF_RANGE), and MemoryError for other failures.
   */
  watch(filter?: WatchFilter, options?: WatchOptions): WatchStream;
  /** The generated Connect client, for anything the calls above do not cover. */
  readonly raw: Client<typeof MemoryService>;
  /** Closes this client's connections; calls after close fail. */
  close(): void;
}

const DEFAULT_TIMEOUT_MS = 30_000;
const DEFAULT_MAX_ATTEMPTS = 5;

/** A client of one windlass-memory server. */
export function createMemoryClient(options: MemoryClientOptions): MemoryClient {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const maxAttempts = options.retry?.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1) {
    throw new RangeError(`retry.maxAttempts must be an integer >= 1, got ${maxAttempts}`);
  }
  // Validate the backoff settings now rather than at the first failure.
  backoffDelay(1, options.retry);
  backoffDelay(1, options.watchBackoff);

  const interceptors: Interceptor[] = [];
  if (options.token !== undefined) {
    const authorization = `Bearer ${options.token}`;
    interceptors.push((next) => (req) => {
      req.header.set("authorization", authorization);
      return next(req);
    });
  }
  // Connections of this client only, so close() can end them.
  let sessionManager: Http2SessionManager | undefined;
  let agent: HttpAgent | undefined;
  let transport: Transport;
  const kind = options.transport ?? "grpc";
  if (kind === "grpc") {
    sessionManager = new Http2SessionManager(options.baseUrl);
    transport = createGrpcTransport({ baseUrl: options.baseUrl, interceptors, sessionManager });
  } else if (kind === "connect") {
    agent = options.baseUrl.startsWith("https:")
      ? new HttpsAgent({ keepAlive: true })
      : new HttpAgent({ keepAlive: true });
    transport = createConnectTransport({
      baseUrl: options.baseUrl,
      httpVersion: "1.1",
      useBinaryFormat: true,
      interceptors,
      nodeOptions: { agent },
    });
  } else {
    throw new TypeError(`transport must be "grpc" or "connect", got ${JSON.stringify(kind)}`);
  }
  const raw = createClient(MemoryService, transport);

  async function call<T>(run: () => Promise<T>, signal: AbortSignal | undefined): Promise<T> {
    try {
      return await run();
    } catch (err) {
      throw toMemoryError(err, signal);
    }
  }

  // A call carrying a request_id, repeated with it after UNAVAILABLE.
  async function retrying<T>(run: () => Promise<T>, signal: AbortSignal | undefined): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await call(run, signal);
      } catch (err) {
        const error = toMemoryError(err, signal);
        if (error.code !== Code.Unavailable || attempt >= maxAttempts || signal?.aborted) {
          throw error;
        }
        await sleep(backoffDelay(attempt, options.retry), signal);
        if (signal?.aborted) throw error;
      }
    }
  }

  async function* listPages(
    listOptions: ListThreadsOptions,
    includeThreads: boolean,
  ): AsyncGenerator<ListThreadsResponse> {
    let pageToken = "";
    do {
      const request = listFields(listOptions, pageToken, includeThreads);
      const page = await call(
        () => raw.listThreads(request, { signal: listOptions.signal, timeoutMs }),
        listOptions.signal,
      );
      yield page;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  return {
    raw,

    add(threadId, messages, callOptions = {}) {
      const request = {
        threadId,
        messages,
        strategy: callOptions.strategy,
        replaceStrategy: callOptions.replaceStrategy ?? false,
        keepStrategy: callOptions.keepStrategy ?? false,
        requestId: callOptions.requestId ?? randomUUID(),
        expectedLastSeq:
          callOptions.expectedLastSeq === undefined
            ? undefined
            : BigInt(callOptions.expectedLastSeq),
      };
      const signal = callOptions.signal;
      return retrying(
        () => raw.add(request, { signal, timeoutMs: callOptions.timeoutMs ?? timeoutMs }),
        signal,
      );
    },

    rewind(threadId, toSeq, callOptions = {}) {
      const request = {
        threadId,
        toSeq: seqArgument("toSeq", toSeq),
        expectedLastSeq:
          callOptions.expectedLastSeq === undefined
            ? undefined
            : seqArgument("expectedLastSeq", callOptions.expectedLastSeq),
        requestId: callOptions.requestId ?? randomUUID(),
      };
      const signal = callOptions.signal;
      return retrying(
        () => raw.rewind(request, { signal, timeoutMs: callOptions.timeoutMs ?? timeoutMs }),
        signal,
      );
    },

    fork(threadId, newThreadId, callOptions = {}) {
      const request = forkFields(threadId, newThreadId, callOptions, randomUUID());
      const signal = callOptions.signal;
      return retrying(
        () => raw.fork(request, { signal, timeoutMs: callOptions.timeoutMs ?? timeoutMs }),
        signal,
      );
    },

    pop(threadId, callOptions = {}) {
      return popNewest(this, threadId, callOptions.signal);
    },

    newest(threadId, count, callOptions = {}) {
      return newestMessages(this, threadId, count, callOptions.signal);
    },

    async get(threadId, callOptions = {}) {
      // Built first, so a bad profile or clearing rejects before any call.
      const request = {
        threadId,
        limit: callOptions.limit,
        allowStale: callOptions.allowStale ?? false,
        recall: callOptions.recall,
        ...shapingFields(callOptions),
      };
      return call(
        () =>
          raw.get(request, {
            signal: callOptions.signal,
            timeoutMs: callOptions.timeoutMs ?? timeoutMs,
          }),
        callOptions.signal,
      );
    },

    async clear(threadId, callOptions = {}) {
      if (threadId === "") {
        throw new TypeError("clear: threadId must not be empty (use clearAll for every thread)");
      }
      const response = await call(
        () => raw.clear({ threadId }, { signal: callOptions.signal, timeoutMs }),
        callOptions.signal,
      );
      return response.clearedThreads;
    },

    async clearAll(callOptions = {}) {
      const response = await call(
        () => raw.clear({ all: true }, { signal: callOptions.signal, timeoutMs }),
        callOptions.signal,
      );
      return response.clearedThreads;
    },

    threads(callOptions = {}) {
      return mapPages(listPages(callOptions, false), (page) => page.threadIds);
    },

    listThreads(callOptions = {}) {
      return mapPages(listPages(callOptions, true), (page) => page.threads);
    },

    watch(filter = {}, watchOptions = {}) {
      let resumeToken = watchOptions.resumeToken ?? "";
      const signal = watchOptions.signal;
      async function* events(): AsyncGenerator<WatchResponse> {
        // Consecutive reconnects that delivered nothing; reset by any event.
        let failures = 0;
        while (!signal?.aborted) {
          try {
            const stream = raw.watch(
              {
                threadIds: filter.threadIds ?? [],
                eventTypes: filter.eventTypes ?? [],
                sendInitialState: filter.sendInitialState ?? false,
                resumeToken,
              },
              { signal },
            );
            for await (const event of stream) {
              failures = 0;
              resumeToken = event.resumeToken;
              yield event;
            }
            // A clean end of the stream (a server going away): resume below.
          } catch (err) {
            if (signal?.aborted) return;
            const error = toMemoryError(err, signal);
            if (error.code === Code.OutOfRange) {
              throw new ResyncRequiredError(error.details, resumeToken, { cause: err });
            }
            if (error.code !== Code.Unavailable && error.code !== Code.ResourceExhausted) {
              throw error;
            }
          }
          failures++;
          await sleep(backoffDelay(failures, options.watchBackoff), signal);
        }
      }
      return {
        get resumeToken() {
          return resumeToken;
        },
        [Symbol.asyncIterator]: events,
      };
    },

    close() {
      sessionManager?.abort();
      agent?.destroy();
    },
  };
}

async function* mapPages<P, T>(pages: AsyncIterable<P>, pick: (page: P) => T): AsyncGenerator<T> {
  for await (const page of pages) yield pick(page);
}
