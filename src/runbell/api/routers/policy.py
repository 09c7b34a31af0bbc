"""The tenant's attention policy (read it, replace the tenant's own rules) and its
retention periods (read them, override some)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, RootModel, StrictBool, StrictInt

from runbell.api.deps import Admin, Core
from runbell.api.openapi import problems
from runbell.flows import policy, retention

router = APIRouter(prefix="/v1/policy", tags=["policy"])


class PolicyDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rules: list[dict[str, Any]] = Field(default_factory=list, max_length=200)
    replace_defaults: StrictBool = False
    quiet_hours_bypass: list[str] = Field(
        default_factory=list, description="urgencies that may be sent during quiet hours"
    )
    stall_after_seconds: StrictInt | None = Field(
        default=None,
        ge=0,
        le=30 * 86_400,
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


class RetentionChange(RootModel[dict[str, StrictInt | None]]):
    """``{table: days}``; ``null`` drops that table's override."""

    root: dict[str, StrictInt | None] = Field(max_length=50)


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
