"""The schemathesis run of ``test_schemathesis.py`` on PostgreSQL, for every operation but
those of ``test_schemathesis_postgres_runs.py`` (the other half): in files of their own so
that xdist (which keeps a file on one worker) runs the halves and the SQLite run side by
side. ``test_schemathesis.py``'s docstring says which phases run here and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_schemathesis import OTHERS_SHARE, run_schemathesis


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_schemathesis_finds_no_contract_violation(tmp_path: Path, db_url: str) -> None:
    run_schemathesis(tmp_path, db_url, OTHERS_SHARE)
