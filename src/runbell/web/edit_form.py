"""Approving an edited value from the run page:
``POST /runs/{run_id}/input-requests/{request_id}/edit`` (issue 19 item 3).

The form (``_edit_form.html.j2``, fields from :mod:`runbell.web.edit_view`) carries the
session's CSRF token, the run and request versions the page showed and a one-time
Idempotency-Key, like the Approve button. The answer is the same flow
(:func:`runbell.flows.answers.answer`) with the edited value: checked against the
request's schema there, bound to the versions, once. A refused edit (not JSON, outside
the schema) is shown again as typed, with the reason; never a 500.
"""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from runbell.api.deps import CoreDep
from runbell.domain.errors import Conflict, Forbidden, NotFound, ValidationFailed
from runbell.flows import answers
from runbell.flows import input_requests as requests
from runbell.flows.inputs import AnswerBody
from runbell.i18n import _
from runbell.web import flow_words
from runbell.web.edit_view import edited_value
from runbell.web.forms import Checked
from runbell.web.run_page import RunPageState, refusal_text, run_page
from runbell.web.viewer import no_access, viewer

router = APIRouter(include_in_schema=False)


@router.post("/runs/{run_id}/input-requests/{request_id}/edit")
def approve_edited(run_id: str, request_id: str, signed: Checked, core: CoreDep) -> Response:
    who, form = signed.session.principal, signed.form
    typed = form.first("value")
    v = viewer(core, signed.session)  # first: what this answers is in the person's language

    def again(**kw: Any) -> Response:
        state = RunPageState(edit_text=typed, **kw)
        return run_page(core, v, run_id, state)

    try:
        shown = requests.get_request(core, who, request_id)
    except NotFound:
        return no_access(v, 404)
    if shown["run"]["run_id"] != run_id:
        return no_access(v, 404)
    try:
        value = edited_value(shown["input_request"].get("editable"), typed)
        body: AnswerBody = {
            "decision": "approve",
            "value": value,
            "expected_run_version": int(form.first("expected_run_version")),
            "expected_request_version": int(form.first("expected_request_version")),
        }
    except ValueError as exc:
        return again(edit_error=str(exc), status=422)
    key = form.first("idempotency_key")[:200] or secrets.token_urlsafe(24)
    try:
        answers.answer(core, who, request_id, body, key, run_id=run_id)
    except Conflict as exc:
        return again(conflict=refusal_text(v, exc), status=409)
    except Forbidden as exc:
        return again(
            conflict=" ".join(
                (_("You may not answer this request:"), flow_words.conflict_text(exc.detail, v.tz))
            ),
            status=403,
        )
    except NotFound:
        return no_access(v, 404)
    except ValidationFailed as exc:
        text = flow_words.conflict_text(exc.detail, v.tz) + " " + _("Nothing was approved.")
        return again(edit_error=text, status=422)
    return RedirectResponse(
        f"/runs/{quote(run_id, safe='')}?answered={quote(request_id, safe='')}",
        status_code=303,
    )
