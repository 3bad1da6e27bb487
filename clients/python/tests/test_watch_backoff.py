"""watch() against a server that is down or failing: backoff, giving up, close.

The conformance promise of issue 10 that a Watch with the server down or
failing every call backs off instead of spinning; errors a retry cannot fix
are raised at once. The failing server is a real gRPC server of the test's.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
import pytest

from conftest import WAIT_S, Collector, wait_until
from windlass_memory import Backoff, BufferMemory, MemoryServiceError


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
