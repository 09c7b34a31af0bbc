"""Subject grants (admin): ``/v1/subject-grants`` — a member sees (answers, amends) every
run of a subject (issue 18 item 4; ``flows.grants``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Path, Query, Response
from pydantic import Field

from runbell.api.deps import Admin, CoreDep
from runbell.api.idempotent import IdemKey
from runbell.api.openapi import problems, rule, rules
from runbell.api.responses import answered
from runbell.api.schemas import Strict
from runbell.domain import limits as L
from runbell.flows import grants
from runbell.flows.grants import GrantBody

router = APIRouter(prefix="/v1/subject-grants", tags=["people"])


class GrantSubject(Strict):
    type: str = Field(min_length=1, max_length=L.SUBJECT_TYPE)
    id: str = Field(min_length=1, max_length=L.SUBJECT_ID)


class GrantIn(Strict):
    user: str = Field(
        min_length=1, max_length=L.EMAIL, description="a user id (usr_…) or a member's email"
    )
    subject: GrantSubject = Field(description="as a run's subject names it; any version")
    role: Literal["viewer", "approver", "amender"] = Field(
        description="viewer: sees; approver: sees and answers requests; amender: sees and "
        "proposes amendments"
    )


@router.post(
    "",
    status_code=201,
    response_model=None,
    responses={
        200: {"description": "The member already had this grant; the body is that grant"},
        **problems(401, 403, 413, 422, 503),
    },
    openapi_extra=rules(rule("user", "a user id or the email of a current member")),
)
def post_grant(body: GrantIn, who: Admin, core: CoreDep, key: IdemKey) -> Response:
    """Grant a member a subject in a role: they then see (and, per role, answer or amend)
    every run of that subject, existing and future. Admins only."""
    fields = cast(GrantBody, body.model_dump())  # GrantIn's fields
    return answered(grants.grant(core, who, fields, key))


@router.get("", responses=problems(401, 403, 422, 503))
def list_grants(
    who: Admin,
    core: CoreDep,
    user: Annotated[
        str | None, Query(max_length=L.EMAIL, description="one member's (id or email)")
    ] = None,
) -> Mapping[str, Any]:
    """The tenant's subject grants, oldest first. Admins only."""
    return grants.list_grants(core, who, user)


@router.delete("/{grant_id}", responses=problems(401, 403, 404, 413, 422, 503))
def revoke_grant(
    grant_id: Annotated[str, Path(max_length=L.ID)], who: Admin, core: CoreDep
) -> Mapping[str, Any]:
    """Revoke a grant: the member loses what it gave on every run of the subject at once
    (what a run's own authority gives them stays). Admins only."""
    return grants.revoke(core, who, grant_id)
