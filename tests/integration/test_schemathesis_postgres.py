"""The schemathesis run of ``test_schemathesis.py`` on PostgreSQL, in a file of its own so
that xdist (which keeps a file on one worker) runs it beside the SQLite one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_schemathesis import run_schemathesis


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_schemathesis_finds_no_contract_violation(tmp_path: Path, db_url: str) -> None:
    run_schemathesis(tmp_path, db_url)
