"""Apply Alembic migrations programmatically (``runbell migrate``, first start, tests).

Every server and most CLI commands start by upgrading the database, and almost always it
is already current. Alembic itself is imported only when there is something to do:
:func:`upgrade` first compares the stored revision with the newest migration file's
(read from the files' text, :func:`script_head`) and returns at once when they agree;
:func:`current_revision` (``/readyz``) reads the version table directly. Importing
Alembic's command and runtime modules cost ~0.15-0.2 s of CPU per start.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

if TYPE_CHECKING:
    from alembic.config import Config

HERE = Path(__file__).parent
VERSIONS = HERE / "migrations" / "versions"
#: Alembic's default version table, which env.py keeps (one row: the revision applied).
VERSION_TABLE = "alembic_version"


def alembic_config(url: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(HERE / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


#: The PostgreSQL advisory lock every upgrade holds for its transaction (any constant will
#: do; this one spells "runbell" in ASCII, truncated to 63 bits).
MIGRATION_LOCK = 0x72756E62656C6C

# How every migration file names itself and its parent (``revision = "push_actions"``).
_REVISION = re.compile(r'^revision = "([^"\n]+)"$', re.MULTILINE)
_DOWN_REVISION = re.compile(r'^down_revision = (?:None|"([^"\n]+)")$', re.MULTILINE)


@cache
def script_head() -> str | None:
    """The newest migration's revision, read from the files' text without Alembic.

    None unless the files form one straight line this reading is sure of (each names
    exactly one revision and one parent, one root, no branch or merge): then Alembic
    alone decides. Only ever used to skip an upgrade that would do nothing.
    """
    parent: dict[str, str | None] = {}
    for path in VERSIONS.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        revisions, downs = _REVISION.findall(text), _DOWN_REVISION.findall(text)
        if len(revisions) != 1 or len(downs) != 1 or revisions[0] in parent:
            return None
        parent[revisions[0]] = downs[0] or None
    children = {p for p in parent.values() if p is not None}
    heads = [r for r in parent if r not in children]
    if len(heads) != 1:
        return None
    # Walk from the head to the root: a straight line visits every revision once.
    seen: set[str] = set()
    at: str | None = heads[0]
    while at is not None and at not in seen and at in parent:
        seen.add(at)
        at = parent[at]
    return heads[0] if at is None and len(seen) == len(parent) else None


def _stored_revision(conn: Connection) -> str | None:
    """The revision in the version table, as Alembic reads it (None: no table, or empty);
    ``RuntimeError`` when it holds more than one (a branched history: never ours)."""
    if not sa.inspect(conn).has_table(VERSION_TABLE):
        return None
    rows = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(rows) > 1:
        raise RuntimeError(f"{VERSION_TABLE} holds more than one revision: {sorted(rows)}")
    return str(rows[0]) if rows else None


def upgrade(engine: Engine) -> None:
    """Upgrade to the newest revision in one transaction. On PostgreSQL, processes that
    start together (an API and a worker brought up at once, or waiting out the same
    outage) take turns: the first migrates, the others then find the schema current
    (without the lock, two first migrations race to create the same tables).

    A database already at the newest revision is left alone without importing Alembic
    (module docstring); a revision, once stored, only changes by another upgrade, so
    reading it outside the lock is safe."""
    head = script_head()
    if head is not None:
        with engine.connect() as conn:
            current = _stored_revision(conn)
        if current == head:
            return

    from alembic import command

    cfg = alembic_config(str(engine.url))
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def current_revision(engine: Engine) -> str | None:
    """The schema revision the database is at (None: not migrated)."""
    with engine.connect() as conn:
        return _stored_revision(conn)


def ping(conn: Connection) -> None:
    """A round trip to the database (raises when it does not answer)."""
    conn.execute(sa.text("SELECT 1"))
