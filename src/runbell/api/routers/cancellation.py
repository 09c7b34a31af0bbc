"""Cancelling a run: ``POST /v1/runs/{run_id}/cancel`` (DESIGN §6, invariant 16)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Response
from pydantic import Field

from runbell.api.deps import Core, Who
from runbell.api.idempotent import IdemKey
from runbell.api.openapi import problems
from runbell.api.responses import answered
from runbell.api.schemas import RUN_ID_PATTERN, Strict
from runbell.domain import limits as L
from runbell.flows import cancel

router = APIRouter(tags=["runs"])
RunId = Annotated[str, Path(pattern=RUN_ID_PATTERN, description="client-chosen run id")]


class CancelIn(Strict):
    reason: str | None = Field(
        default=None,
        max_length=L.REASON,
        description="PUBLIC: why, shown on the run and sent to the runtime, the feed and "
        "tenant webhooks (kept as one safe line of at most 200 characters)",
    )


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
    core: Core,
    key: IdemKey,
    body: Annotated[CancelIn | None, Body()] = None,
) -> Response:
    """Ask the run to stop: 202 and the run, now ``stopping`` (``cancel_requested`` says
    who asked, when and why), with a ``run.cancel_requested`` event the runtime follows.
    The runtime lets in-flight work settle and reports ``cancelled`` (or ``completed`` /
    ``failed``). By the run's owner or the people its authority names (others 403), or an
    API key of the tenant (the runtime stopping its own run). 200 when the run was
    stopping already; 409 with ``current`` when it has finished."""
    fields = body.model_dump(exclude_unset=True) if body is not None else {}
    return answered(cancel.request_cancel(core, who, run_id, fields, key))
