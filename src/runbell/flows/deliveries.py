"""The operator's view of the outbox: what was sent where, what failed and why, replaying
a delivery, and the problems an operator must fix.

Invariants kept here (DESIGN §2):

- 14: a replay queues the delivery again under its original identity (the same
  webhook-id); only finished deliveries can be replayed (409 otherwise).
- 6 and 8: a replay does not bypass the dispatch-time checks: an acknowledged alert or a
  recipient who lost access still sends nothing.
- Tenant isolation: another tenant's delivery id answers 404.

The API (``/v1/deliveries``, ``/v1/operator-events``) and ``runbell deliveries`` call
these.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NotRequired, TypedDict

from runbell.domain.records import Attempt, Delivery
from runbell.flows.context import Core
from runbell.flows.idempotency import Answer, IdempotencyKey, act_once
from runbell.flows.views import iso
from runbell.store import notifications as notes
from runbell.store import outbox
from runbell.store.db import Tx

STATUSES = outbox.STATUSES  # every delivery status, in lifecycle order


class DeliveryView(TypedDict):
    """A delivery as the API shows it; with its attempts, one entry per try."""

    id: str
    channel: str
    destination: str
    status: str
    notification_id: str | None
    run_id: str | None
    event_type: str | None
    attempt_count: int
    next_attempt_at: str | None
    last_error: str | None
    created_at: str | None
    updated_at: str | None
    attempts: NotRequired[list[dict[str, Any]]]  # each attempt's columns, times as text


class DeliveryPage(TypedDict):
    deliveries: list[DeliveryView]
    next_cursor: str | None


class OperatorEvent(TypedDict):
    id: str
    kind: str
    detail: str
    at: str | None


class OperatorEvents(TypedDict):
    events: list[OperatorEvent]


def delivery_view(d: Delivery, attempts: list[Attempt] | None = None) -> DeliveryView:
    """A delivery as the API shows it; with ``attempts``, one entry per try."""
    out: DeliveryView = {
        "id": d["id"],
        "channel": d["channel"],
        "destination": d["destination"],
        "status": d["status"],
        "notification_id": d["notification_id"],
        "run_id": d["run_id"],
        "event_type": d["event_type"],
        "attempt_count": d["attempt_count"],
        "next_attempt_at": iso(d["next_attempt_at"]),
        "last_error": d["last_error"],
        "created_at": iso(d["created_at"]),
        "updated_at": iso(d["updated_at"]),
    }
    if attempts is not None:
        out["attempts"] = [
            {
                k: (iso(v) if isinstance(v, datetime) else v)
                for k, v in a.items()
                if k not in ("tenant_id", "delivery_id")
            }
            for a in attempts
        ]
    return out


def list_deliveries(
    core: Core,
    tenant_id: str,
    *,
    statuses: list[str] | None = None,
    channel: str | None = None,
    endpoint_id: str | None = None,
    cursor: str | None = None,
    limit: int = 100,
) -> DeliveryPage:
    """Deliveries newest first, as views; ``next_cursor`` (or None) pages on."""
    with core.db.read() as conn:
        rows = outbox.list_for_tenant(
            conn,
            tenant_id,
            statuses=statuses or None,
            channel=channel,
            endpoint_id=endpoint_id,
            before=cursor,
            limit=limit + 1,
        )
    page = rows[:limit]
    return {
        "deliveries": [delivery_view(d) for d in page],
        "next_cursor": page[-1]["id"] if len(rows) > limit else None,
    }


def get_delivery(core: Core, tenant_id: str, delivery_id: str) -> DeliveryView:
    """One delivery with its attempts (404 for another tenant's)."""
    with core.db.read() as conn:
        d = outbox.get(conn, tenant_id, delivery_id)
        attempts = notes.attempts_for(conn, delivery_id)
    return delivery_view(d, attempts)


def replay(
    core: Core, tenant_id: str, delivery_id: str, key: IdempotencyKey | None = None
) -> Answer:
    """Queue a finished delivery again under the same identity (200, the delivery);
    409 when it is not finished."""

    def act(tx: Tx) -> tuple[int, DeliveryView]:
        d = outbox.replay(tx.conn, tenant_id, delivery_id, tx.now)
        tx.wake_outbox = True
        return 200, delivery_view(d)

    return act_once(core.db, core.box, key, lambda: act)


def operator_events(core: Core, tenant_id: str, limit: int = 100) -> OperatorEvents:
    """Problems an operator must fix, newest first: disabled endpoints, misconfigured
    destinations (push 403, SMTP auth, refused URLs)."""
    with core.db.read() as conn:
        rows = outbox.operator_events(conn, tenant_id, limit)
    return {
        "events": [
            {"id": r["id"], "kind": r["kind"], "detail": r["detail"], "at": iso(r["created_at"])}
            for r in rows
        ]
    }
