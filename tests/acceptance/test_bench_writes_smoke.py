"""The run-write benchmarks of issue 21 cannot rot: P2-put (creating PUTs) and P2-mixed
(an agent's create, progress, ask, answer, completed) in tiny mode, correctness only.

Each counts what it sent against the database (every ``201`` one stored run with one
creation; every agent one completed run, one answered request, one response and five
progress events); ``bench.run`` exits 1 when anything was lost or doubled.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.acceptance.test_bench_smoke import rows, tiny

pytestmark = pytest.mark.slow


def test_tiny_run_writes_on_sqlite(tmp_path: Path) -> None:
    report, _ = tiny(tmp_path, "--only", "P2-put,P2-mixed", "--db", "sqlite")
    got = rows(report)
    for row_id in ("P2-put", "P2-put p99", "P2-mixed"):
        assert row_id in got, f"{row_id} missing from the report:\n{report}"
    assert "server CPU per request: PUT" in report
    # one correctness line per benchmark, both ok
    assert report.count("| yes |") >= 2
