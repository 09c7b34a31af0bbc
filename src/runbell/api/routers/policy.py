"""The tenant's attention policy: read it, replace the tenant's own rules."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from runbell.api.deps import Admin, Core
from runbell.api.openapi import problems
from runbell.flows import policy

router = APIRouter(prefix="/v1/policy", tags=["policy"])


class PolicyDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rules: list[dict[str, Any]] = Field(default_factory=list, max_length=200)
    replace_defaults: StrictBool = False
    quiet_hours_bypass: list[str] = Field(
        default_factory=list, description="urgencies that may be sent during quiet hours"
    )


@router.get("", responses=problems(401, 403, 503))
def get_policy(who: Admin, core: Core) -> dict[str, Any]:
    """The effective rules in order (tenant rules first), and the tenant's own document."""
    return policy.get_policy(core, who.tenant_id)


@router.put("", responses=problems(401, 403, 413, 422, 503))
def put_policy(body: PolicyDoc, who: Admin, core: Core) -> dict[str, Any]:
    """Replace the tenant's rules; they are validated whole before anything is stored."""
    return policy.set_policy(core, who.tenant_id, body.model_dump())
