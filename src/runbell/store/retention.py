"""Pruning history in bounded batches, and the tenants' retention overrides.

A batch is two statements on one tenant's rows: find the age of the ``limit``-th oldest
row (a walk of ``limit`` entries of the table's ``(tenant_id, <age>)`` index), then delete
the rows up to that age that may go:

    SELECT age FROM x WHERE tenant_id = :t AND age > :after AND age < :cutoff
      ORDER BY age OFFSET :limit - 1 LIMIT 1
    DELETE FROM x WHERE tenant_id = :t AND age > :after AND age <= :through
      AND age < :cutoff AND <guards>

so a batch costs the same at any history size and never stalls behind rows a guard
keeps. What each table keeps whatever its age (the guards) is in :func:`eligible`;
``docs/operations.md`` "Retention" lists the same. Run rows are never pruned.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import FromClause

from runbell.domain.runs import TERMINAL
from runbell.store import tables as t
from runbell.store.outbox import PENDING_DELIVERY

TERMINAL_RUN = tuple(sorted(s.value for s in TERMINAL))
# A delivery that may still be sent (or is being sent) is never pruned.
UNFINISHED_DELIVERY = (*PENDING_DELIVERY, "sending")

_TABLES: dict[str, sa.Table] = {
    "inbound_events": t.inbound_events,
    "idempotency_keys": t.idempotency_keys,
    "receipts": t.receipts,
    "delivery_attempts": t.delivery_attempts,
    "deliveries": t.deliveries,
    "notifications": t.notifications,
    "transitions": t.transitions,
    "mismatches": t.mismatches,
    "schedule_firings": t.schedule_firings,
    "operator_events": t.operator_events,
}
_AGE = {
    "inbound_events": "received_at",
    "idempotency_keys": "created_at",
    "receipts": "at",
    "delivery_attempts": "started_at",
    "deliveries": "updated_at",
    "notifications": "closed_at",
    "transitions": "at",
    "mismatches": "created_at",
    "schedule_firings": "created_at",
    "operator_events": "created_at",
}


def _probe(column: Any, *where: Any) -> Any:
    """``column`` of the first row matching ``where``, as a correlated scalar subquery:
    an index probe per candidate row. (PostgreSQL turns ``EXISTS`` into a join and may
    then hash a whole guard table for one batch; it never does that with this.)"""
    return sa.select(column).where(*where).limit(1).scalar_subquery()


def _none(column: Any, *where: Any) -> Any:
    return _probe(column, *where).is_(None)


def _no_open_notification(notification_id: Any) -> Any:
    n = t.notifications.alias("g_note")
    return _none(n.c.id, n.c.id == notification_id, n.c.state == "open")


def eligible(table: str, x: FromClause, tenant_id: str | None, cutoff: datetime) -> Any:
    """The rows of ``x`` (``table`` or an alias of it) old enough to go and needed by
    nothing that is still live."""
    c = x.c
    age = c[_AGE[table]] < cutoff
    where = [age] if tenant_id is None else [c.tenant_id == tenant_id, age]
    if table == "idempotency_keys":
        # A claimed key whose transaction has not finished is not an answer yet.
        where.append(c.status_code != 0)
    elif table == "receipts":
        where.append(_no_open_notification(c.notification_id))
    elif table == "delivery_attempts":
        # Its delivery is finished and serves no open notification (NULL: no such row).
        d = t.deliveries.alias("g_delivery")
        finished = _probe(
            d.c.status,
            d.c.id == c.delivery_id,
            d.c.status.not_in(UNFINISHED_DELIVERY),
            _no_open_notification(d.c.notification_id),
        )
        where.append(finished.is_not(None))
    elif table == "deliveries":
        a = t.delivery_attempts.alias("g_attempt")
        where += [
            c.status.not_in(UNFINISHED_DELIVERY),
            _no_open_notification(c.notification_id),
            # Its attempts go first (their own period); the delivery waits for them.
            _none(a.c.id, a.c.delivery_id == c.id),
        ]
    elif table == "notifications":
        d = t.deliveries.alias("g_delivery")
        r = t.input_requests.alias("g_request")
        where += [
            c.state != "open",
            _none(d.c.id, d.c.notification_id == c.id),
            _none(
                r.c.id,
                r.c.tenant_id == c.tenant_id,
                r.c.id == c.input_request_id,
                r.c.state == "pending",
            ),
        ]
    elif table == "transitions":
        run = t.runs.alias("g_run")
        n = t.notifications.alias("g_note")
        r = t.input_requests.alias("g_request")
        where += [
            _probe(
                run.c.state,
                run.c.tenant_id == c.tenant_id,
                run.c.run_id == c.run_id,
                run.c.state.in_(TERMINAL_RUN),
            ).is_not(None),
            _none(
                n.c.id, n.c.tenant_id == c.tenant_id, n.c.run_id == c.run_id, n.c.state == "open"
            ),
            _none(
                r.c.id, r.c.tenant_id == c.tenant_id, r.c.run_id == c.run_id, r.c.state == "pending"
            ),
        ]
    elif table == "mismatches":
        where.append(c.status != "open")
    # schedule_firings: no guard. Nothing points at a fired occurrence (a run names its
    # schedule, not the occurrence), and a schedule's next_fire_at is always after every
    # occurrence it recorded, so a pruned one is never fired again.
    return sa.and_(*where)


def boundary_statement(
    table: str, tenant_id: str | None, after: datetime | None, cutoff: datetime, limit: int
) -> Any:
    """The age of the ``limit``-th oldest row after ``after`` (whether it may go or not):
    a walk of ``limit`` entries of the table's retention index."""
    real = _TABLES[table]
    age = real.c[_AGE[table]]
    q = sa.select(age).where(age < cutoff)
    if tenant_id is not None:
        q = q.where(real.c.tenant_id == tenant_id)
    if after is not None:
        q = q.where(age > after)
    return q.order_by(age).offset(limit - 1).limit(1)


def prune_statement(
    table: str,
    tenant_id: str | None,
    cutoff: datetime,
    after: datetime | None = None,
    through: datetime | None = None,
) -> Any:
    """The DELETE of one batch: the prunable rows aged in ``(after, through]`` (public so
    a test can EXPLAIN it)."""
    real = _TABLES[table]
    age = real.c[_AGE[table]]
    where = eligible(table, real, tenant_id, cutoff)
    if after is not None:
        where = sa.and_(where, age > after)
    if through is not None:
        where = sa.and_(where, age <= through)
    return sa.delete(real).where(where)


def prune_batch(
    conn: Connection,
    table: str,
    tenant_id: str | None,
    cutoff: datetime,
    limit: int,
    after: datetime | None = None,
) -> tuple[int, datetime | None]:
    """Delete the prunable rows among the next ``limit`` oldest after ``after`` (of one
    tenant; ``None``: tables of no tenant). Returns (rows deleted, where the next batch
    starts), the latter ``None`` once the batch reached ``cutoff``.

    Rows a guard keeps are walked past, not waited on, so a batch never stalls behind
    them. A batch deletes at most ``limit`` rows, plus any sharing the boundary instant.
    """
    through = conn.execute(boundary_statement(table, tenant_id, after, cutoff, limit)).scalar()
    deleted = conn.execute(prune_statement(table, tenant_id, cutoff, after, through)).rowcount
    return int(deleted), through


def count_prunable(conn: Connection, table: str, tenant_id: str | None, cutoff: datetime) -> int:
    """How many rows :func:`prune_batch` could delete now (for ``--dry-run``)."""
    if table == "feed_events":
        assert tenant_id is not None
        fe = t.feed_events
        q = sa.select(sa.func.count()).where(fe.c.tenant_id == tenant_id, fe.c.created_at < cutoff)
        return int(conn.execute(q).scalar_one())
    real = _TABLES[table]
    q = sa.select(sa.func.count()).select_from(real).where(eligible(table, real, tenant_id, cutoff))
    return int(conn.execute(q).scalar_one())


# --- the feed: pruned as a prefix, so every cursor after ``feed_pruned_through`` is whole


def feed_batch_statement(tenant_id: str, after: int, limit: int) -> Any:
    fe = t.feed_events
    return (
        sa.select(fe.c.seq, fe.c.created_at)
        .where(fe.c.tenant_id == tenant_id, fe.c.seq > after)
        .order_by(fe.c.seq)
        .limit(limit)
    )


def prune_feed_batch(conn: Connection, tenant_id: str, cutoff: datetime, limit: int) -> int:
    """Delete up to ``limit`` of the tenant's oldest events, stopping at the first one
    younger than ``cutoff``, and move ``feed_pruned_through`` past them (cursors before
    it answer 410 with a snapshot)."""
    fe, tn = t.feed_events, t.tenants
    pruned = conn.execute(
        sa.select(tn.c.feed_pruned_through).where(tn.c.id == tenant_id)
    ).scalar_one()
    last = None
    for seq, created_at in conn.execute(feed_batch_statement(tenant_id, int(pruned), limit)):
        if created_at >= cutoff:
            break
        last = int(seq)
    if last is None:
        return 0
    deleted = conn.execute(
        sa.delete(fe).where(fe.c.tenant_id == tenant_id, fe.c.seq > pruned, fe.c.seq <= last)
    ).rowcount
    conn.execute(
        sa.update(tn)
        .where(tn.c.id == tenant_id, tn.c.feed_pruned_through < last)
        .values(feed_pruned_through=last)
    )
    return int(deleted)


# --- overrides, stored with the tenant ---------------------------------------------


def overrides(conn: Connection) -> dict[str, dict[str, int]]:
    """Every tenant's id and its retention override (``{}`` for none)."""
    rows = conn.execute(sa.select(t.tenants.c.id, t.tenants.c.retention).order_by(t.tenants.c.id))
    return {str(tid): dict(doc or {}) for tid, doc in rows}


def override(conn: Connection, tenant_id: str) -> dict[str, int]:
    doc = conn.execute(
        sa.select(t.tenants.c.retention).where(t.tenants.c.id == tenant_id)
    ).scalar_one()
    return dict(doc or {})


def set_override(conn: Connection, tenant_id: str, doc: dict[str, int]) -> None:
    conn.execute(
        sa.update(t.tenants).where(t.tenants.c.id == tenant_id).values(retention=doc or None)
    )
