"""Agents SDK items ↔ windlass-memory chat messages.

One item is one message: the item's JSON, whole, in the message's metadata
under ITEM_KEY (so any item type comes back exactly as added), and a chat
projection of it in role/content/tool_calls/tool_call_id, which is what the
server's windows, token budgets and summaries read:

- a message item (``{"role": ..., "content": ...}``, ``type`` "message" or
  absent): that role (``developer`` as system), its text (text parts joined
  by newlines; other parts as ``[<type>]``);
- ``function_call``: an assistant message with one tool call (its
  ``call_id``, ``name``, ``arguments``);
- ``function_call_output``: a tool message answering ``call_id``, the output
  as text;
- ``reasoning``: an assistant message ``[reasoning] <summary text>``;
- any other type: an assistant message ``[<type>]``.

Messages without ITEM_KEY (written by other clients, or the summary message
of a summary thread) are read back as the items their projection describes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from windlass_memory import Message, Role, ToolCall

ITEM_KEY = "openai_agents.item"

_ROLES = {
    "user": Role.USER,
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
    "assistant": Role.ASSISTANT,
}
_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")


def item_json(item: Any, index: int) -> dict[str, Any]:
    """The item as a JSON object: a dict as given, a pydantic model dumped."""
    if isinstance(item, Mapping):
        value = dict(item)
    elif hasattr(item, "model_dump"):
        value = item.model_dump(mode="json", exclude_unset=True)
    else:
        kind = type(item).__name__
        raise TypeError(f"items[{index}]: expected a dict (an input item), not {kind}")
    return value


def to_message(item: Any, index: int) -> Message:
    value = item_json(item, index)
    encoded = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    metadata = {ITEM_KEY: encoded}
    kind = value.get("type")
    if kind in (None, "message") and value.get("role") in _ROLES:
        return Message(_ROLES[value["role"]], _text(value.get("content")), metadata=metadata)
    if kind == "function_call":
        call = ToolCall(str(value.get("call_id", "")), str(value.get("name", "")),
                        str(value.get("arguments", "")))
        if not call.id:
            raise ValueError(f"items[{index}].call_id: a function_call needs one")
        return Message(Role.ASSISTANT, "", tool_calls=[call], metadata=metadata)
    if kind == "function_call_output":
        call_id = str(value.get("call_id", ""))
        if not call_id:
            raise ValueError(f"items[{index}].call_id: a function_call_output needs one")
        return Message(Role.TOOL, _text(value.get("output")), tool_call_id=call_id,
                       metadata=metadata)
    if kind == "reasoning":
        return Message(Role.ASSISTANT, f"[reasoning] {_text(value.get('summary'))}".rstrip(),
                       metadata=metadata)
    return Message(Role.ASSISTANT, f"[{kind}]", metadata=metadata)


def to_item(message: Message) -> dict[str, Any]:
    stored = message.metadata.get(ITEM_KEY)
    if stored is not None:
        value: dict[str, Any] = json.loads(stored)
        return value
    if message.role is Role.TOOL:
        return {"type": "function_call_output", "call_id": message.tool_call_id or "",
                "output": message.content}
    if message.tool_calls:
        # Only the first: a message from another client with several calls is
        # read as one item, so that pop_item removes what get_items showed.
        call = message.tool_calls[0]
        return {"type": "function_call", "call_id": call.id, "name": call.name,
                "arguments": call.arguments}
    return {"role": message.role.value, "content": message.content}


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_part_text(part) for part in content)
    return json.dumps(content, ensure_ascii=False)


def _part_text(part: Any) -> str:
    if isinstance(part, Mapping):
        if part.get("type") in _TEXT_PARTS and isinstance(part.get("text"), str):
            return str(part["text"])
        if part.get("type") == "refusal":
            return str(part.get("refusal", ""))
        return f"[{part.get('type')}]"
    return str(part)
