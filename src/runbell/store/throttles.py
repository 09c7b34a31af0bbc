"""Throttle counts: how many notifications a throttled rule decided per recipient, key
value and window (``domain.notify_throttle``), and the notification a throttle folded.

:func:`bump` is one upsert that returns the new count. On PostgreSQL a second writer of
the same row waits for the first to commit and then counts on top of it (READ COMMITTED
re-reads the row it conflicts on); on SQLite writers are serialised whole (``BEGIN
IMMEDIATE``). Either way every notification gets its own number, and exactly the first
``limit`` of a window are under the limit, however many workers race.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from runbell.store import tables as t

_T = t.throttle_counts
_KEY = ["tenant_id", "recipient_user_id", "rule_id", "throttle_key", "key_value", "window_start"]


def bump(
    conn: Connection,
    *,
    tenant_id: str,
    recipient: str,
    rule_id: str,
    throttle_key: str,
    key_value: str,
    window_start: datetime,
    window_end: datetime,
) -> int:
    """Count one more notification in this window; returns its number (1 = the first)."""
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    stmt = (
        insert(_T)
        .values(
            tenant_id=tenant_id,
            recipient_user_id=recipient,
            rule_id=rule_id,
            throttle_key=throttle_key,
            key_value=key_value,
            window_start=window_start,
            window_end=window_end,
            hits=1,
        )
        .on_conflict_do_update(index_elements=_KEY, set_={"hits": _T.c.hits + 1})
        .returning(_T.c.hits)
    )
    return int(conn.execute(stmt).scalar_one())


def prune(conn: Connection, before: datetime) -> int:
    """Forget the counts of windows that closed before ``before`` (nothing reads them)."""
    return int(conn.execute(sa.delete(_T).where(_T.c.window_end < before)).rowcount)


def any_closed(conn: Connection, before: datetime) -> bool:
    """Is there a count of a window closed before ``before`` (a read, so a sweep writes
    only when it has something to prune)?"""
    found = conn.execute(sa.select(_T.c.hits).where(_T.c.window_end < before).limit(1))
    return found.first() is not None
