"""The ``presence`` table: which processes hold a live stream for which person, until when.

Written only here. :class:`runbell.runtime.presence.Presence` keeps the in-process counts
and calls these from its heartbeat thread, inside the transactions it opens.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from runbell.store import tables as t

Key = tuple[str, str]  # (tenant id, user id)

_p = t.presence
_SEEN = (
    sa.select(sa.literal(1))
    .where(
        _p.c.tenant_id == sa.bindparam("tenant_id"),
        _p.c.user_id == sa.bindparam("user_id"),
        _p.c.expires_at > sa.bindparam("now"),
    )
    .limit(1)
)
_DROP = sa.delete(_p).where(
    _p.c.tenant_id == sa.bindparam("t_id"),
    _p.c.user_id == sa.bindparam("u_id"),
    _p.c.holder == sa.bindparam("h"),
)
_EXPIRED = sa.delete(_p).where(_p.c.expires_at < sa.bindparam("now"))


def seen(conn: Connection, tenant_id: str, user_id: str, now: datetime) -> bool:
    """Whether any process holds an unexpired row for the person."""
    params = {"tenant_id": tenant_id, "user_id": user_id, "now": now}
    return conn.execute(_SEEN, params).first() is not None


def hold(conn: Connection, keys: Iterable[Key], holder: str, expires_at: datetime) -> None:
    """Create or extend ``holder``'s rows for ``keys``, in one lock order (sorted), so two
    processes extending the same people never deadlock."""
    rows = [
        {"tenant_id": k[0], "user_id": k[1], "holder": holder, "expires_at": expires_at}
        for k in sorted(keys)
    ]
    if not rows:
        return
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    stmt = insert(_p)
    upsert = stmt.on_conflict_do_update(
        index_elements=[_p.c.tenant_id, _p.c.user_id, _p.c.holder],
        set_={"expires_at": stmt.excluded.expires_at},
    )
    conn.execute(upsert, rows)


def drop(conn: Connection, keys: Iterable[Key], holder: str) -> None:
    """Delete ``holder``'s rows for ``keys`` (the last stream of the person closed here)."""
    rows = [{"t_id": k[0], "u_id": k[1], "h": holder} for k in keys]
    if rows:
        conn.execute(_DROP, rows)


def expire(conn: Connection, now: datetime) -> None:
    """Delete every process's rows that expired (a process that died without closing)."""
    conn.execute(_EXPIRED, {"now": now})
