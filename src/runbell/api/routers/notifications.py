"""The inbox: the authoritative record of every notification (DESIGN §6)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response

from runbell.api.deps import Admin, CoreDep, User
from runbell.api.idempotent import IdemKey
from runbell.api.openapi import problems
from runbell.api.responses import answered
from runbell.api.schemas import RUN_ID_PATTERN, InboxAckIn, InboxFilterName, ReceiptIn
from runbell.domain import limits as L
from runbell.domain.inbox import FILTERS, InboxFilter
from runbell.flows import inbox as inbox_flow
from runbell.flows import inbox_bulk, receipts
from runbell.flows import trail as trail_flow

router = APIRouter(prefix="/v1/notifications", tags=["notifications"])
# The inbox as a whole: a path of its own (under /v1/notifications/ a word is an id).
inbox_router = APIRouter(prefix="/v1/inbox", tags=["notifications"])
NoteState = Literal["open", "acknowledged", "resolved", "expired", "superseded", "revoked"]


@router.get("", responses=problems(401, 403, 422, 503))
def inbox(
    who: User,
    core: CoreDep,
    state: Annotated[list[NoteState] | None, Query()] = None,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    show: Annotated[
        InboxFilterName | None,
        Query(
            alias="filter",
            description="needs_me: requests, proposed changes, reviews; failures: failed, "
            "stalled, unconfirmed; finished: completed, cancelled, digests",
        ),
    ] = None,
    run_id: Annotated[
        str | None, Query(min_length=1, max_length=L.RUN_ID, pattern=RUN_ID_PATTERN)
    ] = None,
    subject_type: Annotated[
        str | None,
        Query(
            min_length=1, max_length=L.SUBJECT_TYPE, description="runs whose subject has this type"
        ),
    ] = None,
    subject_id: Annotated[
        str | None,
        Query(min_length=1, max_length=L.SUBJECT_ID, description="runs whose subject has this id"),
    ] = None,
    fold: Annotated[
        bool,
        Query(
            description="list an open digest as one entry (with folded, folded_open) and "
            "leave out the notifications it folds"
        ),
    ] = False,
) -> Mapping[str, Any]:
    """Your notifications, newest first. Pass ``next_cursor`` back as ``cursor``.

    ``filter``, ``run_id``, ``subject_type`` and ``subject_id`` (an agent or a project)
    narrow the list; a page may then hold fewer than ``limit`` though more follow."""
    only = InboxFilter(show=show, run_id=run_id, subject_type=subject_type, subject_id=subject_id)
    return inbox_flow.list_notifications(
        core,
        who,
        states=list(state) if state else None,
        before=cursor,
        limit=limit,
        only=only,
        fold=fold,
    )


@inbox_router.post("/acknowledge", response_model=None, responses=problems(401, 403, 413, 422, 503))
def acknowledge_group(body: InboxAckIn, who: User, core: CoreDep, key: IdemKey) -> Response:
    """Acknowledge one group of your open notifications at once: one run's, one
    subject's, or the ids named; only a filter's with ``filter``; none newer than
    ``up_to``. A digest acknowledges what it folds with it. Ids that are not yours are
    counted as ``not_found`` and left alone. Idempotent: again, it acknowledges nothing."""
    sel = inbox_bulk.Selection(
        run_id=body.run_id,
        subject=(body.subject.type, body.subject.id) if body.subject else None,
        notification_ids=tuple(body.notification_ids) if body.notification_ids else None,
        types=FILTERS[body.filter] if body.filter else None,
        up_to=body.up_to,
    )
    return answered(inbox_bulk.acknowledge_many(core, who, sel, key))


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
