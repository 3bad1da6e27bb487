"""Conversion between client messages and the generated ``ChatMessage``.

The one place that knows both shapes. Outgoing messages are read by attribute,
so the original module's ``windlass.core.types.Message`` (or any object with
``role`` and ``content``) can be added as it is, and so can an OpenAI Chat
Completions message dict; anything else is a TypeError naming the argument.
Incoming ones become :class:`~windlass_memory.Message`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timezone
from typing import Any

from windlass.memory.v1 import memory_pb2

from ._formats import message_from_openai
from ._types import Message, MessageLike, Role, ToolCall

ACCEPTED = (
    "a windlass_memory.Message, an object with role and content "
    "(the original module's Message), or an OpenAI-style message dict"
)

_ROLE_TO_PB = {
    Role.SYSTEM: memory_pb2.ROLE_SYSTEM,
    Role.USER: memory_pb2.ROLE_USER,
    Role.ASSISTANT: memory_pb2.ROLE_ASSISTANT,
    Role.TOOL: memory_pb2.ROLE_TOOL,
}
_ROLE_FROM_PB = {pb: role for role, pb in _ROLE_TO_PB.items()}


def _role_to_pb(role: Any) -> memory_pb2.Role:
    # Enums of other libraries (the original's Role) carry the name in .value.
    name = getattr(role, "value", role)
    try:
        return _ROLE_TO_PB[Role(name)]
    except ValueError:
        raise ValueError(
            f"message role {name!r} is not one of: system, user, assistant, tool"
        ) from None


def _arguments_to_json(arguments: Any) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments)


def to_chat_message(
    message: MessageLike | Mapping[str, Any], where: str = "message"
) -> memory_pb2.ChatMessage:
    """Converts a message (ours, any object shaped like it, or an OpenAI dict) to a ``ChatMessage``.

    ``where`` names the argument in errors (``messages[2]``).
    """
    if isinstance(message, Mapping):
        message = message_from_openai(message, where)
    elif not (hasattr(message, "role") and hasattr(message, "content")):
        raise TypeError(f"{where}: expected {ACCEPTED}, not {type(message).__name__}")
    content = message.content
    if content is not None and not isinstance(content, str):
        raise TypeError(f"{where}.content: expected str, not {type(content).__name__}")
    metadata: Mapping[str, Any] = getattr(message, "metadata", None) or {}
    return memory_pb2.ChatMessage(
        role=_role_to_pb(message.role),
        content=content or "",
        name=getattr(message, "name", None) or "",
        tool_calls=[
            memory_pb2.ToolCall(
                id=call.id,
                name=call.name,
                arguments=_arguments_to_json(getattr(call, "arguments", None)),
            )
            for call in (getattr(message, "tool_calls", None) or ())
        ],
        tool_call_id=getattr(message, "tool_call_id", None) or "",
        metadata={str(key): str(value) for key, value in metadata.items()},
    )


def from_chat_message(message: memory_pb2.ChatMessage) -> Message:
    """Converts a ``ChatMessage`` returned by the service to a :class:`Message`."""
    try:
        role = _ROLE_FROM_PB[message.role]
    except KeyError:
        # A role added to the proto after this client was built.
        raise ValueError(f"the service returned an unknown role {message.role}") from None
    return Message(
        role=role,
        content=message.content,
        name=message.name or None,
        tool_calls=tuple(
            ToolCall(call.id, call.name, call.arguments) for call in message.tool_calls
        ),
        tool_call_id=message.tool_call_id or None,
        metadata=dict(message.metadata),
        seq=message.seq,
        create_time=(
            message.create_time.ToDatetime(tzinfo=timezone.utc)
            if message.HasField("create_time")
            else None
        ),
    )
