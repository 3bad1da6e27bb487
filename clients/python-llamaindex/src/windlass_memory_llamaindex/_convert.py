"""LlamaIndex ChatMessage to and from windlass_memory.Message.

Tool calls are read from ``ToolCallBlock`` blocks and from
``additional_kwargs["tool_calls"]`` (the OpenAI shape LlamaIndex's OpenAI
integrations keep there, as dicts or OpenAI objects), and written back the way
they came (a ``llamaindex.tool_calls`` metadata key remembers which). A tool
result's ``additional_kwargs["tool_call_id"]`` and ``["name"]`` become the
message's tool_call_id and name. Roles the service does not have (developer,
chatbot, model, function) are stored as their nearest role and restored from
metadata; the other ``additional_kwargs`` (ids and the like) are kept as JSON
in metadata. Text blocks are joined with newlines, as ``ChatMessage.content``
joins them; any other block (image, audio, thinking …) is a ValueError naming
it, never dropped.
"""

from __future__ import annotations

import json
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock

from windlass_memory import Message, Role, ToolCall

ROLE_KEY = "llamaindex.role"
TOOL_CALLS_KEY = "llamaindex.tool_calls"  # "blocks" or "additional_kwargs"
KWARGS_KEY = "llamaindex.additional_kwargs"

_TO_ROLE = {
    MessageRole.SYSTEM: Role.SYSTEM,
    MessageRole.DEVELOPER: Role.SYSTEM,
    MessageRole.USER: Role.USER,
    MessageRole.ASSISTANT: Role.ASSISTANT,
    MessageRole.CHATBOT: Role.ASSISTANT,
    MessageRole.MODEL: Role.ASSISTANT,
    MessageRole.TOOL: Role.TOOL,
    MessageRole.FUNCTION: Role.TOOL,
}
_FROM_ROLE = {
    Role.SYSTEM: MessageRole.SYSTEM,
    Role.USER: MessageRole.USER,
    Role.ASSISTANT: MessageRole.ASSISTANT,
    Role.TOOL: MessageRole.TOOL,
}


def _openai_call(call: Any, where: str) -> ToolCall:
    if hasattr(call, "model_dump"):  # openai's ChatCompletionMessageToolCall
        call = call.model_dump()
    if not isinstance(call, dict):
        raise TypeError(f"{where}: expected an OpenAI tool call dict, not {type(call).__name__}")
    function = call.get("function") or {}
    arguments = function.get("arguments", "")
    return ToolCall(str(call.get("id") or ""), str(function.get("name") or ""), arguments or "")


def from_llamaindex(message: ChatMessage, where: str = "message") -> Message:
    """One LlamaIndex ``ChatMessage`` as a :class:`windlass_memory.Message`."""
    if not isinstance(message, ChatMessage):
        raise TypeError(
            f"{where}: expected a llama_index ChatMessage, not {type(message).__name__}"
        )
    metadata: dict[str, str] = {}
    role = _TO_ROLE.get(message.role)
    if role is None:
        raise ValueError(f"{where}.role: {message.role.value!r} has no role in the service")
    if _FROM_ROLE[role] is not message.role:
        metadata[ROLE_KEY] = message.role.value
    texts: list[str] = []
    calls: list[ToolCall] = []
    for i, block in enumerate(message.blocks):
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolCallBlock):
            kwargs = block.tool_kwargs
            calls.append(
                ToolCall(
                    block.tool_call_id or "",
                    block.tool_name,
                    kwargs if isinstance(kwargs, str) else json.dumps(kwargs),
                )
            )
            metadata[TOOL_CALLS_KEY] = "blocks"
        else:
            raise ValueError(
                f"{where}.blocks[{i}]: {type(block).__name__} is not supported "
                "(text and tool calls are stored)"
            )
    kwargs = dict(message.additional_kwargs)
    raw_calls = kwargs.pop("tool_calls", None) or []
    if raw_calls:
        if calls:
            raise ValueError(
                f"{where}: tool calls both in blocks and in additional_kwargs; keep one"
            )
        calls = [
            _openai_call(call, f"{where}.additional_kwargs.tool_calls[{i}]")
            for i, call in enumerate(raw_calls)
        ]
        metadata[TOOL_CALLS_KEY] = "additional_kwargs"
    tool_call_id = kwargs.pop("tool_call_id", None)
    name = kwargs.pop("name", None)
    for key, value in (("tool_call_id", tool_call_id), ("name", name)):
        if value is not None and not isinstance(value, str):
            raise TypeError(
                f"{where}.additional_kwargs.{key}: expected str, not {type(value).__name__}"
            )
    if kwargs:
        try:
            metadata[KWARGS_KEY] = json.dumps(kwargs, sort_keys=True)
        except TypeError as error:
            raise TypeError(f"{where}.additional_kwargs: values must be JSON ({error})") from None
    return Message(
        role,
        "\n".join(texts),
        name=name or None,
        tool_calls=calls,
        tool_call_id=tool_call_id or None,
        metadata=metadata,
    )


def to_llamaindex(message: Message) -> ChatMessage:
    """A :class:`windlass_memory.Message` as a LlamaIndex ``ChatMessage``."""
    metadata = message.metadata
    role = MessageRole(metadata[ROLE_KEY]) if ROLE_KEY in metadata else _FROM_ROLE[message.role]
    kwargs: dict[str, Any] = json.loads(metadata.get(KWARGS_KEY, "{}"))
    blocks: list[Any] = []
    as_blocks = metadata.get(TOOL_CALLS_KEY) == "blocks"
    if message.content or not (message.tool_calls and as_blocks):
        blocks.append(TextBlock(text=message.content))
    if message.tool_calls and as_blocks:
        for call in message.tool_calls:
            try:
                arguments: Any = json.loads(call.arguments)
            except ValueError:
                arguments = call.arguments
            if not isinstance(arguments, dict):
                arguments = call.arguments
            blocks.append(
                ToolCallBlock(tool_call_id=call.id, tool_name=call.name, tool_kwargs=arguments)
            )
    elif message.tool_calls:
        kwargs["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    if message.tool_call_id:
        kwargs["tool_call_id"] = message.tool_call_id
    if message.name:
        kwargs["name"] = message.name
    return ChatMessage(role=role, blocks=blocks, additional_kwargs=kwargs)
