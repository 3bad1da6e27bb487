"""The Python runner's matcher, error matcher and $ref substitution, checked
against every row of ../matcher-cases.json (the table the TypeScript and Go
runners are tested against too), plus the case loader."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conformance import _ABSENT, CASES_DIR, load_cases, match, match_error, resolve_refs

TABLE: dict[str, Any] = json.loads((CASES_DIR.parent / "matcher-cases.json").read_text("utf-8"))


def _rows(kind: str) -> list[Any]:
    return [pytest.param(row, id=row["name"]) for row in TABLE[kind]]


@pytest.mark.parametrize("row", _rows("match"))
def test_match(row: dict[str, Any]) -> None:
    diff = match(row["expected"], row["actual"] if "actual" in row else _ABSENT)
    if row["matches"]:
        assert diff is None
    else:
        assert diff is not None
        assert row.get("diff", "") in diff


@pytest.mark.parametrize("row", _rows("matchError"))
def test_match_error(row: dict[str, Any]) -> None:
    diff = match_error(row["expected"], row["code"], row["message"])
    assert (diff is None) == row["matches"], diff


@pytest.mark.parametrize("row", _rows("resolveRefs"))
def test_resolve_refs(row: dict[str, Any]) -> None:
    if "error" in row:
        with pytest.raises(LookupError, match=row["error"]):
            resolve_refs(row["value"], row["saved"])
    else:
        assert resolve_refs(row["value"], row["saved"]) == row["result"]


def test_the_table_covers_every_rule() -> None:
    operators = {
        next(iter(row["expected"]))
        for row in TABLE["match"]
        if isinstance(row["expected"], dict) and len(row["expected"]) == 1
    }
    assert {"$contains", "$nonEmpty", "$not"} <= operators
    assert any(row["matches"] for row in TABLE["match"])
    assert any(not row["matches"] for row in TABLE["match"])


def test_loads_every_case_file_with_unique_names() -> None:
    cases = load_cases()
    assert len(cases) > 30
    assert len({c.name for c in cases}) == len(cases)
