"""A live windlass-memory server (clients/python/tests/live_server.py) for the adapter's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from live_server import Server, start_server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("server") / "server.log")
    yield running
    running.stop()
