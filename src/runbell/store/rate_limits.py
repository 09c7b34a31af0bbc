"""Outbound rate-limit buckets shared by every worker: one row per limit key.

A row holds the bucket's theoretical arrival time (:mod:`runbell.domain.rate`). The
claim transaction locks the rows its batch needs (an upsert, in key order, so two
claimers never deadlock; SQLite's write lock serializes them anyway), plans the sends,
and stores the new times before it commits: the workers take turns, and together keep
each limit.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from runbell.store import tables as t


def lock(conn: Connection, keys: set[str], now: datetime) -> dict[str, datetime | None]:
    """The buckets ``keys`` (created when new), locked until the transaction ends: one
    upsert whose no-op update takes each row's lock, in key order, and returns it."""
    if not keys:
        return {}
    rl = t.rate_limits
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    stmt = insert(rl).values([{"key": k, "tat": None, "updated_at": now} for k in sorted(keys)])
    rows = conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[rl.c.key], set_={"updated_at": rl.c.updated_at}
        ).returning(rl.c.key, rl.c.tat)
    ).all()
    return {r.key: r.tat for r in rows}


def store(conn: Connection, state: dict[str, datetime], now: datetime) -> None:
    if not state:
        return
    rl = t.rate_limits
    conn.execute(
        sa.update(rl)
        .where(rl.c.key == sa.bindparam("b_key"))
        .values(tat=sa.bindparam("b_tat"), updated_at=now),
        [{"b_key": k, "b_tat": v} for k, v in sorted(state.items())],
    )
