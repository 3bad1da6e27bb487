"""fork / list_threads(forks_of=) against a live server: what the fork holds,
its independence from the parent, the errors, idempotency and Watch."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from conftest import PROGRESS, Collector, Server, start_server
from windlass_memory import (
    BufferMemory,
    ForkResult,
    MemoryServiceError,
    Message,
    Thread,
    WindowMemory,
)


@pytest.fixture
def thread() -> str:
    return f"fk-{uuid.uuid4().hex}"


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


def test_fork_holds_the_parent_messages_up_to_at_seq(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as m:
        m.add([Message.user(str(i)) for i in range(1, 5)], thread_id=thread)
        result = m.fork(thread, f"{thread}-f", at_seq=2)
        assert isinstance(result, ForkResult)
        assert (result.shared_count, result.summary_inherited) == (2, False)
        assert result.thread.thread_id == f"{thread}-f"
        assert result.thread.last_seq == 2
        assert result.thread.parent is not None
        assert (result.thread.parent.thread_id, result.thread.parent.at_seq) == (thread, 2)
        assert result.thread.parent.fork_time is not None
        assert contents(m.get(thread_id=f"{thread}-f")) == ["1", "2"]


def test_the_fork_and_its_parent_change_independently(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as m:
        m.add([Message.user("1"), Message.user("2")], thread_id=thread)
        m.fork(thread, f"{thread}-f")
        m.add(Message.user("fork 3"), thread_id=f"{thread}-f")
        m.add(Message.user("parent 3"), thread_id=thread)
        m.rewind(thread, 1)
        assert contents(m.get(thread_id=f"{thread}-f")) == ["1", "2", "fork 3"]
        assert contents(m.get(thread_id=thread)) == ["1"]
        m.clear(thread_id=thread)
        assert contents(m.get(thread_id=f"{thread}-f")) == ["1", "2", "fork 3"]


def test_fork_errors_name_the_field_and_create_nothing(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as m:
        with pytest.raises(MemoryServiceError) as raised:
            m.fork(thread, f"{thread}-f")
        assert raised.value.code is grpc.StatusCode.NOT_FOUND
        m.add([Message.user("1")], thread_id=thread)
        m.add([Message.user("x")], thread_id=f"{thread}-taken")
        with pytest.raises(MemoryServiceError) as raised:
            m.fork(thread, f"{thread}-taken")
        assert raised.value.code is grpc.StatusCode.ALREADY_EXISTS
        assert raised.value.details.startswith("new_thread_id:")
        with pytest.raises(MemoryServiceError) as raised:
            m.fork(thread, f"{thread}-f", at_seq=5)
        assert raised.value.code is grpc.StatusCode.OUT_OF_RANGE
        with pytest.raises(MemoryServiceError) as raised:
            m.fork(thread, f"{thread}-f", expected_last_seq=7)
        assert raised.value.code is grpc.StatusCode.ABORTED
        with pytest.raises(MemoryServiceError) as raised:
            m.fork(thread, thread)
        assert raised.value.code is grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(ValueError, match="at_seq"):
            m.fork(thread, f"{thread}-f", at_seq=-1)
        with pytest.raises(TypeError, match="new_thread_id"):
            m.fork(thread, None)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="strategy"):
            m.fork(thread, f"{thread}-f", strategy="window")
        assert m.list_threads(forks_of=thread) == []
        assert contents(m.get(thread_id=f"{thread}-taken")) == ["x"]


def test_a_retried_request_id_returns_the_first_fork(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as m:
        m.add([Message.user("1"), Message.user("2")], thread_id=thread)
        first = m.fork(thread, f"{thread}-f", request_id="once")
        m.add(Message.user("3"), thread_id=f"{thread}-f")
        again = m.fork(thread, f"{thread}-f", request_id="once")
        assert again.shared_count == first.shared_count == 2
        assert again.thread.last_seq == 3  # the fork's current state
        with pytest.raises(MemoryServiceError) as raised:
            m.fork(thread, f"{thread}-f")  # a new id: the thread is taken
        assert raised.value.code is grpc.StatusCode.ALREADY_EXISTS


def test_fork_takes_the_given_strategy_labels_and_ttl(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as m:
        m.add([Message.user(str(i)) for i in range(1, 5)], thread_id=thread)
        window = WindowMemory(window=2, target=server.target)
        with window:
            result = m.fork(
                thread,
                f"{thread}-f",
                strategy=window,
                labels={"team": "a"},
                ttl=timedelta(hours=1),
            )
            assert result.thread.labels == {"team": "a"}
            assert result.thread.raw.strategy.WhichOneof("kind") == "window"
            assert result.thread.raw.ttl.seconds == 3600
            assert contents(window.get(thread_id=f"{thread}-f")) == ["3", "4"]


def test_list_threads_lists_the_forks_with_their_origin(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as m:
        m.add([Message.user("1"), Message.user("2")], thread_id=thread)
        m.fork(thread, f"{thread}-b", at_seq=1, labels={"k": "b"})
        m.fork(thread, f"{thread}-a", labels={"k": "a"})
        m.fork(f"{thread}-a", f"{thread}-a2")  # a grandchild: not a direct fork
        assert m.list_threads(forks_of=thread) == [f"{thread}-a", f"{thread}-b"]
        assert m.list_threads(forks_of=thread, labels={"k": "b"}) == [f"{thread}-b"]
        listed = m.list_threads(forks_of=thread, include_threads=True)
        assert all(isinstance(t, Thread) for t in listed)
        assert [(t.thread_id, t.parent.at_seq if t.parent else None) for t in listed] == [
            (f"{thread}-a", 2),
            (f"{thread}-b", 1),
        ]
        assert f"{thread}-a2" in m.list_threads()


def test_afork_and_alist_threads(server: Server, thread: str) -> None:
    async def main() -> tuple[ForkResult, list[str]]:
        with BufferMemory(target=server.target) as m:
            await m.aadd([Message.user("1")], thread_id=thread)
            result = await m.afork(thread, f"{thread}-f")
            return result, await m.alist_threads(forks_of=thread)

    result, forks = asyncio.run(main())
    assert result.shared_count == 1
    assert forks == [f"{thread}-f"]


def test_watch_sees_thread_forked_then_the_fork_adds(tmp_path: Path, thread: str) -> None:
    running = start_server(tmp_path / "server.log", *PROGRESS)
    try:
        with BufferMemory(target=running.target) as m:
            m.add([Message.user("1"), Message.user("2")], thread_id=thread)
            watcher = Collector(m.watch(f"{thread}-f", include_progress=True))
            m.fork(thread, f"{thread}-f", at_seq=1)
            m.add(Message.user("2b"), thread_id=f"{thread}-f")
            forked, added = watcher.take(2)
            assert forked.type == "thread_forked"
            assert (forked.parent_thread_id, forked.at_seq, forked.shared_count) == (thread, 1, 1)
            assert forked.summary_inherited is False
            assert (added.type, added.first_seq, added.last_seq) == ("messages_added", 2, 2)
            watcher.close()
    finally:
        running.stop()
