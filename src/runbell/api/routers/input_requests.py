"""Input requests and their answers (DESIGN §6, invariant 9)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Response

from runbell import actions
from runbell.api.deps import Core, Runtime, User, Who
from runbell.api.schemas import RUN_ID_PATTERN, InputRequestIn, ResponseIn

router = APIRouter(tags=["input requests"])
RunId = Annotated[str, Path(pattern=RUN_ID_PATTERN, description="client-chosen run id")]
RequestId = Annotated[str, Path(max_length=200, description="the runtime's input_request_id")]


@router.post("/v1/runs/{run_id}/input-requests", status_code=201)
def open_request(
    run_id: RunId, body: InputRequestIn, who: Runtime, core: Core, response: Response
) -> dict[str, Any]:
    """Open an input request (run → input_required). 201; 200 when it is a retry."""
    opened = actions.open_request(core, who, run_id, body.model_dump(exclude_unset=False))
    if not opened["created"]:
        response.status_code = 200
    return opened


@router.get("/v1/input-requests/{request_id}")
def get_request(request_id: RequestId, who: Who, core: Core) -> dict[str, Any]:
    """The request, its run, whether it can still be answered, and whether you may."""
    return actions.get_request(core, who, request_id)


@router.post("/v1/input-requests/{request_id}/responses")
def respond(
    request_id: RequestId,
    body: ResponseIn,
    who: User,
    core: Core,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> dict[str, Any]:
    """Answer once. 409 with ``current`` when the request or run moved on."""
    return actions.respond(core, who, request_id, body.model_dump(), idempotency_key)
