"""The memory classes against a live server: parameters, errors, auth."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import grpc
import pytest
from windlass.memory.v1 import memory_pb2, memory_pb2_grpc

from conftest import FakeModel, Server, start_server
from windlass_memory import (
    BufferMemory,
    MemoryServiceError,
    Message,
    Role,
    SummaryMemory,
    ToolCall,
    WindowMemory,
)


@pytest.fixture
def thread() -> str:
    """A thread id no other test uses, on the shared server."""
    return f"t-{uuid.uuid4().hex}"


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


def test_buffer_returns_everything_or_the_newest_max_messages(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as everything:
        everything.add([Message.user(str(i)) for i in range(5)], thread_id=thread)
        assert contents(everything.get(thread_id=thread)) == ["0", "1", "2", "3", "4"]
        assert contents(everything.get(thread_id=thread, limit=2)) == ["3", "4"]
    with BufferMemory(max_messages=3, target=server.target) as newest:
        newest.add([Message.user(str(i)) for i in range(5)], thread_id=thread + "-3")
        assert contents(newest.get(thread_id=thread + "-3")) == ["2", "3", "4"]


def test_max_stored_drops_the_oldest(server: Server, thread: str) -> None:
    with BufferMemory(max_stored=3, target=server.target) as m:
        for i in range(5):
            m.add(Message.user(str(i)), thread_id=thread)
        assert contents(m.get(thread_id=thread)) == ["2", "3", "4"]


def test_window_limit_overrides_the_window_and_query_is_ignored(
    server: Server, thread: str
) -> None:
    with WindowMemory(window=2, target=server.target) as m:
        m.add([Message.user(str(i)) for i in range(5)], thread_id=thread)
        assert contents(m.get(thread_id=thread, limit=3, query="anything")) == ["2", "3", "4"]
        # 0 and negative sizes return everything, as in the original.
        assert len(m.get(thread_id=thread, limit=0)) == 5
        assert len(m.get(thread_id=thread, limit=-1)) == 5


def test_window_never_starts_on_an_orphaned_tool_result(server: Server, thread: str) -> None:
    calls = [ToolCall("c1", "weather", {"city": "Oslo"}), ToolCall("c2", "time", "{}")]
    transcript = [
        Message.user("weather and time in Oslo?"),
        Message.assistant("", tool_calls=calls),
        Message.tool('{"temp": 3}', tool_call_id="c1"),
        Message.tool('{"time": "12:00"}', tool_call_id="c2"),
        Message.assistant("3 degrees at noon."),
    ]
    with WindowMemory(window=2, target=server.target) as m:
        m.add(transcript, thread_id=thread)
        recalled = m.get(thread_id=thread)
        # The newest 2 would start on the second tool result: widened to the call.
        assert recalled == transcript[1:]
        assert recalled[0].tool_calls == tuple(calls)
        assert recalled[0].tool_calls[0].parsed_arguments() == {"city": "Oslo"}
        assert recalled[1].tool_call_id == "c1"


def test_messages_round_trip_with_every_field(server: Server, thread: str) -> None:
    sent = Message(
        Role.ASSISTANT,
        "calling",
        name="planner",
        tool_calls=[ToolCall("c1", "search", '{"q": "x"}')],
        metadata={"trace": "abc"},
    )
    with BufferMemory(target=server.target) as m:
        m.add(sent, thread_id=thread)
        (got,) = m.get(thread_id=thread)
    assert got == sent
    assert got.seq == 1
    assert got.create_time is not None and got.create_time.tzinfo is not None


def test_return_system_false_leaves_system_messages_out(server: Server, thread: str) -> None:
    with BufferMemory(return_system=False, target=server.target) as m:
        m.add([Message.system("be brief"), Message.user("hi")], thread_id=thread)
        assert contents(m.get(thread_id=thread)) == ["hi"]


def test_messages_of_the_original_module_are_accepted(server: Server, thread: str) -> None:
    # Shaped like windlass.core.types: a Role enum of its own, dict arguments.
    class OriginalRole(Enum):
        USER = "user"
        ASSISTANT = "assistant"

    @dataclass
    class OriginalToolCall:
        id: str
        name: str
        arguments: dict[str, int]

    @dataclass
    class OriginalMessage:
        role: OriginalRole
        content: str | None
        tool_calls: list[OriginalToolCall] | None = None

    with BufferMemory(target=server.target) as m:
        m.add(
            [
                OriginalMessage(OriginalRole.USER, "hi"),
                OriginalMessage(
                    OriginalRole.ASSISTANT, None, [OriginalToolCall("c", "f", {"n": 1})]
                ),
            ],
            thread_id=thread,
        )
        user, assistant = m.get(thread_id=thread)
    assert (user.role, user.content) == (Role.USER, "hi")
    assert assistant.tool_calls[0].parsed_arguments() == {"n": 1}


def test_adding_nothing_is_a_no_op(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as m:
        m.add([], thread_id=thread)
        assert thread not in m.threads()


def test_a_bad_message_is_refused_with_the_field_named(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as m:
        with pytest.raises(MemoryServiceError) as refused:
            m.add(Message(Role.TOOL, "result without a call id"), thread_id=thread)
    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "tool_call_id" in refused.value.details


def thread_strategy(server: Server, thread: str) -> str:
    """The kind of strategy the service keeps for the thread, read past the client."""
    with grpc.insecure_channel(server.target) as channel:
        got = memory_pb2_grpc.MemoryServiceStub(channel).Get(
            memory_pb2.GetRequest(thread_id=thread, allow_stale=True)
        )
    return str(got.thread.strategy.WhichOneof("kind"))


def test_each_object_reads_its_own_view_and_keeps_the_threads_strategy(
    server: Server, thread: str
) -> None:
    # As the original's objects each applied their own window: the first
    # object makes the thread; the others add to it without failing, and
    # without changing its strategy, and each reads with its own.
    with (
        WindowMemory(window=2, target=server.target) as two,
        WindowMemory(window=1, target=server.target) as one,
        BufferMemory(target=server.target) as everything,
        BufferMemory(max_messages=3, return_system=False, target=server.target) as ceiling,
    ):
        two.add(Message.user("one"), thread_id=thread)
        one.add(Message.system("be brief"), thread_id=thread)
        everything.add([Message.user("two"), Message.user("three")], thread_id=thread)
        assert thread_strategy(server, thread) == "window"
        assert contents(two.get(thread_id=thread)) == ["two", "three"]
        assert contents(one.get(thread_id=thread)) == ["three"]
        assert contents(everything.get(thread_id=thread)) == ["one", "be brief", "two", "three"]
        assert contents(ceiling.get(thread_id=thread)) == ["one", "two", "three"]
        assert contents(one.get(thread_id=thread, limit=3)) == ["be brief", "two", "three"]


def test_the_async_twins_read_and_add_their_own_view(server: Server, thread: str) -> None:
    async def main() -> None:
        with (
            WindowMemory(window=2, target=server.target) as two,
            WindowMemory(window=1, target=server.target) as one,
        ):
            await two.aadd([Message.user("a"), Message.user("b")], thread_id=thread)
            await one.aadd(Message.user("c"), thread_id=thread)
            assert contents(await one.aget(thread_id=thread)) == ["c"]
            assert contents(await two.aget(thread_id=thread)) == ["b", "c"]

    asyncio.run(main())


def test_replace_strategy_still_replaces_the_threads(server: Server, thread: str) -> None:
    with WindowMemory(window=2, target=server.target) as window:
        window.add(Message.user("one"), thread_id=thread)
    with BufferMemory(target=server.target, replace_strategy=True) as buffer:
        buffer.add([Message.user("two"), Message.user("three")], thread_id=thread)
        assert contents(buffer.get(thread_id=thread)) == ["one", "two", "three"]
    assert thread_strategy(server, thread) == "buffer"


def test_a_summary_object_makes_a_window_thread_a_summary_thread(
    server: Server, thread: str
) -> None:
    with (
        WindowMemory(window=20, target=server.target) as window,
        SummaryMemory(window=2, summarize_every=2, target=server.target) as summary,
    ):
        window.add([Message.user(f"msg {i}") for i in range(5)], thread_id=thread)
        summary.add(Message.user("msg 5"), thread_id=thread)
        assert thread_strategy(server, thread) == "summary"
        recalled = summary.get(thread_id=thread)
        assert recalled[0].role is Role.SYSTEM
        assert contents(recalled[1:]) == ["msg 4", "msg 5"]
        assert "msg 3" in summary.summary(thread)
        # The window object still reads its own window, folded messages included.
        assert contents(window.get(thread_id=thread)) == [f"msg {i}" for i in range(6)]
        window.add(Message.user("msg 6"), thread_id=thread)
        assert thread_strategy(server, thread) == "summary"


def test_a_summary_object_upgrades_a_thread_from_aadd_too(server: Server, thread: str) -> None:
    async def main() -> None:
        with (
            BufferMemory(target=server.target) as buffer,
            SummaryMemory(window=1, summarize_every=1, target=server.target) as summary,
        ):
            buffer.add([Message.user("x"), Message.user("y")], thread_id=thread)
            await summary.aadd(Message.user("z"), thread_id=thread)
            assert thread_strategy(server, thread) == "summary"
            recalled = await summary.aget(thread_id=thread)
            assert recalled[0].role is Role.SYSTEM
            assert contents(recalled[1:]) == ["z"]

    asyncio.run(main())


def test_clear_and_threads(fresh_server: Server) -> None:
    with BufferMemory(target=fresh_server.target) as m:
        assert m.threads() == []
        for thread_id in ("b", "a", "c"):
            m.add(Message.user("hi"), thread_id=thread_id)
        assert m.threads() == ["a", "b", "c"]
        m.clear(thread_id="b")
        assert m.threads() == ["a", "c"]
        assert m.get(thread_id="b") == []
        m.clear()
        assert m.threads() == []


def test_threads_reads_every_page(fresh_server: Server) -> None:
    with BufferMemory(target=fresh_server.target) as m:
        ids = [f"thread-{i:04d}" for i in range(1005)]
        for thread_id in ids:
            m.add(Message.user("hi"), thread_id=thread_id)
        assert m.threads() == ids


def test_summary_memory_with_the_built_in_summariser(server: Server, thread: str) -> None:
    with SummaryMemory(window=2, summarize_every=2, target=server.target) as m:
        assert m.summary(thread) == ""
        m.add([Message.user(f"msg {i}") for i in range(6)], thread_id=thread)
        recalled = m.get(thread_id=thread)
        assert recalled[0].role is Role.SYSTEM
        assert recalled[0].seq == 0
        assert contents(recalled[1:]) == ["msg 4", "msg 5"]
        assert "msg 3" in m.summary(thread)
        # Adding again with the same strategy (the model name left to the
        # server) is accepted.
        m.add(Message.user("msg 6"), thread_id=thread)


def test_summary_memory_takes_a_model_object_and_uses_the_servers_summariser(
    server: Server, thread: str
) -> None:
    class SomeLLM:  # the original's model objects: kept, never called
        pass

    model = SomeLLM()
    with SummaryMemory(llm=model, window=2, summarize_every=2, target=server.target) as m:
        assert m.llm is model
        m.add([Message.user(f"msg {i}") for i in range(6)], thread_id=thread)
        # The server's default here is the extractive summariser.
        assert "msg 0" in m.summary(thread)


def test_a_failed_summary_degrades_to_a_window_and_is_logged(
    model_server: Server, fake_model: FakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    fake_model.replies = [500]
    with SummaryMemory(window=2, summarize_every=2, target=model_server.target) as m:
        m.add([Message.user(f"msg {i}") for i in range(6)], thread_id="t")
        with caplog.at_level(logging.WARNING, logger="windlass_memory"):
            recalled = m.get(thread_id="t")
    # The original: "memory degrades to a plain window rather than breaking
    # the conversation".
    assert contents(recalled) == ["msg 4", "msg 5"]
    assert "summary not up to date" in caplog.text


def test_unknown_summariser_is_refused(server: Server, thread: str) -> None:
    with SummaryMemory(llm="no-such-model", target=server.target) as m:
        with pytest.raises(MemoryServiceError) as refused:
            m.add(Message.user("hi"), thread_id=thread)
    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "model" in refused.value.details


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(
        tmp_path / "server.log", env={"WINDLASS_AUTH_TOKENS": "tok-a=team-a,tok-b=team-b"}
    )
    yield running
    running.stop()


def test_tokens_choose_the_namespace(auth_server: Server) -> None:
    with (
        BufferMemory(target=auth_server.target, token="tok-a") as team_a,
        BufferMemory(target=auth_server.target, token="tok-b") as team_b,
        BufferMemory(target=auth_server.target) as anonymous,
    ):
        team_a.add(Message.user("for a"), thread_id="shared-name")
        assert contents(team_a.get(thread_id="shared-name")) == ["for a"]
        assert team_b.get(thread_id="shared-name") == []
        assert team_b.threads() == []
        with pytest.raises(MemoryServiceError) as refused:
            anonymous.threads()
        assert refused.value.code is grpc.StatusCode.UNAUTHENTICATED


def test_a_channel_passed_in_is_used_and_left_open(server: Server, thread: str) -> None:
    channel = grpc.insecure_channel(server.target)
    try:
        with BufferMemory(channel=channel) as m:
            m.add(Message.user("hi"), thread_id=thread)
        # Closing the memory did not close the caller's channel.
        with BufferMemory(channel=channel) as again:
            assert contents(again.get(thread_id=thread)) == ["hi"]
    finally:
        channel.close()


def test_target_comes_from_the_environment(
    server: Server, thread: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WINDLASS_MEMORY_TARGET", server.target)
    with BufferMemory() as m:
        assert m.target == server.target
        m.add(Message.user("hi"), thread_id=thread)


def test_an_unreachable_server_is_unavailable() -> None:
    with BufferMemory(target="127.0.0.1:1", timeout=5) as m:
        with pytest.raises(MemoryServiceError) as failed:
            m.get()
    assert failed.value.code is grpc.StatusCode.UNAVAILABLE
