"""Input requests and their answers (DESIGN §6, invariant 9)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, cast

from fastapi import APIRouter, Header, Path, Response

from runbell.api.deps import CoreDep, Runtime, User, Who
from runbell.api.idempotent import IdemKey
from runbell.api.openapi import problems, rule, rules
from runbell.api.responses import answered
from runbell.api.schemas import RUN_ID_PATTERN, InputRequestIn, ResponseIn
from runbell.flows import answers
from runbell.flows import input_requests as actions
from runbell.flows.inputs import AnswerBody, RequestBody

router = APIRouter(tags=["input requests"])
RunId = Annotated[str, Path(pattern=RUN_ID_PATTERN, description="client-chosen run id")]
RequestId = Annotated[str, Path(max_length=200, description="the runtime's input_request_id")]


@router.post(
    "/v1/runs/{run_id}/input-requests",
    status_code=201,
    response_model=None,
    responses={
        200: {"description": "A retry: this request was opened already with the same body"},
        **problems(401, 403, 404, 409, 413, 422, 503),
    },
    openapi_extra=rules(
        rule("options", "option ids are unique within the request"),
        rule("summary", "not blank: at least one character that is not whitespace"),
        rule("approvers", "each a current member who may see the run (by id or email)"),
        rule(
            "action.*",
            "command, path, url, tool, server and cwd not blank; a URL with a host that "
            "parses; arguments at most 50000 characters as JSON",
        ),
    ),
)
def open_request(
    run_id: RunId, body: InputRequestIn, who: Runtime, core: CoreDep, key: IdemKey
) -> Response:
    """Open an input request (run → input_required). 201; 200 when it is a retry."""
    fields = cast(RequestBody, body.model_dump(exclude_unset=False))  # InputRequestIn's
    return answered(actions.open_request(core, who, run_id, fields, key))


@router.get("/v1/input-requests/{request_id}", responses=problems(401, 403, 404, 422, 503))
def get_request(request_id: RequestId, who: Who, core: CoreDep) -> Mapping[str, Any]:
    """The request, its run, whether it can still be answered, and whether you may."""
    return actions.get_request(core, who, request_id)


@router.post(
    "/v1/input-requests/{request_id}/responses",
    response_model=None,
    responses=problems(401, 403, 404, 409, 413, 422, 503),
    openapi_extra=rules(
        rule("decision", "approve or reject an approval; answer a choice or a text request"),
        rule("value", "none for an approval; an option id of a choice; non-blank text"),
        rule("Idempotency-Key", "required"),
    ),
)
def respond(
    request_id: RequestId,
    body: ResponseIn,
    who: User,
    core: CoreDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="required, 1 to 200 characters, a fresh value per answer: a retry "
            "with the same key and body returns the stored 200 byte for byte; the same key "
            "with another body is a 422",
        ),
    ] = None,
) -> Response:
    """Answer once. 409 with ``current`` when the request or run moved on."""
    answer = cast(AnswerBody, body.model_dump())  # ResponseIn's fields
    return answered(answers.answer(core, who, request_id, answer, idempotency_key))
