"""The Python runner of the conformance suite: every case of ../cases against
the compiled command, per store (CONFORMANCE_STORES, default memory, sqlite,
redis, postgres), over gRPC with grpcio and the generated windlass.memory.v1 stub.

Run from the repository root after `npm run build` and
`bash scripts/setup-clients.sh`:
    .venv/bin/python -m pytest test/conformance/python
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conformance import Case, ServerPool, load_cases, run_case, stores_from_env

CASES = load_cases()
STORES = stores_from_env()
TALLY = {"passed": 0, "failed": 0}


@pytest.fixture(scope="session")
def pool() -> Iterator[ServerPool]:
    servers = ServerPool()
    yield servers
    servers.close()


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_conformance(pool: ServerPool, store: str, case: Case) -> None:
    try:
        server = pool.get(store, case)
        run_case(case, server.client, server.model)
    except BaseException:
        TALLY["failed"] += 1
        raise
    TALLY["passed"] += 1
