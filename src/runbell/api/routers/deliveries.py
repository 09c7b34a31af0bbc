"""The operator's view of the outbox: what failed, why, and replay."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response

from runbell.api.deps import Admin, CoreDep
from runbell.api.idempotent import IdemKey
from runbell.api.openapi import problems
from runbell.api.responses import answered
from runbell.domain.channels import FACTS, INBOX
from runbell.flows import deliveries

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


# Spelled out for the OpenAPI document and mypy; checked against the channel registry.
Channel = Literal["inbox", "email", "webpush", "chat", "webhook"]


assert set(Status.__args__) == set(deliveries.STATUSES)  # type: ignore[attr-defined]
assert set(Channel.__args__) == {INBOX, *FACTS}  # type: ignore[attr-defined]


@router.get("", responses=problems(401, 403, 422, 503))
def list_deliveries(
    who: Admin,
    core: CoreDep,
    status: Annotated[list[Status] | None, Query()] = None,
    channel: Annotated[Channel | None, Query()] = None,
    endpoint_id: Annotated[str | None, Query(max_length=64)] = None,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> Mapping[str, Any]:
    """Deliveries newest first, e.g. ``?status=dead&status=delivery_unknown``."""
    return deliveries.list_deliveries(
        core,
        who.tenant_id,
        statuses=list(status) if status else None,
        channel=channel,
        endpoint_id=endpoint_id,
        cursor=cursor,
        limit=limit,
    )


@router.get("/{delivery_id}", responses=problems(401, 403, 404, 503))
def get_delivery(delivery_id: str, who: Admin, core: CoreDep) -> Mapping[str, Any]:
    return deliveries.get_delivery(core, who.tenant_id, delivery_id)


@router.post(
    "/{delivery_id}/replay",
    response_model=None,
    responses=problems(401, 403, 404, 409, 413, 422, 503),
)
def replay(delivery_id: str, who: Admin, core: CoreDep, key: IdemKey) -> Response:
    """Send it again under the same identity (same webhook-id). Checks at dispatch still
    apply: a person's acknowledged alert is not re-sent."""
    return answered(deliveries.replay(core, who.tenant_id, delivery_id, key))


operator_router = APIRouter(prefix="/v1/operator-events", tags=["deliveries"])


@operator_router.get("", responses=problems(401, 403, 422, 503))
def operator_events(
    who: Admin, core: CoreDep, limit: Annotated[int, Query(ge=1, le=500)] = 100
) -> Mapping[str, Any]:
    """Problems an operator must fix, newest first: disabled endpoints, misconfigured
    destinations (push 403, SMTP auth, refused URLs)."""
    return deliveries.operator_events(core, who.tenant_id, limit)
