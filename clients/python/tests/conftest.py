"""Fixtures: a live windlass-memory server, and a fake OpenAI-compatible model.

Both are in live_server.py, shared with the framework adapters' tests.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from live_server import FakeModel, Server, model_handler, start_server

__all__ = ["FakeModel", "Server", "start_server"]


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
