"""Proposing a change from the run page: ``POST /runs/{run_id}/amendments`` (a form with
the session's CSRF token and a one-time Idempotency-Key). The owner's Approve / Reject
buttons post to the run page's answer route, like any other input request."""

from __future__ import annotations

import secrets
from urllib.parse import quote

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from runbell.api.deps import CoreDep
from runbell.domain.errors import Conflict, Forbidden, NotFound, ValidationFailed
from runbell.flows import amendments, idempotency
from runbell.flows.idempotency import IdempotencyKey
from runbell.flows.inputs import DoneWhenBody, ProposalBody
from runbell.i18n import _
from runbell.web import flow_words
from runbell.web.forms import Checked
from runbell.web.run_page import RunPageState, run_page
from runbell.web.viewer import no_access, viewer

router = APIRouter(include_in_schema=False)


@router.post("/runs/{run_id}/amendments")
def propose_form(run_id: str, signed: Checked, core: CoreDep) -> Response:
    v = viewer(core, signed.session)
    body: ProposalBody = {"text": signed.form.first("text")}
    objective = signed.form.first("objective").strip()
    changes: dict[str, str | DoneWhenBody | list[str]] = {}
    if objective:
        changes["objective"] = objective
    done_when = signed.form.first("done_when").strip()
    if done_when:  # new words; the operations it needs stay those the page showed
        needs = signed.form.all("done_when_operation")
        changes["done_when"] = {"text": done_when, "operations": list(needs)}
    # Operations to leave out: ids or targets (type:id), separated by commas or lines.
    excluded = [
        part.strip()
        for part in signed.form.first("exclude_operations").replace("\n", ",").split(",")
        if part.strip()
    ]
    if excluded:
        changes["exclude_operations"] = excluded
    if changes:
        body["changes"] = changes
    key = signed.form.first("idempotency_key")[:200] or secrets.token_urlsafe(24)
    assert v.who.user_id is not None
    ik = IdempotencyKey(
        v.who.tenant_id,
        v.who.user_id,
        key,
        idempotency.fingerprint({"web": "amend", "run_id": run_id, **body}),
    )
    try:
        amendments.propose(core, v.who, run_id, body, ik)
    except NotFound:
        return no_access(v, 404)
    except (Conflict, Forbidden, ValidationFailed) as exc:
        text = flow_words.conflict_text(exc.detail, v.tz) + " " + _("Nothing was sent.")
        return run_page(core, v, run_id, RunPageState(amend_error=text, status=exc.status))
    return RedirectResponse(f"/runs/{quote(run_id, safe='')}#amendments", status_code=303)
