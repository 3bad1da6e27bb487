"""Fixtures: a live windlass-memory server, and a fake OpenAI-compatible model.

Both are in live_server.py, shared with the framework adapters' tests. Also
what the Watch tests (test_watch.py, test_watch_backoff.py) share: a thread
that collects a stream's events, and waiting for a condition.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from live_server import FakeModel, Server, model_handler, start_server
from windlass_memory import WatchEvent, WatchStream

__all__ = ["PROGRESS", "WAIT_S", "Collector", "FakeModel", "Server", "start_server", "wait_until"]


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server with the defaults (memory store, extractive summariser)."""
    running = start_server(tmp_path_factory.mktemp("server") / "server.log")
    yield running
    running.stop()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Server]:
    """A server of the test's own, for tests about every thread there is."""
    running = start_server(tmp_path / "server.log")
    yield running
    running.stop()


@pytest.fixture
def fake_model() -> Iterator[FakeModel]:
    """A fake model; set ``replies`` before the server calls it."""
    model = FakeModel(replies=["(no reply scripted)"])
    http = ThreadingHTTPServer(("127.0.0.1", 0), model_handler(model))
    model.base_url = f"http://127.0.0.1:{http.server_address[1]}/v1"
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    yield model
    http.shutdown()
    http.server_close()


@pytest.fixture
def model_server(tmp_path: Path, fake_model: FakeModel) -> Iterator[Server]:
    """A server whose default summariser is the fake model ("openai")."""
    running = start_server(
        tmp_path / "server.log",
        "--summarizer",
        "openai",
        "--openai-base-url",
        fake_model.base_url,
        "--openai-max-retries",
        "0",
    )
    yield running
    running.stop()


WAIT_S = 30.0  # upper bound for anything the tests wait for
# Idle streams get a Progress event this often. A Watch without a token starts
# "from now", and its first Progress is the proof that "now" has been fixed:
# the tests wait for it before they add what the stream must see.
PROGRESS = ("--progress-interval-ms", "100")


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
