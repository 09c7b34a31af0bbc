"""The inbox: the authoritative record of every notification (DESIGN §6)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response

from runbell.api.deps import Admin, CoreDep, User
from runbell.api.idempotent import IdemKey
from runbell.api.openapi import problems
from runbell.api.responses import answered
from runbell.api.schemas import ReceiptIn
from runbell.flows import inbox as inbox_flow
from runbell.flows import receipts
from runbell.flows import trail as trail_flow

router = APIRouter(prefix="/v1/notifications", tags=["notifications"])
NoteState = Literal["open", "acknowledged", "resolved", "expired", "superseded", "revoked"]


@router.get("", responses=problems(401, 403, 422, 503))
def inbox(
    who: User,
    core: CoreDep,
    state: Annotated[list[NoteState] | None, Query()] = None,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> Mapping[str, Any]:
    """Your notifications, newest first. Pass ``next_cursor`` back as ``cursor``."""
    return inbox_flow.list_notifications(
        core, who, states=list(state) if state else None, before=cursor, limit=limit
    )


@router.get("/{notification_id}", responses=problems(401, 403, 404, 503))
def get_notification(notification_id: str, who: User, core: CoreDep) -> Mapping[str, Any]:
    """The notification, the run as it is now, and whether its action can still run."""
    return inbox_flow.get_notification(core, who, notification_id)


@router.post(
    "/{notification_id}/ack", response_model=None, responses=problems(401, 403, 404, 413, 422, 503)
)
def acknowledge(notification_id: str, who: User, core: CoreDep, key: IdemKey) -> Response:
    """Close it as acknowledged and cancel everything still queued for it. Idempotent."""
    return answered(inbox_flow.acknowledge(core, who, notification_id, key))


@router.post(
    "/{notification_id}/receipts",
    status_code=201,
    response_model=None,
    responses=problems(401, 403, 404, 413, 422, 503),
)
def receipt(
    notification_id: str, body: ReceiptIn, who: User, core: CoreDep, key: IdemKey
) -> Response:
    """Device telemetry (displayed, opened, dismissed, clicked). Never a decision:
    opening is not approval, dismissing is not rejection."""
    return answered(
        receipts.record_receipt(core, who, notification_id, body.kind, body.channel, key)
    )


@router.get("/{notification_id}/trail", responses=problems(401, 403, 404, 503))
def trail(notification_id: str, who: Admin, core: CoreDep) -> Mapping[str, Any]:
    """Why it exists (rule and inputs), where it went (deliveries, attempts), its lifecycle."""
    return trail_flow.trail(core, who, notification_id)
