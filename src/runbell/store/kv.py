"""Small process-wide facts kept in the ``kv`` table (the VAPID key pair, the secret-key
check, the address ``runbell serve`` last served on)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from runbell.store import tables as t


def get(conn: Connection, key: str) -> dict[str, Any] | None:
    value = conn.execute(sa.select(t.kv.c.value).where(t.kv.c.key == key)).scalar()
    return None if value is None else dict(value)


def put(conn: Connection, key: str, value: dict[str, Any]) -> None:
    """Insert or replace; concurrent writers never fail, the last one wins."""
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    stmt = insert(t.kv).values(key=key, value=value)
    conn.execute(
        stmt.on_conflict_do_update(index_elements=[t.kv.c.key], set_={"value": stmt.excluded.value})
    )


def insert(conn: Connection, key: str, value: dict[str, Any]) -> None:
    """Insert only; raises IntegrityError when the key exists (first writer wins)."""
    conn.execute(t.kv.insert().values(key=key, value=value))
