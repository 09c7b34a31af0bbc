"""Used push-action tokens (``runbell.flows.push_actions``): only their hashes.

A token is made from its delivery and never stored; using it inserts its hash here, and
the primary key refuses a second use whoever tries it (two concurrent clicks: one row).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from runbell.store import tables as t

_U = t.push_action_uses


def _insert(conn: Connection) -> Any:
    return (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(_U)


def use(
    conn: Connection,
    *,
    token_hash: str,
    tenant_id: str,
    notification_id: str,
    action: str,
    now: datetime,
    expires_at: datetime,
) -> bool:
    """Record the token as used; False when it was used already (nothing written)."""
    stmt = (
        _insert(conn)
        .values(
            token_hash=token_hash,
            tenant_id=tenant_id,
            notification_id=notification_id,
            action=action,
            used_at=now,
            expires_at=expires_at,
        )
        .on_conflict_do_nothing(index_elements=["token_hash"])
        .returning(_U.c.token_hash)
    )
    return conn.execute(stmt).first() is not None


def used(conn: Connection, token_hash: str) -> dict[str, Any] | None:
    row = conn.execute(sa.select(_U).where(_U.c.token_hash == token_hash)).first()
    return None if row is None else dict(row._mapping)


def prune(conn: Connection, now: datetime, limit: int = 1000) -> int:
    """Forget uses of tokens that have expired (an expired token is refused anyway)."""
    ids = sa.select(_U.c.token_hash).where(_U.c.expires_at <= now).limit(limit).scalar_subquery()
    return int(conn.execute(sa.delete(_U).where(_U.c.token_hash.in_(ids))).rowcount)
