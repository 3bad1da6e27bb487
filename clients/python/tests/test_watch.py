"""watch() and awatch() against the real server: events, resume, resync, close.

The conformance promises of issue 10 for the Python library: a Watch resumes
across a server restart on a SQLite store without losing or repeating an
event; a token the server no longer has raises ResyncRequired. A server down
or failing every call: test_watch_backoff.py.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from conftest import PROGRESS, WAIT_S, Collector, Server, start_server, wait_until
from windlass_memory import (
    Backoff,
    BufferMemory,
    MemoryServiceError,
    Message,
    ResyncRequired,
    SummaryMemory,
    WatchEvent,
)


@pytest.fixture
def thread() -> str:
    return f"w-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("watch") / "server.log", *PROGRESS)
    yield running
    running.stop()


def test_watch_streams_the_events_of_a_thread(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as memory:
        watcher = Collector(memory.watch(thread, include_progress=True))
        memory.add([Message.user("a"), Message.user("b")], thread_id=thread)
        memory.add(Message.user("x"), thread_id=thread + "-other")  # filtered out
        memory.add(Message.user("c"), thread_id=thread)
        memory.clear(thread_id=thread)
        got = watcher.take(3)
        watcher.close()
    assert [(e.type, e.first_seq, e.last_seq) for e in got] == [
        ("messages_added", 1, 2),
        ("messages_added", 3, 3),
        ("thread_cleared", 0, 0),
    ]
    assert all(e.thread_id == thread and e.time is not None for e in got)
    assert watcher.events.empty()
    assert watcher.error is None


def test_a_rewind_is_a_thread_rewound_event(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as memory:
        watcher = Collector(
            memory.watch(thread, event_types=["thread_rewound"], include_progress=True)
        )
        memory.add([Message.user("a"), Message.user("b"), Message.user("c")], thread_id=thread)
        memory.rewind(thread, 1)
        (got,) = watcher.take(1)
        watcher.close()
    assert (got.type, got.to_seq, got.removed_count, got.summary_dropped) == (
        "thread_rewound", 1, 2, False
    )
    assert watcher.events.empty()


def test_summary_updates_and_initial_state(server: Server, thread: str) -> None:
    with SummaryMemory(window=2, summarize_every=2, target=server.target) as memory:
        memory.add([Message.user(f"point number {i}.") for i in range(6)], thread_id=thread)
        summary = memory.summary(thread)
        assert summary != ""
        with memory.watch(
            thread, event_types=["summary_updated"], send_initial_state=True
        ) as events:
            initial = next(events)
    assert initial.type == "summary_updated"
    assert initial.summary == summary
    assert initial.summarized_through_seq == 4


def test_resume_token_continues_after_the_last_event(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as memory:
        watcher = Collector(memory.watch(thread, include_progress=True))
        memory.add(Message.user("one"), thread_id=thread)
        first = watcher.take(1)[0]
        watcher.close()
        memory.add(Message.user("two"), thread_id=thread)
        memory.add(Message.user("three"), thread_id=thread)
        with memory.watch(thread, resume_token=first.resume_token) as events:
            later = [next(events), next(events)]
    assert [(e.first_seq, e.last_seq) for e in later] == [(2, 2), (3, 3)]


def test_watch_resumes_across_a_restart_of_a_sqlite_server(tmp_path: Path, thread: str) -> None:
    database = tmp_path / "memory.sqlite"
    log = tmp_path / "server.log"
    store = ("--store", f"sqlite:{database}", *PROGRESS)
    first = start_server(log, *store)
    port = int(first.target.rsplit(":", 1)[1])
    memory = BufferMemory(target=first.target)
    second: Server | None = None
    watcher = Collector(
        memory.watch(thread, include_progress=True, backoff=Backoff(initial=0.05, maximum=0.5))
    )
    try:
        for i in range(3):
            memory.add(Message.user(f"before {i}"), thread_id=thread)
        before = watcher.take(3)
        first.stop()  # SIGTERM: the stream ends with UNAVAILABLE
        # The server is down: Adds are impossible, the watcher keeps trying.
        wait_until(lambda: watcher.stream.attempts >= 3, "the watcher to retry")
        second = start_server(log, *store, port=port)
        # The client's channel reconnects on its own backoff (capped at 5 s);
        # the Adds wait for it, not for luck.
        grpc.channel_ready_future(memory._channel).result(timeout=60)
        # Most likely before the watcher is back: the token, not luck, must
        # bring these.
        for i in range(3):
            memory.add(Message.user(f"after {i}"), thread_id=thread)
        after = watcher.take(3)
        memory.add(Message.user("last"), thread_id=thread)
        last = watcher.take(1)
        watcher.close()
    finally:
        memory.close()
        watcher.stream.close()
        first.stop()
        if second is not None:
            second.stop()
    got = [(e.first_seq, e.last_seq) for e in before + after + last]
    assert got == [(seq, seq) for seq in range(1, 8)], "an event was lost or repeated"
    assert watcher.events.empty(), "an event was repeated"
    assert watcher.error is None


def test_a_token_older_than_the_history_raises_resync_required(tmp_path: Path, thread: str) -> None:
    small = start_server(tmp_path / "server.log", "--event-retention", "10", *PROGRESS)
    try:
        with BufferMemory(target=small.target) as memory:
            watcher = Collector(memory.watch(thread, include_progress=True))
            memory.add(Message.user("first"), thread_id=thread)
            stale = watcher.take(1)[0].resume_token
            watcher.close()
            for i in range(40):
                memory.add(Message.user(f"more {i}"), thread_id=thread)
            with pytest.raises(ResyncRequired) as resync:
                next(memory.watch(thread, resume_token=stale))

            async def first_async_event() -> None:
                async for _ in memory.awatch(thread, resume_token=stale):
                    pass

            with pytest.raises(ResyncRequired):
                asyncio.run(asyncio.wait_for(first_async_event(), WAIT_S))
            # What the caller does next: re-read, then watch from now.
            assert len(memory.get(thread_id=thread)) == 41
    finally:
        small.stop()
    assert resync.value.code is grpc.StatusCode.OUT_OF_RANGE
    assert resync.value.resume_token == stale
    assert isinstance(resync.value, MemoryServiceError)


def test_close_from_another_thread_ends_a_waiting_stream(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as memory:
        watcher = Collector(memory.watch(thread, include_progress=True))
        assert not watcher.ended.is_set()
        watcher.close()  # asserts the iteration ended
    assert watcher.error is None
    assert watcher.stream.closed


def test_watch_arguments_are_checked(server: Server) -> None:
    with BufferMemory(target=server.target) as memory:
        with pytest.raises(TypeError, match=r"thread_ids\[1\]: expected str"):
            memory.watch(["a", 2])  # type: ignore[list-item]
        with pytest.raises(ValueError, match=r"event_types\[0\]"):
            memory.watch("a", event_types=["summary"])
        with pytest.raises(TypeError, match="resume_token"):
            memory.watch("a", resume_token=5)  # type: ignore[arg-type]


def test_async_watch(server: Server, thread: str) -> None:
    async def scenario() -> list[WatchEvent]:
        with BufferMemory(target=server.target) as memory:
            got: list[WatchEvent] = []
            async with memory.awatch(thread, include_progress=True) as events:
                first = await events.__anext__()
                assert first.type == "progress"  # the stream is positioned
                await memory.aadd([Message.user("a"), Message.user("b")], thread_id=thread)
                await memory.aadd(Message.user("c"), thread_id=thread)
                async for event in events:
                    if event.type == "progress":
                        continue
                    got.append(event)
                    if len(got) == 2:
                        break
            return got

    got = asyncio.run(asyncio.wait_for(scenario(), WAIT_S))
    assert [(e.first_seq, e.last_seq) for e in got] == [(1, 2), (3, 3)]


def test_cancelling_the_task_closes_an_async_watch(server: Server, thread: str) -> None:
    async def scenario() -> bool:
        with BufferMemory(target=server.target) as memory:
            events = memory.awatch(thread)

            async def consume() -> None:
                async for _ in events:
                    pass

            task = asyncio.create_task(consume())
            while events.attempts == 0:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return events._stream.closed

    assert asyncio.run(asyncio.wait_for(scenario(), WAIT_S))
