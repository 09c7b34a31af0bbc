"""Failed-authentication counters shared by every API process: one row per key.

:func:`record` is the whole cost of a failed attempt: one upsert that counts the failure
against each of its keys (opening a new window where the last one ended) and returns the
counts, in key order so two processes never deadlock. Nothing here runs for a request
whose credential checks out. :func:`prune` drops windows long over (the retention sweep).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from runbell.store import tables as t


def record(
    conn: Connection, keys: Sequence[str], now: datetime, window_s: float
) -> dict[str, tuple[int, datetime]]:
    """Count one failure against each key: ``{key: (failures in its window, window start)}``."""
    if not keys:
        return {}
    af = t.auth_failures
    ended = sa.bindparam("b_ended", now - timedelta(seconds=window_s), type_=t.UTCDateTime)
    stale = af.c.window_start <= ended
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    rows = insert(af).values(
        [{"key": k, "window_start": now, "failures": 1} for k in sorted(set(keys))]
    )
    stmt = rows.on_conflict_do_update(
        index_elements=[af.c.key],
        set_={
            "failures": sa.case((stale, 1), else_=af.c.failures + 1),
            "window_start": sa.case((stale, rows.excluded.window_start), else_=af.c.window_start),
        },
    ).returning(af.c.key, af.c.failures, af.c.window_start)
    return {r.key: (int(r.failures), r.window_start) for r in conn.execute(stmt)}


def prune(conn: Connection, before: datetime) -> int:
    """Forget windows that opened before ``before``."""
    af = t.auth_failures
    return int(conn.execute(sa.delete(af).where(af.c.window_start < before)).rowcount or 0)
