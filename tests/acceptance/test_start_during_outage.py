"""Processes that start while PostgreSQL is down (issue 16 row 4): `runbell api`, `runbell
worker` and `runbell migrate` wait, retrying with backoff and one ``database.waiting`` log
line per attempt, and come up once the database is back; with the database never back they
exit 3 within RUNBELL_DB_START_TIMEOUT_S with one line and no traceback.

A private cluster (``tests.pgcluster``; the shared one is never touched) is created and
stopped before the processes start; the test starts it again. The processes are real
children, started at the same moment on the same empty database (so their first
migrations also take turns: ``runbell.store.migrate.MIGRATION_LOCK``).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.acceptance.processes import ApiProc
from tests.acceptance.test_worker_processes import RUNBELL, WorkerProc, child_env, wait_for
from tests.conftest import IN_CI
from tests.pgcluster import PgCluster, PgUnavailable
from tests.timeouts import WAIT, scaled

pytestmark = pytest.mark.postgres

WAITING = re.compile(r"database\.waiting\s.*\battempt=(\d+)")


@pytest.fixture
def stopped_cluster() -> Iterator[PgCluster]:
    """A private cluster, created (initdb) and then stopped: nothing listens on its port."""
    try:
        pg = PgCluster.create()
    except PgUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI requires a PostgreSQL server installation: {exc}")
        pytest.skip(str(exc))
    with pg:
        pg.stop()
        yield pg


class MigrateProc(WorkerProc):
    """`runbell migrate` as a child: it is ready when it has exited 0."""

    def launch(self) -> None:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [RUNBELL, "migrate"], env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def ready(self) -> None:
        assert self.proc is not None
        code = self.proc.wait(timeout=scaled(120))
        assert code == 0, self.output[-4000:]
        assert "schema at revision" in self.output, self.output[-4000:]


def attempts(output: str) -> list[int]:
    """The attempt numbers of the ``database.waiting`` lines, in order."""
    return [int(n) for n in WAITING.findall(output)]


def test_processes_started_while_postgres_is_down_wait_and_come_up(
    tmp_path: Path, stopped_cluster: PgCluster
) -> None:
    env = child_env(tmp_path, stopped_cluster.url(), RUNBELL_DB_START_TIMEOUT_S=str(scaled(300)))
    api = ApiProc(env, tmp_path / "api.log")
    procs: list[WorkerProc] = [
        api,
        WorkerProc(env, tmp_path / "worker.log"),
        MigrateProc(env, tmp_path / "migrate.log"),
    ]
    with ExitStack() as stack:
        for proc in procs:
            stack.callback(proc.kill)
            proc.launch()
        # Each waits (alive) and retries: two attempts logged, none exited.
        wait_for(
            lambda: all(len(attempts(p.output)) >= 2 for p in procs),
            "every process to retry while the database is down",
            procs,
            timeout=scaled(120),
        )
        stopped_cluster.start()
        for proc in procs:
            proc.ready()  # api: /readyz answers 200; worker: worker.started; migrate: exit 0
        for proc in procs:
            output = proc.output
            assert "Traceback" not in output, output[-4000:]
            tried = attempts(output)
            # One line per failed attempt, numbered 1, 2, 3, … (no attempt logged twice).
            assert tried == list(range(1, len(tried) + 1)), output[-4000:]
            assert output.count("database.waiting") == len(tried), output[-4000:]
            for line in output.splitlines():
                if "database.waiting" in line:
                    assert "reason=unreachable" in line and "retry_in_s=" in line, line
        for proc in procs[:2]:
            assert proc.stop() == 0, proc.output[-4000:]


@pytest.mark.parametrize("command", ["api", "worker", "migrate"])
def test_processes_give_up_after_the_start_timeout_with_one_line(
    tmp_path: Path, stopped_cluster: PgCluster, command: str
) -> None:
    """The database never comes back: exit 3 once RUNBELL_DB_START_TIMEOUT_S is spent, with
    one line naming the cause and the setting, and a hint (besides one log line per attempt)."""
    env = child_env(tmp_path, stopped_cluster.url(), RUNBELL_DB_START_TIMEOUT_S="2")
    args = [command, *(["--port", "0"] if command == "api" else [])]
    res = subprocess.run(
        [RUNBELL, *args], env=env, capture_output=True, text=True, timeout=WAIT * 4, check=False
    )
    output = res.stdout + res.stderr
    assert res.returncode == 3, output
    assert "Traceback" not in output, output
    assert attempts(res.stderr), output  # it did retry
    said = [line for line in res.stderr.splitlines() if "database.waiting" not in line]
    assert len(said) == 2 and said[1].startswith("hint: "), output  # the one error style
    assert said[0].startswith("runbell: the database is unavailable (unreachable: "), said
    assert "RUNBELL_DB_START_TIMEOUT_S=2" in said[0], said
    assert "secret" not in res.stdout.lower()  # nothing was created, nothing shown
