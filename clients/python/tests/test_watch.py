"""watch() and awatch() against the real server: events, resume, backoff, resync, close.

The conformance promises of issue 10 for the Python library: a Watch resumes
across a server restart on a SQLite store without losing or repeating an
event; with the server down or failing every call it backs off instead of
spinning; a token the server no longer has raises ResyncRequired.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from conftest import Server, start_server
from windlass_memory import (
    Backoff,
    BufferMemory,
    MemoryServiceError,
    Message,
    ResyncRequired,
    SummaryMemory,
    WatchEvent,
    WatchStream,
)

WAIT_S = 30.0  # upper bound for anything the tests wait for
# Idle streams get a Progress event this often. A Watch without a token starts
# "from now", and its first Progress is the proof that "now" has been fixed:
# the tests wait for it before they add what the stream must see.
PROGRESS = ("--progress-interval-ms", "100")


@pytest.fixture
def thread() -> str:
    return f"w-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("watch") / "server.log", *PROGRESS)
    yield running
    running.stop()


class Collector:
    """Iterates a WatchStream on a thread of its own, queueing events and the error that ended it.

    The stream must include Progress events: the first one sets ``ready``;
    they are not queued.
    """

    def __init__(self, stream: WatchStream, wait_ready: bool = True) -> None:
        self.stream = stream
        self.events: queue.Queue[WatchEvent] = queue.Queue()
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if wait_ready:
            wait_until(self.ready.is_set, "the Watch's first Progress")

    def _run(self) -> None:
        try:
            for event in self.stream:
                if event.type == "progress":
                    self.ready.set()
                    continue
                self.events.put(event)
        except BaseException as error:  # noqa: BLE001 (handed to the test)
            self.error = error
        finally:
            self.ended.set()

    def take(self, count: int) -> list[WatchEvent]:
        taken = []
        deadline = time.monotonic() + WAIT_S
        while len(taken) < count:
            left = deadline - time.monotonic()
            if left <= 0 or self.ended.is_set() and self.events.empty():
                pytest.fail(f"got {len(taken)} of {count} events; error: {self.error!r}")
            try:
                taken.append(self.events.get(timeout=min(left, 0.5)))
            except queue.Empty:
                continue
        return taken

    def close(self) -> None:
        self.stream.close()
        assert self.ended.wait(WAIT_S), "the stream did not end after close()"


def wait_until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


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


def test_a_server_that_is_down_is_retried_with_backoff_not_in_a_loop() -> None:
    # A port where nothing listens: each Watch fails at once with UNAVAILABLE,
    # which is what made the README's old loop spin (about 32,600 calls in 10 s).
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{probe.getsockname()[1]}"
    with BufferMemory(target=target) as memory:
        watcher = Collector(memory.watch("anything"), wait_ready=False)
        window_s = 3.0
        time.sleep(window_s)  # the time IS the behaviour: attempts per window
        attempts = watcher.stream.attempts
        watcher.close()
    # Default Backoff: waits of 0.05-0.1, 0.1-0.2, 0.2-0.4, 0.4-0.8, 0.8-1.6,
    # 1.6-3.2 s: at most 6 calls in 3 s (plus the first); a busy loop makes thousands.
    assert 2 <= attempts <= 8, attempts
    assert watcher.error is None


class FailingWatchServer:
    """A real gRPC server whose Watch answers every call at once with one status."""

    def __init__(self, code: grpc.StatusCode) -> None:
        self.calls = 0
        self.tokens: list[str] = []
        self._lock = threading.Lock()

        def watch(request, context):  # type: ignore[no-untyped-def]
            with self._lock:
                self.calls += 1
                self.tokens.append(request.resume_token)
            context.abort(code, "scripted")
            yield  # pragma: no cover (a generator, for a server-streaming method)

        from windlass.memory.v1 import memory_pb2

        handler = grpc.method_handlers_generic_handler(
            "windlass.memory.v1.MemoryService",
            {
                "Watch": grpc.unary_stream_rpc_method_handler(
                    watch,
                    request_deserializer=memory_pb2.WatchRequest.FromString,
                    response_serializer=memory_pb2.WatchResponse.SerializeToString,
                )
            },
        )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((handler,))
        self.target = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None)


def test_a_server_failing_every_watch_is_called_with_backoff() -> None:
    failing = FailingWatchServer(grpc.StatusCode.UNAVAILABLE)
    try:
        with BufferMemory(target=failing.target) as memory:
            watcher = Collector(memory.watch("t", resume_token="tok-1"), wait_ready=False)
            window_s = 3.0
            time.sleep(window_s)  # the time IS the behaviour: calls per window
            calls = failing.calls
            watcher.close()
    finally:
        failing.stop()
    # Counted by the server: same bound as above.
    assert 2 <= calls <= 8, calls
    assert set(failing.tokens) == {"tok-1"}  # every attempt resumes from the same token


def test_give_up_after_raises_the_last_error() -> None:
    failing = FailingWatchServer(grpc.StatusCode.UNAVAILABLE)
    try:
        with BufferMemory(target=failing.target) as memory:
            started = time.monotonic()
            with pytest.raises(MemoryServiceError) as gave_up:
                for _ in memory.watch("t", backoff=Backoff(initial=0.05, give_up_after=0.5)):
                    pass
            took = time.monotonic() - started
    finally:
        failing.stop()
    assert gave_up.value.code is grpc.StatusCode.UNAVAILABLE
    assert took < WAIT_S
    assert failing.calls >= 2


@pytest.mark.parametrize(
    "code", [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED]
)
def test_errors_a_retry_cannot_fix_are_raised_at_once(code: grpc.StatusCode) -> None:
    failing = FailingWatchServer(code)
    try:
        with BufferMemory(target=failing.target) as memory, pytest.raises(MemoryServiceError) as e:
            next(memory.watch("t"))
    finally:
        failing.stop()
    assert e.value.code is code
    assert failing.calls == 1


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


def test_close_ends_a_stream_waiting_to_retry() -> None:
    failing = FailingWatchServer(grpc.StatusCode.UNAVAILABLE)
    try:
        with BufferMemory(target=failing.target) as memory:
            # A one-minute pause after the first failure: close must cut it short.
            watcher = Collector(
                memory.watch("t", backoff=Backoff(initial=60, maximum=60)), wait_ready=False
            )
            wait_until(lambda: failing.calls == 1, "the first call")
            started = time.monotonic()
            watcher.close()
            assert time.monotonic() - started < WAIT_S
    finally:
        failing.stop()
    assert failing.calls == 1


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
