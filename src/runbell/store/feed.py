"""Reading the event feed with per-principal visibility, and pruning it by retention."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.domain.principal import Principal
from runbell.store import tables as t
from runbell.store.runs import visible_run_ids


def bounds(conn: Connection, tenant_id: str) -> tuple[int, int]:
    """(head, pruned_through): the newest sequence, and the newest one already deleted."""
    row = conn.execute(
        sa.select(t.tenants.c.feed_seq, t.tenants.c.feed_pruned_through).where(
            t.tenants.c.id == tenant_id
        )
    ).one()
    return int(row[0]), int(row[1])


def _visible(who: Principal) -> sa.ColumnElement[bool]:
    fe = t.feed_events
    if who.kind == "key" and who.role == "runtime":
        return fe.c.user_id.is_(None)
    if who.kind == "key":  # admin keys see everything in their tenant
        return sa.true()
    run_events: sa.ColumnElement[bool] = fe.c.user_id.is_(None)
    if not who.sees_all_runs:
        run_events = sa.and_(run_events, fe.c.run_id.in_(visible_run_ids(who)))
    return sa.or_(fe.c.user_id == who.user_id, run_events)


def read(
    conn: Connection, who: Principal, after: int, limit: int
) -> tuple[list[dict[str, Any]], int]:
    """Visible events after ``after`` and the position to resume from.

    When the page is not full, the position moves on to the head as it was *before* the
    query, skipping events this principal may not see (so an idle reader's cursor does
    not age out of retention). Events up to that head are all committed — they commit
    together with the counter — so nothing visible can be skipped.
    """
    fe = t.feed_events
    head = conn.execute(
        sa.select(t.tenants.c.feed_seq).where(t.tenants.c.id == who.tenant_id)
    ).scalar_one()
    rows = conn.execute(
        sa.select(
            fe.c.seq, fe.c.type, fe.c.run_id, fe.c.notification_id, fe.c.data, fe.c.created_at
        )
        .where(fe.c.tenant_id == who.tenant_id, fe.c.seq > after, _visible(who))
        .order_by(fe.c.seq)
        .limit(limit)
    ).all()
    events = [dict(r._mapping) for r in rows]
    position = events[-1]["seq"] if events else after
    if len(events) < limit:
        position = max(position, int(head))
    return events, position


def for_notification(
    conn: Connection, tenant_id: str, notification_id: str
) -> list[dict[str, Any]]:
    fe = t.feed_events
    rows = conn.execute(
        sa.select(fe.c.seq, fe.c.type, fe.c.data, fe.c.created_at)
        .where(fe.c.tenant_id == tenant_id, fe.c.notification_id == notification_id)
        .order_by(fe.c.seq)
    ).all()
    return [dict(r._mapping) for r in rows]


def prune(conn: Connection, tenant_id: str, before: datetime) -> int:
    """Delete events older than ``before`` and remember the newest deleted sequence."""
    fe = t.feed_events
    newest = conn.execute(
        sa.select(sa.func.max(fe.c.seq)).where(
            fe.c.tenant_id == tenant_id, fe.c.created_at < before
        )
    ).scalar()
    if newest is None:
        return 0
    deleted = conn.execute(
        sa.delete(fe).where(fe.c.tenant_id == tenant_id, fe.c.seq <= newest)
    ).rowcount
    conn.execute(
        sa.update(t.tenants)
        .where(t.tenants.c.id == tenant_id, t.tenants.c.feed_pruned_through < newest)
        .values(feed_pruned_through=newest)
    )
    return int(deleted)
