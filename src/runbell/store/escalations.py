"""Escalation steps (one row per rung of a notification's ladder) and the retractions
sent when a notification is handled.

The sweep reads pending steps by ``ix_escalation_steps_due`` (status, due time): its cost
follows what is due, not history. A retraction is a delivery row on a channel whose
messages collapse (``domain.channels.COLLAPSING``: web push) with no notification id
(the notification's own row to that destination exists already) and event type
:data:`RETRACTED`, made once per notification and destination by the
``uq_delivery_event_once`` constraint.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.domain.channels import COLLAPSING
from runbell.domain.escalation import RETRACTED
from runbell.domain.push_actions import REPUSHED
from runbell.domain.records import EscalationStep, Notification
from runbell.ids import new_id
from runbell.store import fast, outbox
from runbell.store import tables as t

_S = t.escalation_steps


def add_steps(
    conn: Connection,
    note: Notification,
    steps: list[tuple[int, str, int, datetime]],
    *,
    on_failure: bool = False,
    unknown_after_s: int | None = None,
    purpose: str | None = None,
    reason: str | None = None,
) -> None:
    """The ladder's rows, ``steps`` = (step number, channel, after_s, due time);
    ``on_failure``/``unknown_after_s``: the rule's fallback (``flows.fallback``);
    ``purpose``/``reason``: a snooze rung and what the trail says of it
    (``flows.push_actions``)."""
    if not steps:
        return
    conn.execute(
        _S.insert(),
        [
            {
                "id": new_id("esc"),
                "tenant_id": note["tenant_id"],
                "notification_id": note["id"],
                "step_no": no,
                "channel": channel,
                "after_s": after_s,
                "due_at": due,
                "status": "pending",
                "created_at": note["created_at"],
                "on_failure": on_failure,
                "unknown_after_s": unknown_after_s,
                "purpose": purpose,
                "reason": reason,
            }
            for no, channel, after_s, due in steps
        ],
    )


def cancel_pending(
    conn: Connection, tenant_id: str, notification_id: str, now: datetime, reason: str
) -> int:
    return int(
        conn.execute(
            sa.update(_S)
            .where(
                _S.c.tenant_id == tenant_id,
                _S.c.notification_id == notification_id,
                _S.c.status == "pending",
            )
            .values(status="cancelled", settled_at=now, reason=reason[:500])
        ).rowcount
    )


DUE = fast.Statement(
    lambda: (
        sa.select(_S.c.id)
        .where(
            _S.c.status == "pending",
            _S.c.due_at <= sa.bindparam("now", type_=t.UTCDateTime),
        )
        .order_by(_S.c.due_at)
        .limit(sa.bindparam("limit", type_=sa.Integer))
    )
)


def due(conn: Connection, now: datetime, limit: int) -> list[str]:
    """Ids of pending steps due by ``now``, oldest first."""
    return [str(r["id"]) for r in DUE.rows(conn, now=now, limit=limit)]


def lock(conn: Connection, step_id: str) -> EscalationStep | None:
    row = conn.execute(sa.select(_S).where(_S.c.id == step_id).with_for_update()).first()
    return None if row is None else cast(EscalationStep, dict(row._mapping))


def settle(
    conn: Connection,
    step_id: str,
    status: str,
    now: datetime,
    reason: str,
    deliveries: int,
    trigger: str | None = None,
) -> None:
    """``trigger``: what fired it (``time``, or the failure a fallback answered)."""
    values: dict[str, Any] = {
        "status": status,
        "settled_at": now,
        "reason": reason[:500],
        "deliveries": deliveries,
    }
    if trigger is not None:
        values["trigger"] = trigger
    conn.execute(sa.update(_S).where(_S.c.id == step_id).values(**values))


def fallback_steps(conn: Connection, tenant_id: str, notification_id: str) -> list[EscalationStep]:
    """The notification's pending rungs that may fire on a failure, locked, in ladder
    order: the row lock makes a fallback fire once however many workers see failures."""
    rows = conn.execute(
        sa.select(_S)
        .where(
            _S.c.tenant_id == tenant_id,
            _S.c.notification_id == notification_id,
            _S.c.status == "pending",
            _S.c.on_failure.is_(True),
        )
        .order_by(_S.c.step_no)
        .with_for_update()
    ).all()
    return [cast(EscalationStep, dict(r._mapping)) for r in rows]


#: Delivery states that may still reach the person (or did).
_LIVE = ("accepted", "queued", "sending", "retry_scheduled", "delivery_unknown", "deferred")


def reaches_elsewhere(
    conn: Connection, tenant_id: str, notification_id: str, channels: Sequence[str], but: str
) -> bool:
    """Whether another delivery of the notification than ``but`` on a person channel
    (``channels``) reached the person or still may (a second device, another channel)."""
    d = t.deliveries
    outbox.write_deferred(conn)  # this batch's outbox rows first
    found = conn.execute(
        sa.select(sa.literal(1))
        .where(
            d.c.tenant_id == tenant_id,
            d.c.notification_id == notification_id,
            d.c.channel.in_(channels),
            d.c.event_type.is_(None),
            d.c.id != but,
            d.c.status.in_(_LIVE),
        )
        .limit(1)
    ).first()
    return found is not None


def for_notification(
    conn: Connection, tenant_id: str, notification_id: str
) -> list[EscalationStep]:
    rows = conn.execute(
        sa.select(_S)
        .where(_S.c.tenant_id == tenant_id, _S.c.notification_id == notification_id)
        .order_by(_S.c.step_no)
    ).all()
    return [cast(EscalationStep, dict(r._mapping)) for r in rows]


def destinations_used(
    conn: Connection, tenant_id: str, notification_id: str, channel: str
) -> set[str]:
    """Where the notification already has a delivery on ``channel``."""
    d = t.deliveries
    outbox.write_deferred(conn)  # this batch's outbox rows first
    return {
        str(r)
        for r in conn.execute(
            sa.select(d.c.destination).where(
                d.c.tenant_id == tenant_id,
                d.c.notification_id == notification_id,
                d.c.channel == channel,
            )
        ).scalars()
    }


def delivered_collapsing(
    conn: Connection, tenant_id: str, notification_id: str
) -> list[tuple[str, str]]:
    """(channel, destination) of every send of the notification that a device may still
    show and a newer message can replace (channels with ``collapse``: web push), accepted
    by its service: its own deliveries and its re-pushes after a snooze, once each."""
    d = t.deliveries
    outbox.write_deferred(conn)  # this batch's outbox rows first
    rows = conn.execute(
        sa.select(d.c.channel, d.c.destination)
        .where(
            d.c.tenant_id == tenant_id,
            sa.or_(
                d.c.notification_id == notification_id,
                d.c.event_key.like(f"{REPUSHED}:{notification_id}:%"),
            ),
            d.c.channel.in_(COLLAPSING),
            d.c.status == "accepted",
        )
        .distinct()
    ).all()
    return sorted({(str(r.channel), str(r.destination)) for r in rows})


def retraction_key(notification_id: str) -> str:
    return f"{RETRACTED}:{notification_id}"


def add_retractions(
    conn: Connection, note: Notification, shown: list[tuple[str, str]], now: datetime
) -> int:
    """One neutral replacement per (channel, destination) that showed ``note``."""
    if not shown:
        return 0
    rows = []
    for channel, destination in shown:
        row = outbox.delivery_row(note["tenant_id"], None, channel, destination, "queued", now)
        row.update(
            {
                "run_id": note["run_id"],
                "urgency": "normal",
                "event_type": RETRACTED,
                "event_key": retraction_key(note["id"]),
                "payload": {"notification_id": note["id"], "closed_as": note["state"]},
            }
        )
        rows.append(row)
    outbox.add_deliveries(conn, rows)
    return len(rows)


def retractions_for(conn: Connection, tenant_id: str, notification_id: str) -> list[dict[str, Any]]:
    d = t.deliveries
    outbox.write_deferred(conn)  # this batch's outbox rows first
    rows = conn.execute(
        sa.select(d)
        .where(
            d.c.tenant_id == tenant_id,
            d.c.channel.in_(COLLAPSING),
            d.c.event_key == retraction_key(notification_id),
        )
        .order_by(d.c.id)
    ).all()
    return [dict(r._mapping) for r in rows]
