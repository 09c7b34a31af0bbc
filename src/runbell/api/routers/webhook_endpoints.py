"""Tenant webhook endpoints: register, filter, rotate secrets, disable, recover."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Query, Response
from pydantic import BeforeValidator, ConfigDict, Field, StrictInt

from runbell.api.deps import Admin, CoreDep
from runbell.api.idempotent import IdemKey
from runbell.api.jsonschema import (
    HTTPS_NAME_URL,
    HTTPS_NAME_URL_MIN,
    Number,
    integral,
    not_null,
    refine,
)
from runbell.api.openapi import SSRF_RULE, problems, rule, rules
from runbell.api.responses import answered
from runbell.api.schemas import Storable
from runbell.domain import limits as L
from runbell.flows import endpoints
from runbell.flows.endpoints import EndpointChanges

router = APIRouter(prefix="/v1/webhook-endpoints", tags=["webhooks"])
EventType = Literal[
    "run.created",
    "run.transitioned",
    "run.finished",
    "run.mismatch",
    "run.mismatch_closed",
    "run.stalled",
    "run.recovered",
    "notification.created",
    "notification.closed",
    "input_request.opened",
    "input_request.answered",
    "input_request.expired",
    "input_request.superseded",
    "input_request.cancelled",
    "run.cancel_requested",
    "amendment.proposed",
    "amendment.approved",
    "amendment.rejected",
    "operation.updated",
    "run.reviewed",
    "run.review_decided",
    "run.owner_changed",
    "operation.superseded",
]
assert set(EventType.__args__) == set(endpoints.EVENT_TYPES)  # type: ignore[attr-defined]


#: What the schema can say of an endpoint URL: https, no credentials, a host name of two
#: or more labels (the SSRF guard says the rest: ``x-runbell-rules``).
URL_SCHEMA = {"allOf": [{"pattern": HTTPS_NAME_URL}]}


def _patch_schema(schema: dict[str, Any]) -> None:
    not_null("url", "event_types", "status")(schema)
    refine(url=URL_SCHEMA)(schema)


URL_RULES = rules(
    rule("url", SSRF_RULE, "unsafe-destination"),
)


class EndpointIn(Storable):
    model_config = ConfigDict(extra="forbid", json_schema_extra=refine(url=URL_SCHEMA))
    url: str = Field(min_length=HTTPS_NAME_URL_MIN, max_length=L.URL)
    description: str | None = Field(default=None, max_length=L.DESCRIPTION)
    event_types: list[EventType] = Field(default_factory=list, description="[] = all")
    rate_limit_per_s: Number | None = Field(default=None, gt=0, le=1000)


class EndpointPatch(Storable):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_patch_schema)
    url: str | None = Field(default=None, min_length=HTTPS_NAME_URL_MIN, max_length=L.URL)
    description: str | None = Field(default=None, max_length=L.DESCRIPTION)
    event_types: list[EventType] | None = None
    status: Literal["enabled", "disabled"] | None = None


class RotateIn(Storable):
    model_config = ConfigDict(extra="forbid")
    overlap_s: Annotated[StrictInt, Field(ge=0, le=7 * 86400), BeforeValidator(integral)] = Field(
        default=86400, description="how long the previous secrets stay valid"
    )


@router.post(
    "",
    status_code=201,
    response_model=None,
    responses=problems(401, 403, 413, 422, 503),
    openapi_extra=URL_RULES,
)
def create(body: EndpointIn, who: Admin, core: CoreDep, key: IdemKey) -> Response:
    """Register an endpoint; the answer carries its signing secret, once (a retry under
    the same Idempotency-Key replays that answer, secret included)."""
    return answered(
        endpoints.create_endpoint(
            core,
            who.tenant_id,
            url=body.url,
            description=body.description,
            event_types=list(body.event_types),
            rate_limit_per_s=body.rate_limit_per_s,
            key=key,
        )
    )


@router.get("", responses=problems(401, 403, 503))
def list_endpoints(who: Admin, core: CoreDep) -> Mapping[str, Any]:
    return endpoints.list_endpoints(core, who.tenant_id)


@router.get("/{endpoint_id}", responses=problems(401, 403, 404, 503))
def get_endpoint(endpoint_id: str, who: Admin, core: CoreDep) -> Mapping[str, Any]:
    return endpoints.get_endpoint(core, who.tenant_id, endpoint_id)


@router.patch(
    "/{endpoint_id}", responses=problems(401, 403, 404, 413, 422, 503), openapi_extra=URL_RULES
)
def patch(endpoint_id: str, body: EndpointPatch, who: Admin, core: CoreDep) -> Mapping[str, Any]:
    """Change the URL or filter, or enable/disable. Re-enabling resets the dead streak."""
    changes = cast(EndpointChanges, body.model_dump(exclude_unset=True))  # EndpointPatch's
    return endpoints.update_endpoint(core, who.tenant_id, endpoint_id, changes)


@router.post(
    "/{endpoint_id}/rotate-secret",
    response_model=None,
    responses=problems(401, 403, 404, 413, 422, 503),
)
def rotate(
    endpoint_id: str, who: Admin, core: CoreDep, key: IdemKey, body: RotateIn | None = None
) -> Response:
    """A new secret; messages are signed with it AND the previous ones until they expire."""
    overlap = (body or RotateIn()).overlap_s
    return answered(endpoints.rotate_secret(core, who.tenant_id, endpoint_id, overlap, key))


@router.post(
    "/{endpoint_id}/recover",
    status_code=202,
    response_model=None,
    responses=problems(401, 403, 404, 413, 422, 503),
)
def recover(
    endpoint_id: str,
    who: Admin,
    core: CoreDep,
    key: IdemKey,
    since: Annotated[datetime, Query(description="ISO 8601 with offset")],
    until: Annotated[datetime | None, Query()] = None,
) -> Response:
    """Re-queue every message of this endpoint created in [since, until) that did not get
    through: failed, dead, or cancelled while the endpoint was disabled. Each gets one
    more try under its original webhook-id (then the normal dead-letter rules apply)."""
    return answered(endpoints.recover(core, who.tenant_id, endpoint_id, since, until, key))
