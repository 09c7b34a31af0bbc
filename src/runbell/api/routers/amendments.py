"""Amendments: ``POST /v1/runs/{run_id}/amendments`` (DESIGN §6). The owner answers through
``POST /v1/input-requests/{id}/responses``, like any other input request."""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import APIRouter, Path, Response
from pydantic import Field

from runbell.api.deps import CoreDep, Who
from runbell.api.idempotent import IdemKey
from runbell.api.openapi import problems, rule, rules
from runbell.api.responses import answered
from runbell.api.schemas import RUN_ID_PATTERN, DoneWhenIn, Strict
from runbell.domain import limits as L
from runbell.flows import amendments
from runbell.flows.inputs import ProposalBody

router = APIRouter(tags=["runs"])
RunId = Annotated[
    str, Path(min_length=1, pattern=RUN_ID_PATTERN, description="client-chosen run id")
]


class AmendmentChanges(Strict):
    objective: str | None = Field(default=None, min_length=1, max_length=L.OBJECTIVE)
    title: str | None = Field(default=None, min_length=1, max_length=L.TITLE)
    done_when: DoneWhenIn | None = Field(
        default=None, description="what counts as done: {text, operations?}"
    )
    exclude_operations: (
        list[Annotated[str, Field(min_length=1, max_length=L.TARGET_TYPE + L.TARGET_ID + 1)]] | None
    ) = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="operation ids or targets (type:id) of the run's ledger, still planned: "
        "approved, they become not_started with the amendment as evidence",
    )


class AmendmentIn(Strict):
    text: str = Field(
        min_length=1,
        max_length=L.AMENDMENT_TEXT,
        description="what to change, and why",
    )
    changes: AmendmentChanges | None = Field(
        default=None, description="the run fields to set when the owner approves"
    )


@router.post(
    "/v1/runs/{run_id}/amendments",
    status_code=201,
    response_model=None,
    responses=problems(401, 403, 404, 409, 413, 422, 503),
    openapi_extra=rules(
        rule("text", "not blank: at least one character that is not whitespace"),
        rule("changes.title", "not blank"),
        rule("changes.objective", "not blank"),
        rule("changes.done_when.*", "text not blank; operation ids not blank, none twice"),
        rule("changes", "must differ from the run as it is now"),
        rule(
            "changes.exclude_operations",
            "each an operation id or a target (type:id) of the run's ledger, still planned",
        ),
    ),
)
def propose_amendment(
    run_id: RunId, body: AmendmentIn, who: Who, core: CoreDep, key: IdemKey
) -> Response:
    """Propose a change to a run you may amend (its owner, an admin, or one its authority
    or a subject grant names as amender; 403 for one who may only see it): it becomes an
    input request to the run's owner (``input_request.id`` = ``amendment.id``), who
    approves or rejects it with
    ``POST /v1/input-requests/{id}/responses`` and ``expected_run_version`` =
    ``input_request.run_version``. Nothing changes until the owner approves; the run is
    not blocked meanwhile. People only (an API key gets 403)."""
    fields = cast(ProposalBody, body.model_dump(exclude_none=True))  # AmendmentIn's
    return answered(amendments.propose(core, who, run_id, fields, key))
