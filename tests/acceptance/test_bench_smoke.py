"""The benchmark suite cannot rot: its tiny mode runs here (correctness counts only, no
timing is asserted), and its counting is shown to catch lost and doubled work.

``python -m bench.run --tiny`` drives the real processes (``runbell migrate``, ``serve``,
``api``, ``worker``, the load generator, the receiver, the SSE clients) at sizes that take
seconds; it exits 1 if anything sent was lost or doubled and 2 if a benchmark could not
run, so a harness broken by a change in ``src/`` fails this test.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from standardwebhooks.webhooks import Webhook

from bench import targets, verify
from bench.common import Child, CorrectnessError
from bench.servers import Databases
from tests.conftest import IN_CI, PG_URL, _pg_problem
from tests.timeouts import WAIT, scaled

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def tiny(tmp_path: Path, *args: str) -> tuple[str, int]:
    """Run the tiny suite; (the report it wrote, the pid it ran as)."""
    out = tmp_path / "BENCHMARKS.md"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNBELL_")}
    env.update(RUNBELL_BENCH_PG_URL=PG_URL, PYTHONUNBUFFERED="1")
    with subprocess.Popen(
        [sys.executable, "-m", "bench.run", "--tiny", "--out", str(out), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            _, err = proc.communicate(timeout=scaled(600))
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, (
        f"bench.run --tiny {' '.join(args)}: exit {proc.returncode}\n{err[-6000:]}"
    )
    report = out.read_text()
    assert "## Failures" not in report, report
    assert "| NO |" not in report, report
    assert "## Profile" in report
    return report, proc.pid


def rows(report: str) -> dict[str, str]:
    """Report rows by id (first column of the main table)."""
    out = {}
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| P") and len(cells) > 2:
            out[cells[0]] = line
    return out


def test_tiny_suite_on_sqlite(tmp_path: Path) -> None:
    """P1, P2, P5 and P6 on SQLite: every signal stored once, every event delivered once."""
    report, _ = tiny(tmp_path, "--only", "P1,P2,P5,P6", "--db", "sqlite")
    got = rows(report)
    for row_id in (
        "P1 sqlite 1w",
        "P1 sqlite 8w",
        "P2 sqlite",
        "P2 sqlite p99",
        "P5",
        "P5 reads",
        "P5 signal p99",
        "P6 RSS",
        "P6 idle CPU",
        "P6 wake p99",
    ):
        assert row_id in got, f"{row_id} missing from the report:\n{report}"
    assert "Tiny mode: correctness checks only" in report
    # the correctness table has one line per benchmark configuration, all ok
    assert report.count("| yes |") >= 5


@pytest.mark.postgres
def test_tiny_suite_on_postgres(tmp_path: Path) -> None:
    """P3 on PostgreSQL: worker processes drain to the receiver, each message once."""
    problem = _pg_problem()
    if problem is not None:
        if IN_CI:
            pytest.fail(f"CI requires PostgreSQL: {problem}")
        pytest.skip(f"PostgreSQL not reachable: {problem}")
    report, pid = tiny(tmp_path, "--only", "P3", "--db", "postgres")
    assert "P3 2 workers" in rows(report)
    admin = sa.create_engine(PG_URL)
    with admin.connect() as conn:
        left = conn.execute(
            sa.text("SELECT datname FROM pg_database WHERE datname LIKE :p"),
            {"p": f"bench\\_{pid}\\_%"},
        ).all()
    admin.dispose()
    assert left == [], "the temporary databases are dropped at the end"


def test_counting_catches_lost_and_doubled_work(tmp_path: Path) -> None:
    """The checks every benchmark relies on fail when a row is missing or doubled."""
    secret = targets.new_secret_key()
    dbs = Databases(tmp_path, secret)
    db = dbs.sqlite("verify")
    core = targets.open_core(db.url, db.data_dir, secret)
    read = verify.read_engine(db.url)
    try:
        tenant = targets.setup_tenant(core)
        runs = [f"vc-{i}" for i in range(3)]
        targets.create_runs(core, tenant, runs)
        outcomes = [targets.complete_run(core, tenant, r, f"{r}-done") for r in runs]
        assert outcomes == ["applied"] * 3

        def check() -> None:
            verify.check_signals(
                read, tenant.tenant_id, "vc-", tally_id="vc", sent=3, applied=3,
                outcomes={"applied": 3},
            )  # fmt: skip

        check()  # all stored once: passes
        with read.begin() as conn:
            note = conn.execute(
                sa.text("SELECT id FROM notifications WHERE run_id = 'vc-1'")
            ).scalar_one()
            conn.execute(sa.text("DELETE FROM deliveries WHERE notification_id = :n"), {"n": note})
            conn.execute(sa.text("DELETE FROM notifications WHERE id = :n"), {"n": note})
        with pytest.raises(CorrectnessError, match="lost: 2 notifications"):
            check()
        with read.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO transitions (tenant_id, run_id, version, kind, from_state, "
                    "to_state, at) VALUES (:t, 'vc-2', 9, 'state', 'working', 'completed', "
                    "'2026-01-01 00:00:00.000000')"
                ),
                {"t": tenant.tenant_id},
            )
        with pytest.raises(CorrectnessError, match="doubled: 1 runs have more than one"):
            check()
    finally:
        read.dispose()
        targets.close_core(core)
        dbs.close()


def test_receiver_counts_each_webhook_id_once_and_flags_repeats(tmp_path: Path) -> None:
    """The bench receiver (a real process) verifies signatures and reports a repeat."""
    secret = targets.new_webhook_secret()
    with Child(
        "bench.receiver", {"sample": 1}, tmp_path / "rx.log", BENCH_WEBHOOK_SECRET=secret
    ) as rx:
        url = f"http://127.0.0.1:{rx.hello['port']}/hook"
        hook = Webhook(secret)

        def send(msg_id: str, run_id: str, key: Webhook = hook) -> int:
            body = json.dumps(
                {"type": "run.finished", "timestamp": "2026-01-01T00:00:00Z",
                 "data": {"run_id": run_id}}
            )  # fmt: skip
            at = datetime.now(UTC)
            headers = {
                "webhook-id": msg_id,
                "webhook-timestamp": str(int(at.timestamp())),
                "webhook-signature": key.sign(msg_id, at, body),
                "content-type": "application/json",
            }
            return httpx.post(url, content=body, headers=headers, timeout=WAIT).status_code

        assert send("msg_1", "rx-1") == 200
        assert send("msg_2", "rx-2") == 200
        assert send("msg_1", "rx-1") == 200  # a repeat of msg_1
        assert send("msg_3", "rx-3", Webhook(targets.new_webhook_secret())) == 401
        got = rx.call("batch", prefix="rx-", ids=True)
        assert got["unique"] == 2
        assert got["duplicates"] == 1
        assert got["ids"] == ["msg_1", "msg_2"]
        assert got["bad_signatures"] == 1


def test_only_targets_imports_runbell() -> None:
    """Every in-process call into Runbell goes through bench/targets.py, so the coming
    reorganisation of src/runbell changes one bench file."""
    offenders = []
    for path in sorted((REPO / "bench").glob("*.py")):
        if path.name == "targets.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}" for n in names if n == "runbell" or n.startswith("runbell.")
            ]
    assert offenders == []
