"""Cancelling a run: ``POST /v1/runs/{run_id}/cancel`` (DESIGN §6, invariant 16)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Response

from runbell.api.deps import CoreDep, Who
from runbell.api.idempotent import IdemKey
from runbell.api.openapi import problems
from runbell.api.responses import answered
from runbell.api.schemas import RUN_ID_PATTERN, CancelIn
from runbell.flows import cancel_request

router = APIRouter(tags=["runs"])
RunId = Annotated[
    str, Path(min_length=1, pattern=RUN_ID_PATTERN, description="client-chosen run id")
]


@router.post(
    "/v1/runs/{run_id}/cancel",
    status_code=202,
    response_model=None,
    responses={
        200: {"description": "The run was stopping already; the first request stands"},
        **problems(401, 403, 404, 409, 413, 422, 503),
    },
)
def cancel_run(
    run_id: RunId,
    who: Who,
    core: CoreDep,
    key: IdemKey,
    body: Annotated[CancelIn | None, Body()] = None,
) -> Response:
    """Ask the run to stop: 202 and the run, now ``stopping`` (``cancel_requested`` says
    who asked, when and why), with a ``run.cancel_requested`` event the runtime follows.
    The runtime lets in-flight work settle and reports ``cancelled`` (or ``completed`` /
    ``failed``). By the run's owner or the people its authority names (others 403), or an
    API key of the tenant (the runtime stopping its own run). 200 when the run was
    stopping already; 409 with ``current`` when it has finished."""
    reason = body.reason if body is not None else None
    return answered(cancel_request.request_cancel(core, who, run_id, reason, key))
