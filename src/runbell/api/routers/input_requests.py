"""Input requests and their answers (DESIGN §6, invariant 9)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, cast

from fastapi import APIRouter, Header, Path, Response

from runbell.api.deps import CoreDep, Runtime, Who
from runbell.api.idempotent import IdemKey
from runbell.api.openapi import problems, rule, rules
from runbell.api.responses import answered
from runbell.api.schemas import (
    RUN_ID_PATTERN,
    CallbackAnswerIn,
    CallbackIn,
    InputRequestIn,
    ResponseIn,
)
from runbell.flows import answers, callbacks, machine_answers
from runbell.flows import input_requests as actions
from runbell.flows.inputs import AnswerBody, CallbackAnswerBody, CallbackBody, RequestBody

router = APIRouter(tags=["input requests"])
RunId = Annotated[
    str, Path(min_length=1, pattern=RUN_ID_PATTERN, description="client-chosen run id")
]
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
        rule(
            "editable*",
            "approvals only; the schema within the supported JSON Schema subset and the "
            "value valid against it (docs/api.md 24.1); the field names the part",
        ),
        rule("callback*", "decisions the request's kind takes (approve/reject, or answer)"),
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
        rule("value*", "approving a request with an editable value: fits its schema"),
        rule("caller", "a person, or a runtime key whose scope names input_requests.answer"),
    ),
)
def respond(
    request_id: RequestId,
    body: ResponseIn,
    who: Who,
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
    """Answer once. 409 with ``current`` when the request or run moved on. A person, or a
    runtime key whose scope names ``input_requests.answer`` (recorded as the machine)."""
    answer = cast(AnswerBody, body.model_dump())  # ResponseIn's fields
    return answered(answers.answer(core, who, request_id, answer, idempotency_key))


@router.post(
    "/v1/input-requests/{request_id}/callback-urls",
    status_code=201,
    responses=problems(401, 403, 404, 409, 413, 422, 503),
    openapi_extra=rules(
        rule("body.decisions", "decisions the request's kind takes (approve/reject, or answer)")
    ),
)
def mint_callback(
    request_id: RequestId, body: CallbackIn, who: Runtime, core: CoreDep
) -> Mapping[str, Any]:
    """A single-use callback URL that answers this pending request with one POST and no
    API key; ``url`` is shown this once."""
    return dict(machine_answers.mint(core, who, request_id, cast(CallbackBody, body.model_dump())))


@router.post(
    "/v1/callbacks/{token}",
    response_model=None,
    responses=problems(403, 404, 409, 410, 413, 422, 503),
    openapi_extra=rules(
        rule("decision", "one the request's kind takes"),
        rule(
            "value*",
            "none for an approval unless it is editable (then it fits its schema); "
            "an option id of a choice; non-blank text",
        ),
    ),
)
def use_callback(
    token: Annotated[str, Path(max_length=200, description="the token of a callback URL")],
    body: CallbackAnswerIn,
    core: CoreDep,
) -> Response:
    """Answer the callback URL's request, once, without an API key (the URL is the
    credential). 410 when it was used or has expired."""
    return answered(callbacks.answer(core, token, cast(CallbackAnswerBody, body.model_dump())))
