"""LangChain messages to and from windlass_memory.Message.

What has no field of its own in the service's ChatMessage is kept in its
metadata under ``langchain.*`` keys, so a message read back equals the one
added: the message ``id``, a ToolMessage's ``status``, an AIMessage's
``invalid_tool_calls`` (JSON). Not kept: ``additional_kwargs``,
``response_metadata``, ``usage_metadata`` and a ToolMessage's ``artifact``
(provider details and Python objects, not conversation).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from windlass_memory import Message, Role, ToolCall

ID_KEY = "langchain.id"
STATUS_KEY = "langchain.status"
INVALID_TOOL_CALLS_KEY = "langchain.invalid_tool_calls"

_GENERIC_ROLES = {
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
    "user": Role.USER,
    "human": Role.USER,
    "assistant": Role.ASSISTANT,
    "ai": Role.ASSISTANT,
}


def _text(content: Any, where: str) -> str:
    """A message's content: text, or a list of text blocks / strings (joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, block in enumerate(content):
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            else:
                kind = block.get("type") if isinstance(block, dict) else type(block).__name__
                raise ValueError(
                    f"{where}.content[{i}]: {kind!r} content is not supported (only text is stored)"
                )
        return "".join(parts)
    raise TypeError(
        f"{where}.content: expected str or a list of blocks, not {type(content).__name__}"
    )


def from_langchain(message: BaseMessage, where: str = "message") -> Message:
    """One LangChain message as a :class:`windlass_memory.Message`."""
    if not isinstance(message, BaseMessage):
        raise TypeError(
            f"{where}: expected a langchain_core BaseMessage, not {type(message).__name__}"
        )
    metadata: dict[str, str] = {}
    if message.id:
        metadata[ID_KEY] = message.id
    content = _text(message.content, where)
    name = message.name or None
    if isinstance(message, SystemMessage):
        return Message(Role.SYSTEM, content, name=name, metadata=metadata)
    if isinstance(message, HumanMessage):
        return Message(Role.USER, content, name=name, metadata=metadata)
    if isinstance(message, AIMessage):
        calls = [
            ToolCall(call["id"] or "", call["name"], json.dumps(call["args"]))
            for call in message.tool_calls
        ]
        if message.invalid_tool_calls:
            metadata[INVALID_TOOL_CALLS_KEY] = json.dumps(
                [dict(call) for call in message.invalid_tool_calls]
            )
        return Message(Role.ASSISTANT, content, name=name, tool_calls=calls, metadata=metadata)
    if isinstance(message, ToolMessage):
        if message.status != "success":
            metadata[STATUS_KEY] = message.status
        return Message(
            Role.TOOL, content, name=name, tool_call_id=message.tool_call_id, metadata=metadata
        )
    if isinstance(message, ChatMessage) and message.role in _GENERIC_ROLES:
        return Message(_GENERIC_ROLES[message.role], content, name=name, metadata=metadata)
    raise ValueError(
        f"{where}: {type(message).__name__} (type {message.type!r}) has no role in the service; "
        "use SystemMessage, HumanMessage, AIMessage or ToolMessage"
    )


def to_langchain(message: Message) -> BaseMessage:
    """A :class:`windlass_memory.Message` as the LangChain message of its role."""
    common: dict[str, Any] = {"content": message.content}
    if message.name:
        common["name"] = message.name
    if ID_KEY in message.metadata:
        common["id"] = message.metadata[ID_KEY]
    if message.role is Role.SYSTEM:
        return SystemMessage(**common)
    if message.role is Role.USER:
        return HumanMessage(**common)
    if message.role is Role.TOOL:
        return ToolMessage(
            tool_call_id=message.tool_call_id or "",
            status=message.metadata.get(STATUS_KEY, "success"),
            **common,
        )
    calls = []
    invalid = json.loads(message.metadata.get(INVALID_TOOL_CALLS_KEY, "[]"))
    for call in message.tool_calls:
        try:
            args = json.loads(call.arguments) if call.arguments else {}
        except ValueError:
            args = None
        if isinstance(args, dict):
            calls.append({"name": call.name, "args": args, "id": call.id, "type": "tool_call"})
        else:
            # Arguments a model produced that are not a JSON object: LangChain
            # calls those invalid_tool_calls, with the raw text.
            invalid.append(
                {
                    "name": call.name,
                    "args": call.arguments,
                    "id": call.id,
                    "error": "arguments are not a JSON object",
                    "type": "invalid_tool_call",
                }
            )
    return AIMessage(tool_calls=calls, invalid_tool_calls=invalid, **common)


def from_langchain_all(messages: Iterable[BaseMessage]) -> list[Message]:
    if isinstance(messages, BaseMessage):
        raise TypeError("messages: expected a sequence of BaseMessage, not one message")
    return [from_langchain(m, f"messages[{i}]") for i, m in enumerate(messages)]
