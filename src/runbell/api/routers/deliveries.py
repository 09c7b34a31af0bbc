"""The operator's view of the outbox: what failed, why, and replay."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from fastapi import APIRouter, Query, Response

from runbell.api.deps import Admin, Core
from runbell.api.idempotent import IdemKey, act_once
from runbell.api.openapi import problems
from runbell.flows.views import iso
from runbell.store import notifications as notes
from runbell.store import outbox
from runbell.store import tables as t
from runbell.store.db import Tx

router = APIRouter(prefix="/v1/deliveries", tags=["deliveries"])
Status = Literal[
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
]


assert set(Status.__args__) == set(outbox.STATUSES)  # type: ignore[attr-defined]


def delivery_view(
    d: dict[str, Any], attempts: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    out = {
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


@router.get("", responses=problems(401, 403, 422, 503))
def list_deliveries(
    who: Admin,
    core: Core,
    status: Annotated[list[Status] | None, Query()] = None,
    channel: Annotated[
        Literal["inbox", "email", "webpush", "chat", "webhook"] | None, Query()
    ] = None,
    endpoint_id: Annotated[str | None, Query(max_length=64)] = None,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> dict[str, Any]:
    """Deliveries newest first, e.g. ``?status=dead&status=delivery_unknown``."""
    with core.db.read() as conn:
        rows = outbox.list_for_tenant(
            conn,
            who.tenant_id,
            statuses=list(status) if status else None,
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


@router.get("/{delivery_id}", responses=problems(401, 403, 404, 503))
def get_delivery(delivery_id: str, who: Admin, core: Core) -> dict[str, Any]:
    with core.db.read() as conn:
        d = outbox.get(conn, who.tenant_id, delivery_id)
        attempts = notes.attempts_for(conn, delivery_id)
    return delivery_view(d, attempts)


@router.post(
    "/{delivery_id}/replay",
    response_model=None,
    responses=problems(401, 403, 404, 409, 413, 422, 503),
)
def replay(delivery_id: str, who: Admin, core: Core, key: IdemKey) -> Response:
    """Send it again under the same identity (same webhook-id). Checks at dispatch still
    apply: a person's acknowledged alert is not re-sent."""

    def act(tx: Tx) -> tuple[int, dict[str, Any]]:
        d = outbox.replay(tx.conn, who.tenant_id, delivery_id, tx.now)
        tx.wake_outbox = True
        return 200, delivery_view(d)

    return act_once(core, key, lambda: act)


operator_router = APIRouter(prefix="/v1/operator-events", tags=["deliveries"])


@operator_router.get("", responses=problems(401, 403, 422, 503))
def operator_events(
    who: Admin, core: Core, limit: Annotated[int, Query(ge=1, le=500)] = 100
) -> dict[str, Any]:
    """Problems an operator must fix, newest first: disabled endpoints, misconfigured
    destinations (push 403, SMTP auth, refused URLs)."""
    oe = t.operator_events
    with core.db.read() as conn:
        rows = conn.execute(
            sa.select(oe)
            .where(oe.c.tenant_id == who.tenant_id)
            .order_by(oe.c.created_at.desc(), oe.c.id.desc())
            .limit(limit)
        ).all()
    return {
        "events": [
            {"id": r.id, "kind": r.kind, "detail": r.detail, "at": iso(r.created_at)} for r in rows
        ]
    }
