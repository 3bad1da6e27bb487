import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  type ChatMessage,
  ChatMessageSchema,
  Role,
  type StrategySchema,
  type ToolCallSchema,
} from "./gen/windlass/memory/v1/memory_pb.js";
import { clearingValue, type ToolResultClearingInit } from "./shaping.js";

/** What add() takes for a message: a ChatMessage or a plain object of its fields. */
export type MessageInit = MessageInitShape<typeof ChatMessageSchema>;
/** A tool call of an assistant message. */
export type ToolCallInit = MessageInitShape<typeof ToolCallSchema>;
/** What add() takes for a strategy. */
export type StrategyInit = MessageInitShape<typeof StrategySchema>;

/** Fields every message may carry besides its role and text. */
export interface MessageOptions {
  /** Participant name (the Chat Completions "name" field). */
  name?: string;
  /** Annotations kept with the message and returned unchanged. */
  metadata?: Record<string, string>;
}

/** A message of the human or calling program. */
export function user(content: string, options: MessageOptions = {}): ChatMessage {
  return message(Role.USER, content, options);
}

/** Instructions for the model. */
export function system(content: string, options: MessageOptions = {}): ChatMessage {
  return message(Role.SYSTEM, content, options);
}

/** A message of the model, optionally asking for tool calls (see toolCall). */
export function assistant(
  content: string,
  options: MessageOptions & { toolCalls?: ToolCallInit[] } = {},
): ChatMessage {
  return create(ChatMessageSchema, {
    ...fields(Role.ASSISTANT, content, options),
    toolCalls: options.toolCalls ?? [],
  });
}

/**
 * One tool call of an assistant message. `args` is the arguments as the model
 * produced them: a string is kept exactly; anything else is sent as JSON.
 */
export function toolCall(id: string, name: string, args: unknown = {}): ToolCallInit {
  const argumentsText = typeof args === "string" ? args : JSON.stringify(args);
  if (argumentsText === undefined) {
    throw new TypeError(`toolCall ${id}: args cannot be written as JSON`);
  }
  return { id, name, arguments: argumentsText };
}

/** The result of the tool call whose id is `toolCallId`. */
export function toolResult(
  toolCallId: string,
  content: string,
  options: MessageOptions = {},
): ChatMessage {
  return create(ChatMessageSchema, { ...fields(Role.TOOL, content, options), toolCallId });
}

function message(role: Role, content: string, options: MessageOptions): ChatMessage {
  return create(ChatMessageSchema, fields(role, content, options));
}

function fields(
  role: Role,
  content: string,
  options: MessageOptions,
): { role: Role; content: string; name: string; metadata: Record<string, string> } {
  return { role, content, name: options.name ?? "", metadata: options.metadata ?? {} };
}

/** Options every strategy takes. */
export interface StrategyOptions {
  /** Leave system messages out of get(). */
  excludeSystem?: boolean;
  /** Most messages kept per thread; the oldest are dropped beyond (server default 1000). */
  maxStored?: number;
  /**
   * Tool-output clearing every get() of the thread applies (get's own
   * `clearToolResults` replaces it). Checked here: a RangeError names the field.
   */
  clearToolResults?: ToolResultClearingInit;
}

/** Everything (or the newest `maxMessages`). */
export function bufferStrategy(
  options: StrategyOptions & { maxMessages?: number } = {},
): StrategyInit {
  return {
    kind: { case: "buffer", value: { maxMessages: options.maxMessages } },
    ...common(options),
  };
}

/** The newest `size` messages (server default 20), never splitting a tool call from its results. */
export function windowStrategy(size?: number, options: StrategyOptions = {}): StrategyInit {
  return { kind: { case: "window", value: { window: size } }, ...common(options) };
}

/**
 * A running summary plus the newest `window` messages (server default 10),
 * folding once `summarizeEvery` messages (default 6) lie outside the window.
 * `model` names a summariser configured on the server ("" or unset: its default).
 */
export function summaryStrategy(
  options: StrategyOptions & { window?: number; summarizeEvery?: number; model?: string } = {},
): StrategyInit {
  return {
    kind: {
      case: "summary",
      value: {
        window: options.window,
        summarizeEvery: options.summarizeEvery,
        model: options.model ?? "",
      },
    },
    ...common(options),
  };
}

function common(options: StrategyOptions): StrategyInit {
  return {
    excludeSystem: options.excludeSystem ?? false,
    maxStored: options.maxStored,
    ...(options.clearToolResults === undefined
      ? {}
      : { clearToolResults: clearingValue(options.clearToolResults, "clearToolResults") }),
  };
}
