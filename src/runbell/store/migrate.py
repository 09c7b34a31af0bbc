"""Apply Alembic migrations programmatically (``runbell migrate``, first start, tests)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection, Engine

HERE = Path(__file__).parent


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


#: The PostgreSQL advisory lock every upgrade holds for its transaction (any constant will
#: do; this one spells "runbell" in ASCII, truncated to 63 bits).
MIGRATION_LOCK = 0x72756E62656C6C


def upgrade(engine: Engine) -> None:
    """Upgrade to the newest revision in one transaction. On PostgreSQL, processes that
    start together (an API and a worker brought up at once, or waiting out the same
    outage) take turns: the first migrates, the others then find the schema current
    (without the lock, two first migrations race to create the same tables)."""
    cfg = alembic_config(str(engine.url))
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def ping(conn: Connection) -> None:
    """A round trip to the database (raises when it does not answer)."""
    conn.execute(sa.text("SELECT 1"))
