"""This adapter's README example, run as written on a fresh server (python snippet.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from live_server import Server, python_blocks, run_snippet, start_server

README = Path(__file__).resolve().parents[1] / "README.md"
EXPECTED = [
    [
        "3 degrees in Oslo: bring a coat.",
        "You asked about Oslo.",
        "['message', 'message', 'message']",
        "'You asked about Oslo.'",
    ],
]


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path / "server.log")
    yield running
    running.stop()


def test_the_readme_example_runs(fresh_server: Server, tmp_path: Path) -> None:
    blocks = python_blocks(README)
    assert len(blocks) == len(EXPECTED), "a README example was added or removed: update EXPECTED"
    for code, expected in zip(blocks, EXPECTED, strict=True):
        output = run_snippet(code, fresh_server.target, tmp_path)
        for part in expected:
            assert part in output, f"{part!r} not printed by:\n{code}\n--- it printed:\n{output}"
