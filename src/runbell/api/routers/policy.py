"""The tenant's attention policy: read it, replace the tenant's own rules."""

from __future__ import annotations

import dataclasses
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from runbell.api.deps import Admin, Core
from runbell.api.openapi import problems
from runbell.store import tables as t

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
    with core.db.read() as conn:
        policy = core.policy_for(conn, who.tenant_id)
        own = conn.execute(
            sa.select(t.tenants.c.policy).where(t.tenants.c.id == who.tenant_id)
        ).scalar()
    return {
        "quiet_hours_bypass": sorted(policy.quiet_bypass),
        "tenant_rules": own or {"rules": []},
        "effective": [dataclasses.asdict(r) for r in policy.rules],
    }


@router.put("", responses=problems(401, 403, 413, 422, 503))
def put_policy(body: PolicyDoc, who: Admin, core: Core) -> dict[str, Any]:
    """Replace the tenant's rules; they are validated whole before anything is stored."""
    policy = core.set_policy(who.tenant_id, body.model_dump())
    return {
        "quiet_hours_bypass": sorted(policy.quiet_bypass),
        "tenant_rules": body.model_dump(),
        "effective": [dataclasses.asdict(r) for r in policy.rules],
    }
