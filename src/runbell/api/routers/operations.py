"""The operations ledger and worker fencing (DESIGN §6, invariant 15)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, cast

from fastapi import APIRouter, Path, Response

from runbell.api.deps import CoreDep, Runtime, Who
from runbell.api.idempotent import IdemKey
from runbell.api.openapi import problems, rule, rules
from runbell.api.responses import answered
from runbell.api.schemas import (
    RUN_ID_PATTERN,
    ClaimIn,
    FindingIn,
    OperationMove,
    OperationsIn,
    SupersedeIn,
)
from runbell.flows import findings, operations, ownership
from runbell.flows.inputs import DeclareBody, FindingBody, MoveBody, OperationBody

router = APIRouter(prefix="/v1/runs", tags=["operations"])
RunId = Annotated[
    str, Path(min_length=1, pattern=RUN_ID_PATTERN, description="client-chosen run id")
]
OperationId = Annotated[str, Path(max_length=200, description="the runtime's operation_id")]


@router.post(
    "/{run_id}/operations",
    status_code=201,
    response_model=None,
    responses={
        200: {"description": "Every operation was declared already with the same body"},
        **problems(401, 403, 404, 409, 413, 422, 503),
    },
    openapi_extra=rules(
        rule("intent", "not blank once control characters are removed"),
        rule("operations.*.intent", "not blank once control characters are removed"),
        rule("operations", "each operation_id at most once in one request"),
    ),
)
def declare(
    run_id: RunId, body: OperationsIn, who: Runtime, core: CoreDep, key: IdemKey
) -> Response:
    """Declare one or many intended effects (``planned``). 201; 200 when every one was
    already declared with the same body; 409 for another body under a known id, for new
    work on a target an uncertain operation may already have changed, or a superseded
    worker's epoch."""
    doc = cast(DeclareBody, body.model_dump(exclude_none=True))  # OperationsIn's fields
    if body.operations is not None:
        batch = [cast(OperationBody, op.model_dump()) for op in body.operations]
        doc = {"operations": batch, "epoch": body.epoch}
    return answered(operations.declare(core, who, run_id, doc, key))


@router.get("/{run_id}/operations", responses=problems(401, 403, 404, 422, 503))
def list_operations(run_id: RunId, who: Who, core: CoreDep) -> Mapping[str, Any]:
    """The run's ledger in declaration order, with its counts and evidence."""
    return operations.list_operations(core, who, run_id)


@router.patch(
    "/{run_id}/operations/{operation_id}",
    responses=problems(401, 403, 404, 409, 413, 422, 503),
)
def move(
    run_id: RunId, operation_id: OperationId, body: OperationMove, who: Runtime, core: CoreDep
) -> Mapping[str, Any]:
    """Move an operation with evidence. 409 with the operation as it is for an illegal
    move, or for a superseded worker's epoch; 403 (``rule: completion_owner``) for a move
    to a final state by anyone but the run's completion owner or an admin."""
    moved = cast(MoveBody, body.model_dump(exclude_none=True))  # OperationMove's fields
    return operations.move(core, who, run_id, operation_id, moved)


@router.post(
    "/{run_id}/claim",
    response_model=None,
    responses=problems(401, 403, 404, 409, 413, 422, 503),
)
def claim(run_id: RunId, body: ClaimIn, who: Runtime, core: CoreDep, key: IdemKey) -> Response:
    """Claim the run for a worker: ``{epoch, owner, takeover}`` (a new worker id, or
    another credential, takes the run over: the next epoch and the completion ownership,
    recorded in the run's history; the same worker the same epoch). Updates with an older
    epoch are refused."""
    return answered(ownership.claim(core, who, run_id, body.worker_id, key, body.reason))


@router.post(
    "/{run_id}/operations/{operation_id}/supersede",
    responses=problems(401, 403, 404, 409, 413, 422, 503),
    openapi_extra=rules(rule("reason", "not blank once control characters are removed")),
)
def supersede(
    run_id: RunId, operation_id: OperationId, body: SupersedeIn, who: Runtime, core: CoreDep
) -> Mapping[str, Any]:
    """The completion owner lets new work through on the target of an operation still
    sent, uncertain or unresolved, with a stated reason; the operation keeps its state.
    403 (``rule: completion_owner``) for anyone else; 409 when it blocks nothing."""
    return ownership.supersede(core, who, run_id, operation_id, body.reason, body.worker_id)


@router.post(
    "/{run_id}/operations/{operation_id}/findings",
    status_code=201,
    responses=problems(401, 403, 404, 409, 413, 422, 503),
)
def report_finding(
    run_id: RunId, operation_id: OperationId, body: FindingIn, who: Who, core: CoreDep
) -> Mapping[str, Any]:
    """Report what you found about an operation (a conflict, a receipt, a lookup): kept on
    the ledger as a report naming you, never a state change. Anyone who may see the run."""
    found = cast(FindingBody, body.model_dump(exclude_none=True))  # FindingIn's fields
    return findings.report(core, who, run_id, operation_id, found)
