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
