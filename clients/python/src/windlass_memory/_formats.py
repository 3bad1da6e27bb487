"""Conversion to and from the message shapes of the OpenAI and Anthropic APIs.

OpenAI Chat Completions: ``{"role", "content", "name"?, "tool_calls"?,
"tool_call_id"?}`` dicts, tool calls as ``{"id", "type": "function",
"function": {"name", "arguments"}}`` with the arguments as JSON text.

Anthropic Messages: a separate ``system`` prompt and ``user``/``assistant``
messages whose content is text or a list of blocks: ``text``, ``tool_use``
(``id``, ``name``, ``input`` as an object) in assistant messages and
``tool_result`` (``tool_use_id``, ``content``, ``is_error``) in user messages.

Whatever one shape cannot hold is said here, never dropped silently: a
content block of another kind (an image, a document, thinking) raises
ValueError naming it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._types import Message, Role, ToolCall

# Anthropic's tool_result "is_error" has no field in ChatMessage: it is kept
# in the message's metadata under this key, so it survives a round trip.
ANTHROPIC_IS_ERROR = "anthropic.is_error"


def _type_name(value: Any) -> str:
    return type(value).__name__


def _expect_mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{where}: expected a dict, not {_type_name(value)}")
    return value


def _expect_str(value: Any, where: str, *, optional: bool = False) -> str:
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"{where}: expected str, not {_type_name(value)}")
    return value


def _text_of(content: Any, where: str) -> str:
    """Text content: a string, None, or a list of text parts/blocks (joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = []
        for i, part in enumerate(content):
            part = _expect_mapping(part, f"{where}[{i}]")
            if part.get("type") != "text":
                raise ValueError(
                    f"{where}[{i}].type: {part.get('type')!r} content is not supported "
                    "(only text is stored)"
                )
            texts.append(_expect_str(part.get("text"), f"{where}[{i}].text"))
        return "".join(texts)
    raise TypeError(
        f"{where}: expected str, None or a list of text parts, not {_type_name(content)}"
    )


# ---- OpenAI Chat Completions ----

_OPENAI_ROLES = {
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,  # the newer name of the system role; written back as "system"
    "user": Role.USER,
    "assistant": Role.ASSISTANT,
    "tool": Role.TOOL,
}


def message_from_openai(message: Any, where: str = "message") -> Message:
    """One Chat Completions message dict as a :class:`Message`."""
    message = _expect_mapping(message, where)
    role_name = message.get("role")
    if role_name not in _OPENAI_ROLES:
        raise ValueError(
            f"{where}.role: {role_name!r} is not one of: {', '.join(_OPENAI_ROLES)}"
            + (
                " (the legacy 'function' role has no call id: use 'tool')"
                if role_name == "function"
                else ""
            )
        )
    calls = []
    raw_calls = message.get("tool_calls") or ()
    if not isinstance(raw_calls, Sequence) or isinstance(raw_calls, str):
        raise TypeError(f"{where}.tool_calls: expected a list, not {_type_name(raw_calls)}")
    for i, call in enumerate(raw_calls):
        call = _expect_mapping(call, f"{where}.tool_calls[{i}]")
        function = _expect_mapping(call.get("function"), f"{where}.tool_calls[{i}].function")
        arguments = function.get("arguments", "")
        if not isinstance(arguments, (str, Mapping)) and arguments is not None:
            raise TypeError(
                f"{where}.tool_calls[{i}].function.arguments: expected JSON text or a dict, "
                f"not {_type_name(arguments)}"
            )
        calls.append(
            ToolCall(
                _expect_str(call.get("id"), f"{where}.tool_calls[{i}].id"),
                _expect_str(function.get("name"), f"{where}.tool_calls[{i}].function.name"),
                arguments if arguments is not None else "",
            )
        )
    metadata = message.get("metadata")
    if metadata is not None:
        metadata = {
            str(k): str(v) for k, v in _expect_mapping(metadata, f"{where}.metadata").items()
        }
    return Message(
        _OPENAI_ROLES[role_name],
        _text_of(message.get("content"), f"{where}.content"),
        name=_expect_str(message.get("name"), f"{where}.name", optional=True) or None,
        tool_calls=calls,
        tool_call_id=_expect_str(
            message.get("tool_call_id"), f"{where}.tool_call_id", optional=True
        )
        or None,
        metadata=metadata,
    )


def from_openai(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Chat Completions ``messages`` (dicts) as :class:`Message` objects.

    ``content`` may be a string, ``None`` or a list of text parts (joined);
    ``developer`` is read as ``system``; ``metadata`` (a dict), when present,
    is kept.
    """
    if isinstance(messages, (str, Mapping)):
        raise TypeError(f"messages: expected a list of message dicts, not {_type_name(messages)}")
    return [message_from_openai(m, f"messages[{i}]") for i, m in enumerate(messages)]


def to_openai(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """:class:`Message` objects as Chat Completions ``messages``, ready to send.

    An assistant message with tool calls and no text gets ``"content": None``,
    as the API returns it. ``metadata`` is not part of the API and is left out.
    """
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise TypeError(
                f"messages[{i}]: expected a windlass_memory.Message, not {_type_name(message)}"
            )
        entry: dict[str, Any] = {"role": message.role.value, "content": message.content}
        if message.name:
            entry["name"] = message.name
        if message.tool_calls:
            entry["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ]
            if message.content == "":
                entry["content"] = None
        if message.role is Role.TOOL:
            entry["tool_call_id"] = message.tool_call_id or ""
        out.append(entry)
    return out


# ---- Anthropic Messages ----


def from_anthropic(
    messages: Iterable[Mapping[str, Any]], system: str | Sequence[Mapping[str, Any]] | None = None
) -> list[Message]:
    """Anthropic ``messages`` (and the ``system`` prompt) as :class:`Message` objects.

    The system prompt becomes a first system message. In a user message each
    ``tool_result`` block becomes a tool message and the text around them user
    messages, in block order; an assistant message's text blocks are joined
    and its ``tool_use`` blocks become tool calls (``input`` as JSON text).
    """
    if isinstance(messages, (str, Mapping)):
        raise TypeError(f"messages: expected a list of message dicts, not {_type_name(messages)}")
    out: list[Message] = []
    if system:
        out.append(Message.system(_text_of(system, "system")))
    for i, raw in enumerate(messages):
        where = f"messages[{i}]"
        message = _expect_mapping(raw, where)
        role = message.get("role")
        content = message.get("content")
        if role not in ("user", "assistant"):
            raise ValueError(f"{where}.role: {role!r} is not one of: user, assistant")
        if isinstance(content, str):
            out.append(Message(role, content))
            continue
        if not isinstance(content, Sequence):
            raise TypeError(
                f"{where}.content: expected str or a list of blocks, not {_type_name(content)}"
            )
        if role == "assistant":
            texts, calls = [], []
            for j, block in enumerate(content):
                block = _expect_mapping(block, f"{where}.content[{j}]")
                kind = block.get("type")
                if kind == "text":
                    texts.append(_expect_str(block.get("text"), f"{where}.content[{j}].text"))
                elif kind == "tool_use":
                    calls.append(
                        ToolCall(
                            _expect_str(block.get("id"), f"{where}.content[{j}].id"),
                            _expect_str(block.get("name"), f"{where}.content[{j}].name"),
                            json.dumps(block.get("input", {})),
                        )
                    )
                else:
                    raise ValueError(
                        f"{where}.content[{j}].type: {kind!r} blocks are not supported "
                        "in assistant messages (text and tool_use are)"
                    )
            out.append(Message.assistant("".join(texts), tool_calls=calls))
            continue
        pending_text: list[str] = []
        for j, block in enumerate(content):
            block = _expect_mapping(block, f"{where}.content[{j}]")
            kind = block.get("type")
            if kind == "text":
                pending_text.append(_expect_str(block.get("text"), f"{where}.content[{j}].text"))
            elif kind == "tool_result":
                _flush_user_text(pending_text, out)
                is_error = bool(block.get("is_error", False))
                out.append(
                    Message(
                        Role.TOOL,
                        _text_of(block.get("content"), f"{where}.content[{j}].content"),
                        tool_call_id=_expect_str(
                            block.get("tool_use_id"), f"{where}.content[{j}].tool_use_id"
                        ),
                        metadata={ANTHROPIC_IS_ERROR: "true"} if is_error else None,
                    )
                )
            else:
                raise ValueError(
                    f"{where}.content[{j}].type: {kind!r} blocks are not supported "
                    "in user messages (text and tool_result are)"
                )
        _flush_user_text(pending_text, out)
    return out


def _flush_user_text(pending_text: list[str], out: list[Message]) -> None:
    """Text blocks gathered so far become one user message."""
    if pending_text:
        out.append(Message.user("".join(pending_text)))
        pending_text.clear()


def to_anthropic(messages: Iterable[Message]) -> dict[str, Any]:
    """:class:`Message` objects as the ``system`` and ``messages`` of an Anthropic request.

    Returns ``{"messages": [...]}`` plus ``"system"`` when there are system
    messages (all of them, joined by a blank line, wherever they stood: the
    API has no system role), ready for ``client.messages.create(model=...,
    max_tokens=..., **to_anthropic(history))``. Consecutive tool results and
    the user text right after them share one user message, as the API wants
    all results of one assistant turn in the next message. Names are left
    out (the API has no field for them).
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    # The user message that tool results (and text after them) are gathered into.
    open_user: list[dict[str, Any]] | None = None
    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise TypeError(
                f"messages[{i}]: expected a windlass_memory.Message, not {_type_name(message)}"
            )
        if message.role is Role.SYSTEM:
            system.append(message.content)
            continue
        if message.role is Role.TOOL:
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.content,
            }
            if message.metadata.get(ANTHROPIC_IS_ERROR) == "true":
                block["is_error"] = True
            if open_user is None:
                open_user = []
                out.append({"role": "user", "content": open_user})
            open_user.append(block)
            continue
        if message.role is Role.USER:
            if open_user is not None:
                open_user.append({"type": "text", "text": message.content})
                open_user = None
            else:
                out.append({"role": "user", "content": message.content})
            continue
        open_user = None
        if not message.tool_calls:
            out.append({"role": "assistant", "content": message.content})
            continue
        blocks: list[dict[str, Any]] = []
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        for j, call in enumerate(message.tool_calls):
            try:
                arguments = json.loads(call.arguments) if call.arguments else {}
            except ValueError:
                raise ValueError(
                    f"messages[{i}].tool_calls[{j}].arguments: not JSON, and Anthropic's "
                    "tool_use input must be an object"
                ) from None
            blocks.append(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}
            )
        out.append({"role": "assistant", "content": blocks})
    result: dict[str, Any] = {"messages": out}
    if system:
        result["system"] = "\n\n".join(system)
    return result
