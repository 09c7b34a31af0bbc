"""The suite's PostgreSQL clones are reused between tests, and only when that is safe.

tests/conftest.py ``pg_database`` hands a test's clone, emptied, to the next test of
the same worker (tests/pgdatabases.py ``ClonePool``: ~25 ms instead of a ~340 ms CREATE
DATABASE). A test must not see another's rows, nor a schema another test changed: the
first pair of tests below goes through the fixture itself (two tests of one file run in
order on one worker); the others drive a pool of their own and check what it refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.conftest import PG_URL, pg_database
from tests.pgdatabases import ClonePool, TestDatabases

pytestmark = pytest.mark.postgres

#: What the first test of a pair leaves for the second (same worker, in file order).
seen: dict[str, int] = {}


@pytest.fixture
def pg_url(pg_template: str | None) -> Iterator[str]:
    yield from pg_database(pg_template)


@pytest.fixture
def pool(pg_template: str | None) -> Iterator[ClonePool]:
    """A pool of this test's own (not the fixture's), its clones dropped at the end."""
    if pg_template is None:
        pytest.skip("PostgreSQL not reachable")
    own = ClonePool(TestDatabases.of_template(PG_URL, pg_template))
    yield own
    for name in own.spares:
        own.dbs.drop(name)


def run(url: str, *statements: str) -> list[object]:
    """Each statement in one transaction on ``url``; the last one's first column."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            result: list[object] = []
            for statement in statements:
                found = conn.execute(sa.text(statement))
                result = list(found.scalars()) if found.returns_rows else []
            return result
    finally:
        engine.dispose()


def oid_of(url: str) -> int:
    """The database's oid: a rename keeps it, a new clone has another."""
    found = run(url, "SELECT oid FROM pg_database WHERE datname = current_database()")
    return int(str(found[0]))


TENANT = "INSERT INTO tenants (id, name, created_at) VALUES ('ten_x', 'x', now())"


def test_a_row_written_in_one_test(pg_url: str) -> None:
    run(pg_url, TENANT)
    assert run(pg_url, "SELECT id FROM tenants") == ["ten_x"]
    seen["database"] = oid_of(pg_url)


def test_is_gone_in_the_next_on_the_same_database(pg_url: str) -> None:
    if "database" not in seen:  # e.g. -k, or --dist load put the pair on two workers
        pytest.skip("runs right after test_a_row_written_in_one_test, on the same worker")
    assert oid_of(pg_url) == seen["database"], "the clone was not reused"
    assert run(pg_url, "SELECT id FROM tenants") == []
    assert run(pg_url, "SELECT count(*) FROM alembic_version") == [1]  # kept


def test_an_altered_table(pg_url: str) -> None:
    run(pg_url, "ALTER TABLE tenants ADD COLUMN extra integer")
    seen["altered"] = oid_of(pg_url)


def test_is_not_reused(pg_url: str) -> None:
    if "altered" not in seen:  # e.g. -k, or --dist load put the pair on two workers
        pytest.skip("runs right after test_an_altered_table, on the same worker")
    assert oid_of(pg_url) != seen["altered"]
    assert run(
        pg_url,
        "SELECT count(*) FROM information_schema.columns "
        "WHERE table_name = 'tenants' AND column_name = 'extra'",
    ) == [0]


def give_back_once(pool: ClonePool, *statements: str, autocommit: bool = False) -> str | None:
    """Take a clone, run ``statements`` on it, give it back: None if it was kept (and
    then it is empty and the same database), else why it was dropped."""
    name = pool.take()
    url = pool.dbs.url(name)
    oid = oid_of(url)
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT" if autocommit else None)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(sa.text(statement))
    finally:
        engine.dispose()
    refused = len(pool.refusals)
    pool.give_back(name)
    if len(pool.refusals) > refused:
        assert not pool.spares
        assert name not in pool.dbs.leftovers()
        return pool.refusals[-1]
    (spare,) = pool.spares
    assert oid_of(pool.dbs.url(spare)) == oid
    assert run(pool.dbs.url(spare), "SELECT count(*) FROM tenants") == [0]
    return None


def test_rows_are_emptied_and_the_clone_kept(pool: ClonePool) -> None:
    assert give_back_once(pool, TENANT) is None
    assert give_back_once(pool, TENANT) is None  # and again, from the spare
    assert (pool.created, pool.reused) == (1, 1)


@pytest.mark.parametrize(
    ("statements", "reason"),
    [
        (["ALTER TABLE tenants ALTER COLUMN name TYPE text"], "columns"),
        (["ALTER TABLE tenants SET (fillfactor = 50)"], "relations"),
        (["CREATE INDEX ix_extra ON tenants (created_at)"], "indexes"),
        (["ALTER TABLE runs DROP CONSTRAINT IF EXISTS pk_runs CASCADE"], "constraints"),
        (["UPDATE alembic_version SET version_num = 'trace'"], "alembic_version"),
        (["CREATE SEQUENCE s_extra"], "sequences"),
        (["DROP TABLE alembic_version"], "alembic_version"),
    ],
)
def test_a_changed_schema_is_not_kept(pool: ClonePool, statements: list[str], reason: str) -> None:
    refused = give_back_once(pool, *statements)
    assert refused is not None and refused.startswith("schema differs") and reason in refused


def test_sequences_start_again(pool: ClonePool) -> None:
    """A sequence a migration made would be reset, so a clone that used it is kept."""
    name = pool.take()
    url = pool.dbs.url(name)
    run(url, "CREATE SEQUENCE s_extra START 5")
    pool.template = None  # this clone, with the sequence, is the template now
    pool.template = pool._look_at(name)
    assert run(url, "SELECT nextval('s_extra')") == [5]
    pool.give_back(name)
    (spare,) = pool.spares
    assert run(pool.dbs.url(spare), "SELECT nextval('s_extra')") == [5]


def test_a_database_setting_is_not_kept(pool: ClonePool) -> None:
    name = pool.take()
    run(pool.dbs.url(name), f"ALTER DATABASE \"{name}\" SET work_mem = '8MB'")
    pool.give_back(name)
    assert not pool.spares and "database" in pool.refusals[-1]


def test_planner_statistics_of_rows_are_not_kept(pool: ClonePool) -> None:
    refused = give_back_once(pool, TENANT, "ANALYZE tenants", autocommit=True)
    assert refused == "analyzed with rows: tenants"


def test_sessions_left_open_are_cut_off(pool: ClonePool) -> None:
    """A connection a test left open is terminated, and the name it knew is gone: a
    process that reconnects cannot write into the next test's database."""
    name = pool.take()
    url = pool.dbs.url(name)
    lingering = sa.create_engine(url)
    try:
        with lingering.connect() as conn:
            conn.execute(sa.text(TENANT))  # uncommitted, holding a lock on tenants
            pool.give_back(name)
            with pytest.raises(sa.exc.OperationalError):
                conn.execute(sa.text("SELECT 1"))
        with pytest.raises(sa.exc.OperationalError):
            lingering.connect()
    finally:
        lingering.dispose()
    (spare,) = pool.spares
    assert spare != name
    assert run(pool.dbs.url(spare), "SELECT count(*) FROM tenants") == [0]
