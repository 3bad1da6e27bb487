export { Code } from "@connectrpc/connect";
export { type BackoffOptions, backoffDelay } from "./backoff.js";
export {
  type AddOptions,
  createMemoryClient,
  type GetOptions,
  type MemoryClient,
  type MemoryClientOptions,
  type RetryOptions,
  type WatchFilter,
  type WatchOptions,
  type WatchStream,
} from "./client.js";
export { MemoryError, ResyncRequiredError } from "./errors.js";
export type { ForkOptions, ListThreadsOptions } from "./fork.js";
export {
  type AddResponse,
  type ChatMessage,
  ChatMessageSchema,
  EventType,
  type ForkOrigin,
  type ForkResponse,
  type GetResponse,
  MemoryService,
  Profile,
  type RewindResponse,
  Role,
  type Strategy,
  type Thread,
  type ToolCall,
  type ToolResultClearing,
  type WatchResponse,
} from "./gen/windlass/memory/v1/memory_pb.js";
export {
  assistant,
  bufferStrategy,
  type MessageInit,
  type MessageOptions,
  type StrategyInit,
  type StrategyOptions,
  summaryStrategy,
  system,
  type ToolCallInit,
  toolCall,
  toolResult,
  user,
  windowStrategy,
} from "./messages.js";
export type { RewindOptions } from "./rewind.js";
export {
  MAX_KEEP_TOOL_TOKENS,
  MAX_KEEP_TOOL_TURNS,
  type ProfileName,
  type ShapingOptions,
  type ToolResultClearingInit,
} from "./shaping.js";
