"""Pruning history in bounded batches, and the tenants' retention overrides.

Each prune statement deletes at most ``limit`` rows of one tenant:

    DELETE FROM x WHERE pk IN (SELECT pk FROM x AS c WHERE <eligible c> ORDER BY age
                               LIMIT :limit) AND <eligible x>

The inner select walks an index on ``(tenant_id, <age column>)`` from the oldest row, so a
batch costs the same at any history size; the conditions are repeated on the deleted row
so that on PostgreSQL a row changed meanwhile (a dead letter replayed) is re-checked
against its new version and kept. What each table keeps whatever its age (the guards) is
in :func:`eligible`; ``docs/operations.md`` "Retention" lists the same.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import FromClause

from runbell.domain.runs import TERMINAL
from runbell.store import tables as t
from runbell.store.notifications import PENDING_DELIVERY

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
    "operator_events": "created_at",
}


def _open_notification(notification_id: Any) -> sa.Exists:
    n = t.notifications.alias("g_note")
    return sa.exists().where(n.c.id == notification_id, n.c.state == "open")


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
        where.append(~_open_notification(c.notification_id))
    elif table == "delivery_attempts":
        d = t.deliveries.alias("g_delivery")
        where.append(
            sa.exists().where(
                d.c.id == c.delivery_id,
                d.c.status.not_in(UNFINISHED_DELIVERY),
                ~_open_notification(d.c.notification_id),
            )
        )
    elif table == "deliveries":
        a = t.delivery_attempts.alias("g_attempt")
        where += [
            c.status.not_in(UNFINISHED_DELIVERY),
            ~_open_notification(c.notification_id),
            # Its attempts go first (their own period); the delivery waits for them.
            ~sa.exists().where(a.c.delivery_id == c.id),
        ]
    elif table == "notifications":
        d = t.deliveries.alias("g_delivery")
        r = t.input_requests.alias("g_request")
        where += [
            c.state != "open",
            ~sa.exists().where(d.c.notification_id == c.id),
            ~sa.exists().where(
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
            sa.exists().where(
                run.c.tenant_id == c.tenant_id,
                run.c.run_id == c.run_id,
                run.c.state.in_(TERMINAL_RUN),
            ),
            ~sa.exists().where(
                n.c.tenant_id == c.tenant_id, n.c.run_id == c.run_id, n.c.state == "open"
            ),
            ~sa.exists().where(
                r.c.tenant_id == c.tenant_id, r.c.run_id == c.run_id, r.c.state == "pending"
            ),
        ]
    elif table == "mismatches":
        where.append(c.status != "open")
    return sa.and_(*where)


def _key(x: FromClause, table: sa.Table) -> Any:
    cols = [x.c[col.name] for col in table.primary_key.columns]
    return cols[0] if len(cols) == 1 else sa.tuple_(*cols)


def prune_statement(table: str, tenant_id: str | None, cutoff: datetime, limit: int) -> Any:
    """The DELETE of one batch (public so a test can EXPLAIN it)."""
    real = _TABLES[table]
    c = real.alias("c")
    batch = (
        sa.select(*[c.c[col.name] for col in real.primary_key.columns])
        .where(eligible(table, c, tenant_id, cutoff))
        .order_by(c.c[_AGE[table]])
        .limit(limit)
    )
    inner = batch.scalar_subquery() if len(real.primary_key.columns) == 1 else batch
    return sa.delete(real).where(
        _key(real, real).in_(inner), eligible(table, real, tenant_id, cutoff)
    )


def prune_batch(
    conn: Connection, table: str, tenant_id: str | None, cutoff: datetime, limit: int
) -> int:
    """Delete up to ``limit`` prunable rows of one tenant (``None``: tables of no tenant)."""
    return int(conn.execute(prune_statement(table, tenant_id, cutoff, limit)).rowcount)


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
