"""The tenant's attention policy (read it, replace the tenant's own rules) and its
retention periods (read them, override some)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, RootModel, StrictBool

from runbell.api.deps import Admin, Core
from runbell.api.openapi import problems
from runbell.api.schemas import Integer, StallSeconds
from runbell.domain.errors import ValidationFailed
from runbell.flows import dry_run, policy, retention

router = APIRouter(prefix="/v1/policy", tags=["policy"])


class PolicyDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rules: list[dict[str, Any]] = Field(default_factory=list, max_length=200)
    replace_defaults: StrictBool = False
    quiet_hours_bypass: list[str] = Field(
        default_factory=list, description="urgencies that may be sent during quiet hours"
    )
    stall_after_seconds: StallSeconds | None = Field(
        default=None,
        description="a working run silent this long is stalled (default 900; 0: never)",
    )


@router.get("", responses=problems(401, 403, 503))
def get_policy(who: Admin, core: Core) -> dict[str, Any]:
    """The effective rules in order (tenant rules first), and the tenant's own document."""
    return policy.get_policy(core, who.tenant_id)


@router.put("", responses=problems(401, 403, 413, 422, 503))
def put_policy(body: PolicyDoc, who: Admin, core: Core) -> dict[str, Any]:
    """Replace the tenant's rules; they are validated whole before anything is stored."""
    return policy.set_policy(core, who.tenant_id, body.model_dump())


@router.post("/dry-run", responses=problems(401, 403, 413, 422, 503))
def dry_run_policy(
    body: PolicyDoc,
    who: Admin,
    core: Core,
    since: Annotated[
        str | None, Query(max_length=40, description="window start, ISO 8601 with offset")
    ] = None,
    until: Annotated[
        str | None, Query(max_length=40, description="window end, ISO 8601 (default: now)")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=dry_run.MAX_TRANSITIONS)] = dry_run.MAX_TRANSITIONS,
) -> dict[str, Any]:
    """Replay the tenant's recorded transitions of ``[since, until)`` through the candidate
    policy (the ``PUT /v1/policy`` document) and compare with what was decided: counts
    per decision, attention type and urgency, and the transitions that would change. No
    sends, no writes; ``capped`` says when the window held more than ``limit``."""
    return dry_run.dry_run(
        core,
        who.tenant_id,
        body.model_dump(),
        since=_instant(since, "since"),
        until=_instant(until, "until"),
        limit=limit,
    )


def _instant(text: str | None, name: str) -> datetime | None:
    """An ISO 8601 instant with its offset (a bare number or a naive time is refused)."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        value = None
    if value is None or value.tzinfo is None or not any(c in text for c in "T "):
        raise ValidationFailed(f"{name} must be an ISO 8601 time with an offset", field=name)
    return value


class RetentionChange(RootModel[dict[str, Integer | None]]):
    """``{table: days}``; ``null`` drops that table's override."""

    root: dict[str, Integer | None] = Field(max_length=50)


def _retention_view(core: Core, tenant_id: str) -> dict[str, Any]:
    return {
        "tables": {
            table: {"days": days, "source": origin}
            for table, (days, origin) in retention.periods(core, tenant_id).items()
        }
    }


@router.get("/retention", responses=problems(401, 403, 503))
def get_retention(who: Admin, core: Core) -> dict[str, Any]:
    """Each table's retention in days for this tenant, and whether it is the tenant's own
    (``tenant``) or the server's (``default``)."""
    return _retention_view(core, who.tenant_id)


@router.patch("/retention", responses=problems(401, 403, 413, 422, 503))
def patch_retention(body: RetentionChange, who: Admin, core: Core) -> dict[str, Any]:
    """Override some tables' retention (days; ``null`` drops an override). Checked whole
    before anything is stored: an unknown table or a period under its floor is a 422."""
    retention.set_override(core, who.tenant_id, body.root)
    return _retention_view(core, who.tenant_id)
