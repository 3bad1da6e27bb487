"""Every Python example of this package's README, run as written, in order, on one fresh server.

Each runs in a new interpreter (``python snippet.py``), as a reader would run
it, with ``WINDLASS_MEMORY_TARGET`` pointing at the test's server; what it
prints is checked against what the README says it prints.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Server
from live_server import python_blocks, run_snippet

README = Path(__file__).resolve().parents[1] / "README.md"

# What each example prints (a line, or a part of one), in README order.
EXPECTED = [
    ["['two', 'three']"],
    ["weather {'city': 'Oslo'}"],
    ["['Book me a table for two.']", "''"],
    ["{'role': 'assistant', 'content': None, 'tool_calls': [{'id': 'toolu_1'"],
    ["['system', 'user', 'assistant', 'tool']", "read_report call r1, 25 tokens]", "1 True"],
    ["summary: "],
    ["summarized through seq 2"],
    ["oops", "1 1", "['one']"],
    ["tool_call_id", "thread_id: expected str, not int", "[]"],
]


def test_every_readme_example_runs_in_order(fresh_server: Server, tmp_path: Path) -> None:
    blocks = python_blocks(README)
    assert len(blocks) == len(EXPECTED), "a README example was added or removed: update EXPECTED"
    for code, expected in zip(blocks, EXPECTED, strict=True):
        output = run_snippet(code, fresh_server.target, tmp_path)
        for part in expected:
            assert part in output, f"{part!r} not printed by:\n{code}\n--- it printed:\n{output}"
