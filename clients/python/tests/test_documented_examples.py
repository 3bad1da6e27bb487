"""The original module's documented examples, run through the service.

Each example uses the thread ids the documentation uses ("default", "a",
"b"), so each gets a server of its own.
"""

from __future__ import annotations

import json

import pytest

from conftest import FakeModel, Server
from windlass_memory import BufferMemory, Message, Role, SummaryMemory, WindowMemory


def test_module_example_window_of_two(fresh_server: Server) -> None:
    with WindowMemory(window=2, target=fresh_server.target) as m:
        m.add([Message.user("one"), Message.user("two"), Message.user("three")])
        assert [msg.content for msg in m.get()] == ["two", "three"]


def test_buffer_memory_example(fresh_server: Server) -> None:
    with BufferMemory(target=fresh_server.target) as m:
        m.add(Message.user("hi"), thread_id="a")
        assert m.get(thread_id="a")[0].content == "hi"
        assert m.get(thread_id="b") == []


def test_window_memory_example(fresh_server: Server) -> None:
    with WindowMemory(window=1, target=fresh_server.target) as m:
        m.add([Message.user("a"), Message.user("b")])
        assert [x.content for x in m.get()] == ["b"]


@pytest.mark.parametrize("window", [0, -1])
def test_window_memory_refuses_a_window_that_is_not_positive(window: int) -> None:
    # Raised by the constructor, before any call, as in the original.
    with pytest.raises(ValueError, match="window must be positive"):
        WindowMemory(window=window, target="127.0.0.1:1")


def test_summary_memory_example(model_server: Server, fake_model: FakeModel) -> None:
    fake_model.replies = ["User greeted twice."]
    with SummaryMemory(
        llm=None,  # the server's default summariser: here the fake model
        window=2,
        summarize_every=2,
        target=model_server.target,
    ) as m:
        m.add([Message.user(f"msg {i}") for i in range(6)])
        recalled = m.get()
        assert recalled[0].role.value == "system"
        assert recalled[0].content == "Summary of the earlier conversation:\nUser greeted twice."
        # README, Semantics (deliberate difference): with this example the result is the original's: the
        # summary, then messages 4 and 5.
        assert [msg.content for msg in recalled[1:]] == ["msg 4", "msg 5"]
        assert m.summary() == "User greeted twice."
        assert len(fake_model.requests) == 1
        prompt = json.dumps(fake_model.requests[0]["messages"])
        assert "msg 0" in prompt and "msg 3" in prompt and "msg 4" not in prompt


def test_summary_memory_names_a_configured_summariser(
    model_server: Server, fake_model: FakeModel
) -> None:
    fake_model.replies = ["never asked"]
    # "extractive" is built into every server, whatever its default.
    with SummaryMemory(
        llm="extractive", window=2, summarize_every=2, target=model_server.target
    ) as m:
        m.add([Message.user(f"msg {i}") for i in range(6)], thread_id="x")
        recalled = m.get(thread_id="x")
        assert recalled[0].role is Role.SYSTEM
        assert "msg 0" in m.summary("x")
        assert fake_model.requests == []
