"""The conversion between Message and the generated ChatMessage, without a server."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from windlass.memory.v1 import memory_pb2

from windlass_memory import Message, Role, ToolCall
from windlass_memory._convert import from_chat_message, to_chat_message


def test_every_field_survives_a_round_trip() -> None:
    message = Message.assistant(
        "checking", tool_calls=[ToolCall("c1", "search", {"q": "lisbon"})], name="planner"
    )
    wire = to_chat_message(message)
    assert wire.role == memory_pb2.ROLE_ASSISTANT
    assert wire.tool_calls[0].arguments == '{"q": "lisbon"}'
    assert from_chat_message(wire) == message


def test_unset_optional_fields_come_back_as_none() -> None:
    back = from_chat_message(memory_pb2.ChatMessage(role=memory_pb2.ROLE_USER, content="hi"))
    assert back == Message.user("hi")
    assert (back.name, back.tool_call_id, back.create_time, back.seq) == (None, None, None, 0)


def test_service_fields_are_read_but_not_compared() -> None:
    wire = memory_pb2.ChatMessage(role=memory_pb2.ROLE_TOOL, content="3", tool_call_id="c1", seq=7)
    wire.create_time.FromDatetime(datetime(2026, 1, 2, tzinfo=timezone.utc))
    back = from_chat_message(wire)
    assert (back.seq, back.create_time) == (7, datetime(2026, 1, 2, tzinfo=timezone.utc))
    assert back == Message.tool("3", tool_call_id="c1")


@pytest.mark.parametrize("role", ["system", "user", "assistant", "tool"])
def test_roles_may_be_given_by_name(role: str) -> None:
    assert Message(role, "x").role is Role(role)


def test_an_unknown_role_is_refused_before_sending() -> None:
    class Odd:
        role = "narrator"
        content = "once upon a time"

    with pytest.raises(ValueError, match="narrator"):
        to_chat_message(Odd())


def test_an_unknown_role_from_the_service_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown role"):
        from_chat_message(memory_pb2.ChatMessage(role=memory_pb2.ROLE_UNSPECIFIED))
