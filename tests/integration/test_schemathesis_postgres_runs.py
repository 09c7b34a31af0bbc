"""The schemathesis run of ``test_schemathesis.py`` on PostgreSQL, for the ``/v1/runs`` and
``/v1/me`` operations: half of the run's cost, in a file of its own so that xdist runs it
beside the other half (``test_schemathesis_postgres.py``) on another worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_schemathesis import RUNS_AND_ME_SHARE, run_schemathesis


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_schemathesis_finds_no_contract_violation(tmp_path: Path, db_url: str) -> None:
    run_schemathesis(tmp_path, db_url, RUNS_AND_ME_SHARE)
