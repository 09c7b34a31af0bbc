"""The suite's own PostgreSQL cleanup survives a database restart (issue 16 row 15).

Each database test clones a template (tests/conftest.py ``pg_database``); the clone is
dropped at teardown. A PostgreSQL restart during the run killed the admin connection the
drop went through, so the DROP failed and ``rb_t_*`` / ``rb_tmpl_*`` databases stayed
behind. These tests make that happen on a private cluster (tests/pgcluster.py; the shared
server on 5432 is never restarted) and check that nothing is left.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

import tests.conftest as suite
from tests.pgcluster import PgCluster, PgUnavailable
from tests.pgdatabases import TestDatabases
from tests.timeouts import WAIT

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    try:
        pg = PgCluster.create()
    except PgUnavailable as exc:
        if suite.IN_CI:
            pytest.fail(f"CI requires PostgreSQL server binaries: {exc}")
        pytest.skip(str(exc))
    with pg:
        yield pg


def databases(pg: PgCluster) -> set[str]:
    return set(pg.psql("SELECT datname FROM pg_database").split())


def test_a_clone_is_dropped_after_a_restart(
    cluster: PgCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clone the template the way the fixture does, use it, restart the server, tear
    down: the clone is gone."""
    monkeypatch.setattr(suite, "PG_URL", cluster.url())
    template = TestDatabases(cluster.url(), "0a1b2c3d", "gw0").template
    cluster.create_database(template)
    clone = suite.pg_database(template)
    url = next(clone)
    name = sa.make_url(url).database
    assert name in databases(cluster)
    engine = sa.create_engine(url)  # a test's engine, holding a connection in its pool
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))

    cluster.restart()

    clone.close()  # the fixture's teardown
    engine.dispose()
    assert name not in databases(cluster)
    cluster.psql(f'DROP DATABASE "{template}"')


def test_a_drop_waits_for_the_server_to_come_back(cluster: PgCluster) -> None:
    """A drop issued while the server is down reconnects until it is up again."""
    dbs = TestDatabases(cluster.url(), "0a1b2c3d", "gw1")
    name = dbs.new_clone_name()
    dbs.create(name)
    cluster.stop()
    errors: list[BaseException] = []

    def drop() -> None:
        try:
            dbs.drop(name)
        except BaseException as exc:
            errors.append(exc)

    dropping = threading.Thread(target=drop)
    try:
        dropping.start()  # cannot succeed before the start below
    finally:
        cluster.start()
    dropping.join(WAIT)
    assert not dropping.is_alive() and not errors, errors
    assert name not in databases(cluster)


def test_the_sweep_drops_this_runs_leftovers_and_nothing_else(cluster: PgCluster) -> None:
    """After a restart, a worker's sweep drops its template and clones; the run's sweep
    (the xdist controller's, at the end) its other workers'; nothing of another run, of
    the old unnamed scheme or of anyone else is touched."""
    url = cluster.url()
    mine, sibling = TestDatabases(url, "0a1b2c3d", "gw0"), TestDatabases(url, "0a1b2c3d", "gw1")
    other_run = TestDatabases(url, "0a1b2c3e", "gw0")
    for dbs in (mine, sibling, other_run):
        dbs.create(dbs.template)
        for _ in range(2):
            dbs.create(dbs.new_clone_name(), template=dbs.template)
    cluster.create_database("rb_t_0a1b2c3d9999")  # the old scheme: nobody's to drop
    cluster.create_database("rb_tmpl_0a1b2c3d")
    cluster.create_database("someone_else")
    before = databases(cluster)
    mine_names, sibling_names, other_names = (
        {n for n in before if f"_{dbs.run}_{dbs.worker}" in n} for dbs in (mine, sibling, other_run)
    )
    assert len(mine_names) == len(sibling_names) == len(other_names) == 3

    cluster.restart()

    assert set(mine.sweep()) == mine_names
    assert databases(cluster) == before - mine_names
    run = TestDatabases(url, "0a1b2c3d", "main")  # the controller, after every worker
    assert set(run.sweep(whole_run=True)) == sibling_names
    assert databases(cluster) == before - mine_names - sibling_names
    assert {"rb_t_0a1b2c3d9999", "rb_tmpl_0a1b2c3d", "someone_else"} <= databases(cluster)
    assert other_names <= databases(cluster)
