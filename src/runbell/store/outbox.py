"""The outbox: claiming due deliveries, recording attempts, replaying dead letters.

Claiming is one statement. On PostgreSQL the candidate rows are locked with
``FOR UPDATE SKIP LOCKED``, so several workers never claim the same row; on SQLite the
write lock taken by ``BEGIN IMMEDIATE`` serializes claimers. A claim sets a lease: a
delivery whose worker died is claimable again once ``lease_until`` has passed, and goes
out under the same identity (its id).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.domain.errors import Conflict, NotFound
from runbell.domain.records import Attempt, ClaimedDelivery, Delivery
from runbell.ids import new_id
from runbell.store import fast
from runbell.store import tables as t
from runbell.store.db import Tx

DUE = ("queued", "retry_scheduled", "deferred", "delivery_unknown")
REPLAYABLE = ("dead", "failed", "delivery_unknown", "cancelled", "skipped", "retry_scheduled")
STATUSES = (
    "queued",
    "sending",
    "accepted",
    "retry_scheduled",
    "deferred",
    "failed",
    "dead",
    "delivery_unknown",
    "cancelled",
    "skipped",
)


PENDING_DELIVERY = ("queued", "retry_scheduled", "deferred", "delivery_unknown")
DELIVERY_COLUMNS = (
    "id",
    "tenant_id",
    "notification_id",
    "channel",
    "destination",
    "status",
    "attempt_count",
    "next_attempt_at",
    "created_at",
    "updated_at",
    "run_id",
    "event_type",
    "event_key",
    "payload",
    "urgency",
    "last_error",
)
_ADD_DELIVERIES = fast.insert(t.deliveries, DELIVERY_COLUMNS)


def add_deliveries(conn: Connection, rows: list[Delivery]) -> None:
    """Outbox rows, in one statement; every row names every column (:func:`delivery_row`).

    In a unit of work (:class:`~runbell.store.db.Tx`) they are written when it ends, with
    every other unit's of the batch (one ``executemany``), or as soon as anything else in
    this module touches the outbox in the same transaction (:func:`write_deferred`)."""
    tx = Tx.of(conn)
    if tx is None:
        _ADD_DELIVERIES.many(conn, rows)
        return
    for row in rows:
        tx.defer(_ADD_DELIVERIES, cast(dict[str, Any], row))


def write_deferred(conn: Connection) -> None:
    """Write the outbox rows this transaction has deferred, before a statement that
    reads or changes the outbox (a cancelled notification's deliveries, a claim…)."""
    tx = Tx.of(conn)
    if tx is not None:
        tx.flush(_ADD_DELIVERIES)


def delivery_row(
    tenant_id: str,
    notification_id: str | None,
    channel: str,
    destination: str,
    status: str,
    now: datetime,
) -> Delivery:
    return {
        "id": new_id("dlv"),
        "tenant_id": tenant_id,
        "notification_id": notification_id,
        "channel": channel,
        "destination": destination,
        "status": status,
        "attempt_count": 0,
        "next_attempt_at": now if status == "queued" else None,
        "created_at": now,
        "updated_at": now,
        # Every row carries every key: a multi-row INSERT takes its columns from the
        # first row, so a key missing from one row would fail the whole transaction.
        "run_id": None,
        "event_type": None,
        "event_key": None,
        "payload": None,
        "urgency": None,
        "last_error": None,
    }


def cancel_pending(
    conn: Connection, tenant_id: str, notification_id: str, now: datetime, reason: str
) -> int:
    """Cancel what a closed notification still had queued, on every channel (inv. 6)."""
    write_deferred(conn)
    return int(
        conn.execute(
            sa.update(t.deliveries)
            .where(
                t.deliveries.c.tenant_id == tenant_id,
                t.deliveries.c.notification_id == notification_id,
                t.deliveries.c.status.in_(PENDING_DELIVERY),
            )
            .values(
                status="cancelled", next_attempt_at=None, updated_at=now, last_error=reason[:500]
            )
        ).rowcount
    )


def scrub_payloads(conn: Connection, tenant_id: str, notification_id: str) -> None:
    """Drop the stored payloads of a notification's deliveries (its recipient lost access)."""
    write_deferred(conn)
    conn.execute(
        sa.update(t.deliveries)
        .where(
            t.deliveries.c.tenant_id == tenant_id,
            t.deliveries.c.notification_id == notification_id,
        )
        .values(payload=None)
    )


def claim(
    conn: Connection,
    *,
    now: datetime,
    worker_id: str,
    lease_s: float,
    limit: int,
    only: str | None = None,
) -> list[ClaimedDelivery]:
    """Claim up to ``limit`` due deliveries (``only``: that one, if it is due), in one
    statement; each row also carries the status it had (``was_status``), so one given
    back unsent keeps it (:func:`release`)."""
    write_deferred(conn)
    d = t.deliveries
    due = sa.or_(
        sa.and_(d.c.status.in_(DUE), d.c.next_attempt_at <= now),
        sa.and_(d.c.status == "sending", d.c.lease_until < now),
    )
    if only is not None:
        due = sa.and_(d.c.id == only, due)
    candidates = (
        sa.select(d.c.id, d.c.status.label("was_status"))
        .where(due)
        .order_by(d.c.next_attempt_at)
        .limit(limit)
    )
    claimed = sa.update(d).values(
        status="sending",
        claimed_by=worker_id,
        lease_until=now + timedelta(seconds=lease_s),
        attempt_count=d.c.attempt_count + 1,
        updated_at=now,
    )
    if conn.dialect.name == "postgresql":
        picked = candidates.with_for_update(skip_locked=True).subquery("picked")
        rows = conn.execute(
            claimed.where(d.c.id == picked.c.id).returning(*d.c, picked.c.was_status)
        ).all()
        return [cast(ClaimedDelivery, dict(r._mapping)) for r in rows]  # the columns, was_status
    # SQLite: RETURNING sees only the updated table, so the old statuses are read first
    # (the write lock BEGIN IMMEDIATE took keeps them as read).
    was = {r.id: r.was_status for r in conn.execute(candidates)}
    if not was:
        return []
    rows = conn.execute(claimed.where(d.c.id.in_(list(was))).returning(*d.c)).all()
    return [cast(ClaimedDelivery, {**r._mapping, "was_status": was[r.id]}) for r in rows]


def renew_lease(
    conn: Connection, delivery_id: str, worker_id: str, now: datetime, lease_s: float
) -> bool:
    """Extend our claim just before sending; False if it is no longer ours."""
    write_deferred(conn)
    d = t.deliveries
    return bool(
        conn.execute(
            sa.update(d)
            .where(d.c.id == delivery_id, d.c.claimed_by == worker_id, d.c.status == "sending")
            .values(lease_until=now + timedelta(seconds=lease_s))
        ).rowcount
    )


def lock_claimed_many(conn: Connection, pairs: list[tuple[str, str | None]]) -> dict[str, Delivery]:
    """Lock a batch of deliveries to settle them, in one statement per table: their
    notifications first (in id order), then the deliveries (in id order) — the order
    :func:`lock_claimed` and every ack use, so batches and acks never deadlock."""
    write_deferred(conn)
    if not pairs:
        return {}
    d = t.deliveries
    ids = sorted({delivery_id for delivery_id, _ in pairs})
    q = sa.select(d).where(d.c.id.in_(ids)).order_by(d.c.id)
    if conn.dialect.name == "postgresql":
        note_ids = sorted({n for _, n in pairs if n is not None})
        if note_ids:
            conn.execute(
                sa.select(t.notifications.c.id)
                .where(t.notifications.c.id.in_(note_ids))
                .order_by(t.notifications.c.id)
                .with_for_update()
            )
        q = q.with_for_update()
    return {r.id: cast(Delivery, dict(r._mapping)) for r in conn.execute(q)}


def lock_claimed(
    conn: Connection, delivery_id: str, notification_id: str | None = None
) -> Delivery | None:
    """Lock a delivery to settle it — its notification first, when it has one.

    Every path that touches both takes the notification before its deliveries (an ack
    closes the notification, then cancels the deliveries); settling in the same order
    keeps concurrent settles and acks of one notification from deadlocking.
    """
    write_deferred(conn)
    q = sa.select(t.deliveries).where(t.deliveries.c.id == delivery_id)
    if conn.dialect.name == "postgresql":
        if notification_id is not None:
            conn.execute(
                sa.select(t.notifications.c.id)
                .where(t.notifications.c.id == notification_id)
                .with_for_update()
            )
        q = q.with_for_update()
    row = conn.execute(q).first()
    return None if row is None else cast(Delivery, dict(row._mapping))


def settle(conn: Connection, delivery_id: str, now: datetime, **values: Any) -> None:
    """Move a delivery to its next state and release its lease."""
    write_deferred(conn)
    conn.execute(
        sa.update(t.deliveries)
        .where(t.deliveries.c.id == delivery_id)
        .values(lease_until=None, claimed_by=None, updated_at=now, **values)
    )


def settle_many(conn: Connection, delivery_ids: list[str], now: datetime, **values: Any) -> None:
    """:func:`settle` for many deliveries moving to the same state, in one statement."""
    write_deferred(conn)
    if delivery_ids:
        conn.execute(
            sa.update(t.deliveries)
            .where(t.deliveries.c.id.in_(delivery_ids))
            .values(lease_until=None, claimed_by=None, updated_at=now, **values)
        )


def release(conn: Connection, held: list[tuple[ClaimedDelivery, datetime]], now: datetime) -> None:
    """Give claimed deliveries back unsent, each due again at its own time (a rate limit
    has no room for it yet): not an attempt, so the claim's count is taken back, and the
    row keeps the status it had — an orphan of a dead worker (``sending``) becomes
    ``delivery_unknown``, which is what it is."""
    write_deferred(conn)
    if not held:
        return
    d = t.deliveries
    conn.execute(
        sa.update(d)
        .where(d.c.id == sa.bindparam("b_id"))
        .values(
            status=sa.bindparam("b_status"),
            next_attempt_at=sa.bindparam("b_at"),
            attempt_count=d.c.attempt_count - 1,
            lease_until=None,
            claimed_by=None,
            updated_at=now,
        ),
        [
            {
                "b_id": row["id"],
                "b_at": at,
                "b_status": "delivery_unknown"
                if row["was_status"] == "sending"
                else row["was_status"],
            }
            for row, at in held
        ],
    )


def cancel_pending_to(
    conn: Connection, channel: str, destination: str, now: datetime, reason: str
) -> int:
    """Cancel every delivery still pending to one destination (a push subscription that
    is gone): whatever notification it belongs to, nothing can reach it any more."""
    write_deferred(conn)
    d = t.deliveries
    return int(
        conn.execute(
            sa.update(d)
            .where(
                d.c.channel == channel,
                d.c.destination == destination,
                d.c.status.in_(PENDING_DELIVERY),
            )
            .values(status="cancelled", last_error=reason, updated_at=now)
        ).rowcount
    )


_ADD_ATTEMPTS = fast.insert(t.delivery_attempts)


def add_attempts(conn: Connection, attempts: list[Attempt]) -> None:
    """Many attempt rows in one statement; each dict holds ``tenant_id``, ``delivery_id``,
    ``attempt_no`` and the attempt's columns. Compiled once (:mod:`runbell.store.fast`):
    the worker writes one per delivery, and SQLAlchemy's per-row parameter handling was
    most of the result write's own CPU (bench/profile/p3-p4-delivery.md, second pass)."""
    write_deferred(conn)
    if attempts:
        _ADD_ATTEMPTS.many(conn, [{"id": new_id("att"), **a} for a in attempts])


def get(conn: Connection, tenant_id: str, delivery_id: str) -> Delivery:
    write_deferred(conn)
    row = conn.execute(
        sa.select(t.deliveries).where(
            t.deliveries.c.tenant_id == tenant_id, t.deliveries.c.id == delivery_id
        )
    ).first()
    if row is None:
        raise NotFound(f"no delivery {delivery_id!r}")
    return cast(Delivery, dict(row._mapping))


def list_for_tenant(
    conn: Connection,
    tenant_id: str,
    *,
    statuses: list[str] | None,
    channel: str | None,
    endpoint_id: str | None,
    before: str | None,
    limit: int,
) -> list[Delivery]:
    write_deferred(conn)
    d = t.deliveries
    q = sa.select(d).where(d.c.tenant_id == tenant_id)
    if statuses:
        q = q.where(d.c.status.in_(statuses))
    if channel:
        q = q.where(d.c.channel == channel)
    if endpoint_id:
        q = q.where(d.c.channel == "webhook", d.c.destination == endpoint_id)
    if before:
        q = q.where(d.c.id < before)
    found = conn.execute(q.order_by(d.c.id.desc()).limit(limit))
    return [cast(Delivery, dict(r._mapping)) for r in found]


def replay(conn: Connection, tenant_id: str, delivery_id: str, now: datetime) -> Delivery:
    """Queue a finished delivery again, under the same identity. The dispatch-time checks
    still apply: replaying an acknowledged person's alert sends nothing."""
    write_deferred(conn)
    d = t.deliveries
    row = get(conn, tenant_id, delivery_id)
    if row["status"] not in REPLAYABLE:
        raise Conflict(
            f"delivery is {row['status']}; only {', '.join(REPLAYABLE)} can be replayed",
            current={"id": row["id"], "status": row["status"]},
        )
    conn.execute(
        sa.update(d)
        .where(d.c.id == delivery_id)
        .values(
            status="queued",
            next_attempt_at=now,
            lease_until=None,
            claimed_by=None,
            updated_at=now,
            last_error=None,
        )
    )
    return get(conn, tenant_id, delivery_id)


def requeue_for_endpoint(
    conn: Connection,
    tenant_id: str,
    endpoint_id: str,
    now: datetime,
    *,
    since: datetime,
    until: datetime | None,
) -> int:
    """Queue again, under their original identity, the endpoint's messages created in
    [since, until) that did not get through (failed, dead, or cancelled while it was
    disabled); how many."""
    write_deferred(conn)
    d = t.deliveries
    cond = [
        d.c.tenant_id == tenant_id,
        d.c.channel == "webhook",
        d.c.destination == endpoint_id,
        d.c.status.in_(("dead", "failed", "cancelled")),
        d.c.created_at >= since,
    ]
    if until is not None:
        cond.append(d.c.created_at < until)
    n = conn.execute(
        sa.update(d)
        .where(*cond)
        .values(
            status="queued",
            next_attempt_at=now,
            lease_until=None,
            claimed_by=None,
            last_error=None,
            updated_at=now,
        )
    ).rowcount
    return int(n)


def operator_events(conn: Connection, tenant_id: str, limit: int) -> list[dict[str, Any]]:
    """The tenant's operator events (disabled endpoints, misconfigured destinations),
    newest first: ``{id, kind, detail, created_at}``."""
    write_deferred(conn)
    oe = t.operator_events
    rows = conn.execute(
        sa.select(oe.c.id, oe.c.kind, oe.c.detail, oe.c.created_at)
        .where(oe.c.tenant_id == tenant_id)
        .order_by(oe.c.created_at.desc(), oe.c.id.desc())
        .limit(limit)
    ).all()
    return [dict(r._mapping) for r in rows]


def counts_by_status(conn: Connection) -> list[tuple[str, str, int]]:
    write_deferred(conn)
    d = t.deliveries
    rows = conn.execute(
        sa.select(d.c.channel, d.c.status, sa.func.count()).group_by(d.c.channel, d.c.status)
    ).all()
    return [(r[0], r[1], int(r[2])) for r in rows]
