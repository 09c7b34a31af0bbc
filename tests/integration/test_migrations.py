"""The Alembic migrations produce exactly the schema the code declares, on both databases."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from runbell.store.db import make_engine
from runbell.store.migrate import current_revision, upgrade
from runbell.store.tables import metadata


def test_migrated_schema_matches_the_tables(db_url: str) -> None:
    """A fresh database migrated to head has no drift from runbell.store.tables."""
    engine = make_engine(db_url)
    upgrade(engine)  # idempotent on the already-migrated template copy
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    assert current_revision(engine) is not None
    with engine.connect() as conn:
        uniques = {u["name"] for u in sa.inspect(conn).get_unique_constraints("notifications")}
    assert "uq_notification_once" in uniques  # invariant 1 lives in the database
    engine.dispose()


def test_run_access_rows_from_before_roles_keep_what_they_allowed(db_url: str) -> None:
    """Issue 18 item 4: a run_access row written before roles existed (the owner or a
    user ``authority.users`` named) still lets its member see, answer and amend, from
    the run itself; and the revision goes down and up again."""
    from alembic import command

    from runbell.store.migrate import alembic_config

    engine = make_engine(db_url)
    upgrade(engine)
    cfg = alembic_config(str(engine.url))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "trace")
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO tenants (id, name, created_at) VALUES "
                "('ten_m', 'migrated', CURRENT_TIMESTAMP)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO users (id, email, created_at) VALUES "
                "('usr_m', 'm@acme.test', CURRENT_TIMESTAMP)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO run_access (tenant_id, run_id, user_id) "
                "VALUES ('ten_m', 'r-1', 'usr_m')"
            )
        )
    upgrade(engine)
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT via, may_answer, may_amend FROM run_access WHERE run_id = 'r-1'")
        ).one()
    assert (row.via, bool(row.may_answer), bool(row.may_amend)) == ("run", True, True)
    engine.dispose()
