"""Stall detection's queries: the runs whose stall clock ran out, and re-timing clocks.

``runs.stall_due_at`` is set only while a run is ``working`` and not already stalled, so
the sweep's query (the ``ix_runs_stall_due`` index, oldest due first) reads due rows
only: its cost follows the number of runs about to stall, not finished history.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.store import fast, runs
from runbell.store import tables as t

DUE = fast.Statement(
    lambda: (
        sa.select(t.runs.c.tenant_id, t.runs.c.run_id)
        .where(
            t.runs.c.stall_due_at <= sa.bindparam("now", type_=t.UTCDateTime),
            t.runs.c.state == "working",
        )
        .order_by(t.runs.c.stall_due_at)
        .limit(sa.bindparam("limit", type_=sa.Integer))
    )
)


def due(conn: Connection, now: datetime, limit: int) -> list[tuple[str, str]]:
    """(tenant, run) of working runs whose stall clock ran out by ``now``, oldest first."""
    return [(r["tenant_id"], r["run_id"]) for r in DUE.rows(conn, now=now, limit=limit)]


def due_at(clock_at: datetime | None, after_s: int | None) -> datetime | None:
    """When a clock started at ``clock_at`` runs out (None: never)."""
    if clock_at is None or not after_s:
        return None
    return clock_at + timedelta(seconds=after_s)


def retime_tenant_default(conn: Connection, tenant_id: str, after_s: int) -> int:
    """The tenant default changed: re-time the clocks of its working, not yet stalled runs
    that follow the default. Returns how many were re-timed."""
    r = t.runs
    rows = conn.execute(
        sa.select(r.c.run_id, r.c.stall_clock_at).where(
            r.c.tenant_id == tenant_id,
            r.c.state == "working",
            r.c.stalled_at.is_(None),
            r.c.stall_after_seconds.is_(None),
        )
    ).all()
    for run_id, clock_at in rows:
        runs.set_stall_due(conn, tenant_id, run_id, due_at(clock_at, after_s))
    return len(rows)
