/**
 * Plain domain data shared by the core, the stores, the summarisers and the
 * service. No protobuf types here: the service converts at its edge, so the
 * core and the stores stay independent of the wire format.
 */

/** Who wrote a message. */
export type Role = "system" | "user" | "assistant" | "tool";

/** One function call requested by an assistant message. */
export interface ToolCall {
  id: string;
  name: string;
  /** JSON text, exactly as the model produced it. */
  arguments: string;
}

/** A message as a client sends it. Empty optional fields are left out. */
export interface ChatMessage {
  role: Role;
  content: string;
  name?: string;
  toolCalls?: ToolCall[];
  toolCallId?: string;
  metadata?: Record<string, string>;
  /**
   * What a model is charged for the message (src/core/tokens.ts), counted
   * once by the service at Add and stored with the message; absent on
   * messages stored before counting existed.
   */
  tokens?: number;
  /** The encoding `tokens` was counted with; absent: o200k_base. */
  tokenEncoding?: TokenEncoding;
}

/** Tokenizer encodings a strategy may count with. */
export type TokenEncoding = "o200k_base" | "cl100k_base";

/** How a summary is replayed by Get. */
export type SummaryPlacement = "system" | "user" | "none";

/** A message as stored: with its seq and the time it was stored. */
export interface StoredMessage extends ChatMessage {
  /** 1, 2, 3 … per thread incarnation; never reused or shifted. */
  seq: number;
  /** Milliseconds since the Unix epoch. */
  createTime: number;
}

/**
 * Which tool results a Get returns as a placeholder (src/core/tool-clearing.ts).
 * At least one limit is set; a result is cleared when either says so.
 */
export interface ToolClearing {
  /** Results of the newest this many tool turns stay whole; older ones are cleared. */
  keepToolTurns?: number;
  /** Results stay whole, newest first, while their tokens sum to at most this. */
  keepToolTokens?: number;
}

/**
 * A provider whose request rules a Get's list is shaped to
 * (src/core/profiles/): GetRequest.profile.
 */
export type Profile =
  | "openai_chat"
  | "openai_responses"
  | "anthropic"
  | "gemini"
  | "bedrock_converse";

/** Options common to every strategy. */
interface StrategyBase {
  /** System messages are left out of recall (the seed's return_system=False). */
  excludeSystem: boolean;
  /** Hard ceiling on messages kept per thread. */
  maxStored: number;
  /**
   * Tool-output clearing every Get of the thread applies (a GetRequest's own
   * clearing replaces it); absent: none, as for strategies stored before it existed.
   */
  clearToolResults?: ToolClearing;
}

/**
 * Token budget options of window and summary strategies. Optional, so that
 * strategies stored before they existed read back unchanged; a default is
 * left out (resolveStrategy does), so equal strategies stay equal objects.
 */
interface TokenOptions {
  /** Budget in tokens for what Get returns; absent or 0: none. */
  maxTokens?: number;
  /** Encoding the budget counts with; absent: o200k_base. */
  tokenEncoding?: TokenEncoding;
}

/** A strategy with every default filled in, as a thread keeps it. */
export type Strategy =
  | (StrategyBase & {
      kind: "buffer";
      /** 0: all. */
      maxMessages: number;
    })
  | (StrategyBase & TokenOptions & { kind: "window"; window: number })
  | (StrategyBase &
      TokenOptions & {
        kind: "summary";
        window: number;
        summarizeEvery: number;
        /** Name of the summariser, resolved (never empty). */
        model: string;
        /** How Get replays the summary; absent: "system". */
        summaryPlacement?: SummaryPlacement;
      });

/** A thread's state, without its messages. */
export interface ThreadState {
  threadId: string;
  /**
   * Changes each time the thread is created anew after a Clear, so that work
   * computed for an earlier incarnation is never written into a later one.
   */
  incarnation: string;
  strategy: Strategy;
  /** Seq of the newest message ever added to this incarnation; 0 when none. */
  lastSeq: number;
  /** Newest seq folded into the summary; 0 when none. */
  summarizedThroughSeq: number;
  summary: string;
  /** When the summary was last written (ms since the epoch); 0 when none. */
  summaryTime: number;
  /** Milliseconds since the Unix epoch. */
  createTime: number;
  updateTime: number;
  /** The thread's labels (AddRequest.labels); absent when it has none, never empty. */
  labels?: Labels;
  /** Retention (AddRequest.ttl), ms; absent when the thread never expires. */
  ttlMs?: number;
  /** When the thread expires unless written again (ms since the epoch); with ttlMs only. */
  expireTime?: number;
  /** Where the thread was forked from (Fork); absent when it is not a fork. */
  parent?: ForkOrigin;
}

/** The thread a fork was created from, and where (ForkRequest). */
export interface ForkOrigin {
  /** The direct parent. */
  threadId: string;
  /** The fork holds the parent's messages up to this seq. */
  atSeq: number;
  /** When the fork was created (ms since the epoch). */
  forkTime: number;
  /** The parent's createTime when it was forked (tells a cleared parent from it). */
  parentCreateTime: number;
}

/** Thread labels: key -> value (checked by service/labels.ts). */
export type Labels = Record<string, string>;

/** What happened to a thread, as the event log records it. */
export type EventBody =
  | { type: "messages_added"; firstSeq: number; lastSeq: number }
  | { type: "summary_updated"; summary: string; summarizedThroughSeq: number; foldedCount: number }
  | { type: "thread_cleared"; reason?: "expired" }
  | { type: "summary_failed"; reason: string; attempt: number }
  | { type: "thread_rewound"; toSeq: number; removedCount: number; summaryDropped: boolean }
  | {
      type: "thread_forked";
      parentThreadId: string;
      atSeq: number;
      sharedCount: number;
      summaryInherited: boolean;
    };

export type EventType = EventBody["type"];

/** An event of a namespace's log. */
export type MemoryEvent = EventBody & {
  /** The store's position of this event; opaque outside the store. */
  cursor: string;
  threadId: string;
  /** Milliseconds since the Unix epoch. */
  time: number;
};
