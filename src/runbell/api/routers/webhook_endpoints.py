"""Tenant webhook endpoints: register, filter, rotate secrets, disable, recover."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from runbell.api.deps import Admin, Core
from runbell.api.idempotent import Act, IdemKey, act_once
from runbell.api.openapi import problems
from runbell.api.routers.sources import check_destination
from runbell.domain.errors import ValidationFailed
from runbell.flows.views import iso
from runbell.ingress.signatures import new_secret
from runbell.store import endpoints
from runbell.store import tables as t
from runbell.store.db import Tx
from runbell.store.endpoints import WEBHOOK_EVENT_TYPES

router = APIRouter(prefix="/v1/webhook-endpoints", tags=["webhooks"])
EventType = Literal[
    "run.created",
    "run.transitioned",
    "run.finished",
    "run.mismatch",
    "run.mismatch_closed",
    "notification.created",
    "notification.closed",
    "input_request.opened",
    "input_request.answered",
    "input_request.expired",
    "input_request.superseded",
    "input_request.cancelled",
]
assert set(EventType.__args__) == set(WEBHOOK_EVENT_TYPES)  # type: ignore[attr-defined]


class EndpointIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(min_length=8, max_length=2000)
    description: str | None = Field(default=None, max_length=500)
    event_types: list[EventType] = Field(default_factory=list, description="[] = all")
    rate_limit_per_s: float | None = Field(default=None, gt=0, le=1000)


class EndpointPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str | None = Field(default=None, min_length=8, max_length=2000)
    description: str | None = Field(default=None, max_length=500)
    event_types: list[EventType] | None = None
    status: Literal["enabled", "disabled"] | None = None


class RotateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    overlap_s: StrictInt = Field(
        default=86400, ge=0, le=7 * 86400, description="how long the previous secrets stay valid"
    )


def endpoint_view(ep: dict[str, Any], now: datetime) -> dict[str, Any]:
    return {
        "id": ep["id"],
        "url": ep["url"],
        "description": ep["description"],
        "event_types": ep["event_types"],
        "status": ep["status"],
        "disabled_reason": ep["disabled_reason"],
        "dead_streak": ep["dead_streak"],
        "rate_limit_per_s": ep["rate_limit_per_s"],
        "secrets": [
            {"created_at": s["created_at"], "expires_at": s["expires_at"]}
            for s in ep["secrets"]
            if endpoints.live(s, now)
        ],
        "created_at": iso(ep["created_at"]),
        "updated_at": iso(ep["updated_at"]),
    }


@router.post("", status_code=201, response_model=None, responses=problems(401, 403, 413, 422, 503))
def create(body: EndpointIn, who: Admin, core: Core, key: IdemKey) -> Response:
    """Register an endpoint; the answer carries its signing secret, once (a retry under
    the same Idempotency-Key replays that answer, secret included)."""

    def prepare() -> Act:
        check_destination(core, body.url)
        secret = new_secret()

        def act(tx: Tx) -> tuple[int, dict[str, Any]]:
            endpoint_id = endpoints.create(
                tx.conn,
                who.tenant_id,
                tx.now,
                url=body.url,
                description=body.description,
                event_types=list(body.event_types),
                sealed_secret=core.box.seal(secret),
                rate_limit_per_s=body.rate_limit_per_s,
            )
            ep = endpoints.get(tx.conn, who.tenant_id, endpoint_id)
            return 201, {**endpoint_view(ep, tx.now), "secret": secret}

        return act

    return act_once(core, key, prepare)


@router.get("", responses=problems(401, 403, 503))
def list_endpoints(who: Admin, core: Core) -> dict[str, Any]:
    now = core.db.clock()
    with core.db.read() as conn:
        return {
            "endpoints": [endpoint_view(e, now) for e in endpoints.list_all(conn, who.tenant_id)]
        }


@router.get("/{endpoint_id}", responses=problems(401, 403, 404, 503))
def get_endpoint(endpoint_id: str, who: Admin, core: Core) -> dict[str, Any]:
    with core.db.read() as conn:
        return endpoint_view(endpoints.get(conn, who.tenant_id, endpoint_id), core.db.clock())


@router.patch("/{endpoint_id}", responses=problems(401, 403, 404, 413, 422, 503))
def patch(endpoint_id: str, body: EndpointPatch, who: Admin, core: Core) -> dict[str, Any]:
    """Change the URL or filter, or enable/disable. Re-enabling resets the dead streak."""
    values = body.model_dump(exclude_unset=True)
    for name in ("url", "event_types", "status"):
        if name in values and values[name] is None:
            raise ValidationFailed(f"{name} cannot be null", field=name)
    if "url" in values:
        check_destination(core, values["url"])
    if values.get("status") == "enabled":
        values.update(dead_streak=0, disabled_reason=None)
    elif values.get("status") == "disabled":
        values["disabled_reason"] = "disabled by an admin"
    with core.db.transaction() as tx:
        endpoints.get(tx.conn, who.tenant_id, endpoint_id, for_update=True)
        if values:
            endpoints.update(tx.conn, who.tenant_id, endpoint_id, tx.now, **values)
        ep = endpoints.get(tx.conn, who.tenant_id, endpoint_id)
    return endpoint_view(ep, core.db.clock())


@router.post(
    "/{endpoint_id}/rotate-secret",
    response_model=None,
    responses=problems(401, 403, 404, 413, 422, 503),
)
def rotate(
    endpoint_id: str, who: Admin, core: Core, key: IdemKey, body: RotateIn | None = None
) -> Response:
    """A new secret; messages are signed with it AND the previous ones until they expire."""
    overlap = (body or RotateIn()).overlap_s

    def act(tx: Tx) -> tuple[int, dict[str, Any]]:
        secret = new_secret()
        endpoints.rotate(
            tx.conn, who.tenant_id, endpoint_id, tx.now, core.box.seal(secret), overlap
        )
        ep = endpoints.get(tx.conn, who.tenant_id, endpoint_id)
        return 200, {**endpoint_view(ep, tx.now), "secret": secret}

    return act_once(core, key, lambda: act)


@router.post(
    "/{endpoint_id}/recover",
    status_code=202,
    response_model=None,
    responses=problems(401, 403, 404, 413, 422, 503),
)
def recover(
    endpoint_id: str,
    who: Admin,
    core: Core,
    key: IdemKey,
    since: Annotated[datetime, Query(description="ISO 8601 with offset")],
    until: Annotated[datetime | None, Query()] = None,
) -> Response:
    """Re-queue every message of this endpoint created in [since, until) that did not get
    through: failed, dead, or cancelled while the endpoint was disabled. Each gets one
    more try under its original webhook-id (then the normal dead-letter rules apply)."""
    for name, value in (("since", since), ("until", until)):
        if value is not None and value.tzinfo is None:
            raise ValidationFailed(f"{name} needs a timezone offset", field=name)
    d = t.deliveries

    def act(tx: Tx) -> tuple[int, dict[str, Any]]:
        endpoints.get(tx.conn, who.tenant_id, endpoint_id)
        cond = [
            d.c.tenant_id == who.tenant_id,
            d.c.channel == "webhook",
            d.c.destination == endpoint_id,
            d.c.status.in_(("dead", "failed", "cancelled")),
            d.c.created_at >= since,
        ]
        if until is not None:
            cond.append(d.c.created_at < until)
        n = tx.conn.execute(
            sa.update(d)
            .where(*cond)
            .values(
                status="queued",
                next_attempt_at=tx.now,
                lease_until=None,
                claimed_by=None,
                last_error=None,
                updated_at=tx.now,
            )
        ).rowcount
        tx.wake_outbox = n > 0
        return 202, {"requeued": int(n)}

    return act_once(core, key, lambda: act)
