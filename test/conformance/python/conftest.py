"""Prints the runner's closing line after the pytest summary."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    import test_conformance as t

    terminalreporter.write_line(
        f"conformance python: {len(t.CASES)} cases × {len(t.STORES)} stores: "
        f"{t.TALLY['passed']} passed, {t.TALLY['failed']} failed"
    )
