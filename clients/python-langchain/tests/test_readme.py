"""This adapter's README examples, run as written on a fresh server (python snippet.py).

They run with every warning an error: our own examples use no deprecated API.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from live_server import Server, python_blocks, run_snippet, start_server

README = Path(__file__).resolve().parents[1] / "README.md"
# What the example prints (parts of lines).
EXPECTED = [
    [
        "A coat and an umbrella.",
        "system | Summary of the earlier conversation:",
        'assistant called weather({"city": "Oslo"})',
        "user | What should I wear?",
    ],
    [
        "weather {'city': 'Oslo'}",
        "3 degrees in Oslo.",
        "['HumanMessage', 'AIMessage', 'ToolMessage', 'AIMessage']",
    ]
]


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path / "server.log")
    yield running
    running.stop()


def test_the_readme_examples_run(
    fresh_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONWARNINGS", "error")
    blocks = python_blocks(README)
    assert len(blocks) == len(EXPECTED), "a README example was added or removed: update EXPECTED"
    for code, expected in zip(blocks, EXPECTED, strict=True):
        output = run_snippet(code, fresh_server.target, tmp_path)
        for part in expected:
            assert part in output, f"{part!r} not printed by:\n{code}\n--- it printed:\n{output}"
