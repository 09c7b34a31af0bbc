"""Outbound rate-limit buckets shared by every worker: one row per limit key.

A row holds the bucket's theoretical arrival time (:mod:`runbell.domain.rate`). The
claim transaction locks the rows its batch needs (``FOR UPDATE``, in key order, so two
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
    """The buckets ``keys`` (created when new), locked until the transaction ends."""
    if not keys:
        return {}
    rl = t.rate_limits
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    conn.execute(
        insert(rl)
        .values([{"key": k, "tat": None, "updated_at": now} for k in sorted(keys)])
        .on_conflict_do_nothing(index_elements=[rl.c.key])
    )
    q = sa.select(rl.c.key, rl.c.tat).where(rl.c.key.in_(sorted(keys))).order_by(rl.c.key)
    if conn.dialect.name == "postgresql":
        q = q.with_for_update()
    return {r.key: r.tat for r in conn.execute(q)}


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
