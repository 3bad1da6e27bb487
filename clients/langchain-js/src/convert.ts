import {
  AIMessage,
  type BaseMessage,
  HumanMessage,
  type InvalidToolCall,
  type ToolCall as LangChainToolCall,
  type MessageContent,
  SystemMessage,
  ToolMessage,
} from "@langchain/core/messages";
import {
  type ChatMessage,
  type MessageInit,
  Role,
  type ToolCallInit,
} from "@windlass-memory/client";

/**
 * Metadata keys under which the fields of a LangChain message that
 * ChatMessage has no field for are kept (as JSON), so that a message read
 * back equals the one written. Any other metadata key (written by another
 * client) comes back in `additional_kwargs.metadata`.
 */
export const METADATA = {
  id: "langchain.id",
  content: "langchain.content",
  additionalKwargs: "langchain.additional_kwargs",
  responseMetadata: "langchain.response_metadata",
  invalidToolCalls: "langchain.invalid_tool_calls",
  usageMetadata: "langchain.usage_metadata",
  status: "langchain.status",
  artifact: "langchain.artifact",
} as const;

const KEYS = new Set<string>(Object.values(METADATA));

/**
 * A LangChain message as a windlass-memory ChatMessage: HumanMessage → user,
 * AIMessage → assistant (tool_calls with their ids, args as JSON text),
 * ToolMessage → tool (tool_call_id), SystemMessage → system, ChatMessage by
 * its role. Name and id are kept, and so is everything else the message
 * carries (content blocks, additional_kwargs, response_metadata, status,
 * artifact …), in metadata. Throws TypeError for what cannot be stored.
 */
export function toChatMessage(message: BaseMessage): MessageInit {
  const metadata: Record<string, string> = {};
  if (message.id !== undefined && message.id !== "") metadata[METADATA.id] = message.id;
  const content = textOf(message.content);
  if (typeof message.content !== "string") {
    metadata[METADATA.content] = json(message.content, "content");
  }
  putJson(metadata, METADATA.additionalKwargs, message.additional_kwargs, "additional_kwargs");
  putJson(metadata, METADATA.responseMetadata, message.response_metadata, "response_metadata");
  const base = { content, name: message.name ?? "", metadata };

  switch (roleOf(message)) {
    case Role.USER:
      return { ...base, role: Role.USER };
    case Role.SYSTEM:
      return { ...base, role: Role.SYSTEM };
    case Role.ASSISTANT: {
      const ai = message as AIMessage;
      const toolCalls: ToolCallInit[] = (ai.tool_calls ?? []).map((call, i) => {
        if (call.id === undefined || call.id === "") {
          throw new TypeError(`AIMessage.tool_calls[${i}].id is required to store a tool call`);
        }
        return { id: call.id, name: call.name, arguments: json(call.args, "tool_calls.args") };
      });
      if ((ai.invalid_tool_calls ?? []).length > 0) {
        metadata[METADATA.invalidToolCalls] = json(ai.invalid_tool_calls, "invalid_tool_calls");
      }
      if (ai.usage_metadata !== undefined) {
        metadata[METADATA.usageMetadata] = json(ai.usage_metadata, "usage_metadata");
      }
      return { ...base, role: Role.ASSISTANT, toolCalls };
    }
    case Role.TOOL: {
      const tool = message as ToolMessage;
      if (tool.status !== undefined) metadata[METADATA.status] = tool.status;
      if (tool.artifact !== undefined)
        metadata[METADATA.artifact] = json(tool.artifact, "artifact");
      return { ...base, role: Role.TOOL, toolCallId: tool.tool_call_id };
    }
  }
}

/** A stored ChatMessage as the LangChain message it was written from. */
export function fromChatMessage(message: ChatMessage): BaseMessage {
  const meta = message.metadata;
  const others = Object.fromEntries(Object.entries(meta).filter(([key]) => !KEYS.has(key)));
  const additional_kwargs = parse(meta[METADATA.additionalKwargs]) ?? {};
  if (Object.keys(others).length > 0) additional_kwargs.metadata = others;
  const fields = {
    content: (parse(meta[METADATA.content]) ?? message.content) as MessageContent,
    additional_kwargs,
    response_metadata: parse(meta[METADATA.responseMetadata]) ?? {},
    ...(message.name === "" ? {} : { name: message.name }),
    ...(meta[METADATA.id] === undefined ? {} : { id: meta[METADATA.id] }),
  };
  switch (message.role) {
    case Role.USER:
      return new HumanMessage(fields);
    case Role.SYSTEM:
      return new SystemMessage(fields);
    case Role.ASSISTANT: {
      const tool_calls: LangChainToolCall[] = [];
      const invalid_tool_calls: InvalidToolCall[] =
        (parse(meta[METADATA.invalidToolCalls]) as InvalidToolCall[] | undefined) ?? [];
      for (const call of message.toolCalls) {
        const args = parseObject(call.arguments);
        if (args === undefined) {
          // Arguments another client stored that are not a JSON object.
          invalid_tool_calls.push({
            type: "invalid_tool_call",
            id: call.id,
            name: call.name,
            args: call.arguments,
            error: "arguments are not a JSON object",
          });
        } else {
          tool_calls.push({ type: "tool_call", id: call.id, name: call.name, args });
        }
      }
      const usage = parse(meta[METADATA.usageMetadata]);
      return new AIMessage({
        ...fields,
        tool_calls,
        invalid_tool_calls,
        ...(usage === undefined ? {} : { usage_metadata: usage as AIMessage["usage_metadata"] }),
      });
    }
    case Role.TOOL: {
      const status = meta[METADATA.status];
      const artifact = meta[METADATA.artifact];
      return new ToolMessage({
        ...fields,
        tool_call_id: message.toolCallId,
        ...(status === "success" || status === "error" ? { status } : {}),
        ...(artifact === undefined ? {} : { artifact: JSON.parse(artifact) }),
      });
    }
    default:
      throw new TypeError(`stored message ${message.seq} has no known role (${message.role})`);
  }
}

function roleOf(message: BaseMessage): Role.USER | Role.SYSTEM | Role.ASSISTANT | Role.TOOL {
  const type = message.type;
  switch (type) {
    case "human":
      return Role.USER;
    case "ai":
      return Role.ASSISTANT;
    case "system":
      return Role.SYSTEM;
    case "tool":
      return Role.TOOL;
    case "generic": {
      const role = (message as { role?: unknown }).role;
      if (role === "user" || role === "human") return Role.USER;
      if (role === "assistant" || role === "ai") return Role.ASSISTANT;
      if (role === "system") return Role.SYSTEM;
      throw new TypeError(
        `ChatMessage.role ${JSON.stringify(role)} has no windlass-memory role (user, assistant, system)`,
      );
    }
    default:
      throw new TypeError(
        `a ${type} message cannot be stored: use HumanMessage, AIMessage, ToolMessage or SystemMessage`,
      );
  }
}

/** The text of string content, or of the text blocks of block content. */
function textOf(content: MessageContent): string {
  if (typeof content === "string") return content;
  return content
    .map((block) =>
      typeof block === "object" && block !== null && block.type === "text" && "text" in block
        ? String(block.text)
        : "",
    )
    .join("");
}

function putJson(
  metadata: Record<string, string>,
  key: string,
  value: Record<string, unknown> | undefined,
  field: string,
): void {
  if (value !== undefined && Object.keys(value).length > 0) metadata[key] = json(value, field);
}

function json(value: unknown, field: string): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    throw new TypeError(`${field} cannot be stored: it is not JSON (${String(err)})`);
  }
  if (text === undefined) throw new TypeError(`${field} cannot be stored: it is not JSON`);
  return text;
}

function parse(text: string | undefined): Record<string, unknown> | undefined {
  return text === undefined ? undefined : (JSON.parse(text) as Record<string, unknown>);
}

function parseObject(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === "object" && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}
