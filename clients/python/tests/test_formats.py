"""Conversion to and from OpenAI Chat Completions and Anthropic Messages shapes.

Without a server, except the last tests, which add the converted messages to
a live one and read them back.
"""

from __future__ import annotations

import json
import uuid

import pytest

from conftest import Server
from windlass_memory import (
    BufferMemory,
    Message,
    Role,
    ToolCall,
    from_anthropic,
    from_openai,
    to_anthropic,
    to_openai,
)

# An agent turn with two parallel tool calls, in each shape.
TRANSCRIPT = [
    Message.system("You are terse."),
    Message.user("Weather and time in Oslo?"),
    Message.assistant(
        "Checking.",
        tool_calls=[
            ToolCall("call_1", "weather", {"city": "Oslo"}),
            ToolCall("call_2", "time", {"tz": "Europe/Oslo"}),
        ],
    ),
    Message.tool('{"temp": 3}', tool_call_id="call_1"),
    Message.tool('{"time": "12:00"}', tool_call_id="call_2"),
    Message.assistant("3 degrees at noon."),
]

OPENAI = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather and time in Oslo?"},
    {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "time", "arguments": '{"tz": "Europe/Oslo"}'},
            },
        ],
    },
    {"role": "tool", "content": '{"temp": 3}', "tool_call_id": "call_1"},
    {"role": "tool", "content": '{"time": "12:00"}', "tool_call_id": "call_2"},
    {"role": "assistant", "content": "3 degrees at noon."},
]

ANTHROPIC = {
    "system": "You are terse.",
    "messages": [
        {"role": "user", "content": "Weather and time in Oslo?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Oslo"}},
                {
                    "type": "tool_use",
                    "id": "call_2",
                    "name": "time",
                    "input": {"tz": "Europe/Oslo"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": '{"temp": 3}'},
                {"type": "tool_result", "tool_use_id": "call_2", "content": '{"time": "12:00"}'},
            ],
        },
        {"role": "assistant", "content": "3 degrees at noon."},
    ],
}


def test_to_and_from_openai() -> None:
    assert to_openai(TRANSCRIPT) == OPENAI
    assert from_openai(OPENAI) == TRANSCRIPT
    assert from_openai(to_openai(TRANSCRIPT)) == TRANSCRIPT
    json.dumps(to_openai(TRANSCRIPT))  # plain JSON, ready to send


def test_to_and_from_anthropic() -> None:
    assert to_anthropic(TRANSCRIPT) == ANTHROPIC
    assert from_anthropic(ANTHROPIC["messages"], system=ANTHROPIC["system"]) == TRANSCRIPT
    assert to_anthropic(from_anthropic(**ANTHROPIC)) == ANTHROPIC


def test_openai_to_anthropic_through_messages() -> None:
    assert to_anthropic(from_openai(OPENAI)) == ANTHROPIC
    assert to_openai(from_anthropic(**ANTHROPIC)) == OPENAI


def test_openai_edge_cases() -> None:
    messages = from_openai(
        [
            {"role": "developer", "content": "rules"},
            {
                "role": "user",
                "name": "ana",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": {"x": 1}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": ""},
        ]
    )
    assert messages == [
        Message.system("rules"),
        Message.user("ab", name="ana"),
        Message.assistant("", tool_calls=[ToolCall("c1", "f", '{"x": 1}')]),
        Message.tool("", tool_call_id="c1"),
    ]
    back = to_openai(messages)
    assert back[0] == {"role": "system", "content": "rules"}  # developer is written as system
    assert back[1] == {"role": "user", "content": "ab", "name": "ana"}
    assert back[2]["content"] is None  # tool calls and no text, as the API returns it
    assert back[3] == {"role": "tool", "content": "", "tool_call_id": "c1"}


@pytest.mark.parametrize(
    ("messages", "error", "match"),
    [
        ("hello", TypeError, "messages: expected a list"),
        ([{"role": "user", "content": 5}], TypeError, r"messages\[0\].content: expected str"),
        ([{"role": "function", "name": "f", "content": "x"}], ValueError, "use 'tool'"),
        ([{"role": "narrator", "content": "x"}], ValueError, r"messages\[0\].role"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            ValueError,
            r"messages\[0\].content\[0\].type: 'image_url'",
        ),
        (
            [
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": 3}}],
                }
            ],
            TypeError,
            r"messages\[0\].tool_calls\[0\].function.arguments",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c"}]}],
            TypeError,
            r"tool_calls\[0\].function",
        ),
        ([["user", "hi"]], TypeError, r"messages\[0\]: expected a dict"),
    ],
)
def test_openai_bad_input_names_the_field(messages: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        from_openai(messages)  # type: ignore[arg-type]


def test_anthropic_edge_cases() -> None:
    messages = from_anthropic(
        [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "boom"}],
                        "is_error": True,
                    },
                    {"type": "text", "text": "and now?"},
                ],
            },
        ],
        system=[{"type": "text", "text": "sys "}, {"type": "text", "text": "prompt"}],
    )
    assert messages == [
        Message.system("sys prompt"),
        Message.user("hi"),
        Message.assistant("", tool_calls=[ToolCall("t1", "f", "{}")]),
        Message(Role.TOOL, "boom", tool_call_id="t1", metadata={"anthropic.is_error": "true"}),
        Message.user("and now?"),
    ]
    # Back: the error flag survives; the user text joins the tool results' message.
    assert to_anthropic(messages) == {
        "system": "sys prompt",
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": "boom",
                        "is_error": True,
                    },
                    {"type": "text", "text": "and now?"},
                ],
            },
        ],
    }


def test_anthropic_has_no_system_role_or_names() -> None:
    converted = to_anthropic(
        [
            Message.system("first"),
            Message.user("q", name="ana"),
            Message.system("summary so far"),
            Message.assistant("a"),
        ]
    )
    assert converted == {
        "system": "first\n\nsummary so far",
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    }
    assert "system" not in to_anthropic([Message.user("q")])


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: from_anthropic({"role": "user", "content": "x"}), TypeError, "expected a list"),  # type: ignore[arg-type]
        (
            lambda: from_anthropic([{"role": "system", "content": "x"}]),
            ValueError,
            r"messages\[0\].role",
        ),
        (
            lambda: from_anthropic(
                [{"role": "assistant", "content": [{"type": "thinking", "thinking": "."}]}]
            ),
            ValueError,
            r"messages\[0\].content\[0\].type: 'thinking'",
        ),
        (
            lambda: from_anthropic(
                [{"role": "user", "content": [{"type": "image", "source": {}}]}]
            ),
            ValueError,
            r"messages\[0\].content\[0\].type: 'image'",
        ),
        (
            lambda: from_anthropic([{"role": "user", "content": 3}]),
            TypeError,
            r"messages\[0\].content",
        ),
        (
            lambda: to_anthropic(
                [Message.assistant("", tool_calls=[ToolCall("c", "f", "not json")])]
            ),
            ValueError,
            r"messages\[0\].tool_calls\[0\].arguments: not JSON",
        ),
        (
            lambda: to_anthropic([{"role": "user", "content": "x"}]),
            TypeError,
            r"messages\[0\]: expected a windlass_memory.Message",
        ),  # type: ignore[list-item]
        (lambda: to_openai(["x"]), TypeError, r"messages\[0\]"),  # type: ignore[list-item]
    ],
)
def test_anthropic_bad_input_names_the_field(call, error: type, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        call()


def test_openai_dicts_are_added_as_they_are(server: Server) -> None:
    thread = f"openai-{uuid.uuid4().hex}"
    with BufferMemory(target=server.target) as memory:
        memory.add(OPENAI, thread_id=thread)
        memory.add({"role": "user", "content": "one more"}, thread_id=thread)
        stored = memory.get(thread_id=thread)
    assert stored == [*TRANSCRIPT, Message.user("one more")]
    assert to_openai(stored)[:-1] == OPENAI


def test_anthropic_history_round_trips_through_the_service(server: Server) -> None:
    thread = f"anthropic-{uuid.uuid4().hex}"
    with BufferMemory(target=server.target) as memory:
        memory.add(from_anthropic(**ANTHROPIC), thread_id=thread)
        assert to_anthropic(memory.get(thread_id=thread)) == ANTHROPIC


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda m: m.add("hello"), "messages: expected .* not str .*Message.user"),
        (lambda m: m.add(42), "messages: expected .* not int"),
        (lambda m: m.add([Message.user("ok"), 3]), r"messages\[1\]: expected .* not int"),
        (lambda m: m.add(Message("user", 7)), "messages.content: expected str, not int"),  # type: ignore[arg-type]
        (lambda m: m.add(Message.user("x"), thread_id=5), "thread_id: expected str, not int"),
        (lambda m: m.get(thread_id=None), "thread_id: expected str, not NoneType"),
        (lambda m: m.get(limit="2"), "limit: expected int or None, not str"),
        (lambda m: m.clear(thread_id=1), "thread_id: expected str, not int"),
        (lambda m: BufferMemory(max_stored="9", target="127.0.0.1:1"), "max_stored: expected int"),
        (lambda m: BufferMemory(timeout="5", target="127.0.0.1:1"), "timeout: expected seconds"),
    ],
)
def test_wrong_argument_types_are_type_errors_naming_the_argument(
    server: Server,
    call,
    match: str,  # type: ignore[no-untyped-def]
) -> None:
    with BufferMemory(target=server.target) as memory:
        before = memory.get()
        with pytest.raises(TypeError, match=match):
            call(memory)
        assert memory.get() == before  # nothing was sent
