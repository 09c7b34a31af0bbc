"""Cancelling from the run page: ``POST /runs/{run_id}/cancel`` (a form with the session's
CSRF token and a one-time Idempotency-Key, so a double click asks once).

The Cancel button is on the run page only for the run's authority while the run goes on
and nobody has asked yet (:func:`runbell.web.run_parts.cancel_view`); the flow checks again.
"""

from __future__ import annotations

import secrets
from urllib.parse import quote

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from runbell.api.deps import CoreDep
from runbell.domain.errors import Conflict, Forbidden, NotFound, ValidationFailed
from runbell.flows import cancel_request, idempotency
from runbell.flows.idempotency import IdempotencyKey
from runbell.i18n import _
from runbell.web import flow_words
from runbell.web.forms import Checked
from runbell.web.run_page import RunPageState, run_page
from runbell.web.viewer import no_access, viewer

router = APIRouter(include_in_schema=False)


@router.post("/runs/{run_id}/cancel")
def cancel_form(run_id: str, signed: Checked, core: CoreDep) -> Response:
    v = viewer(core, signed.session)
    reason = signed.form.first("reason").strip() or None
    key = signed.form.first("idempotency_key")[:200] or secrets.token_urlsafe(24)
    assert v.who.user_id is not None
    ik = IdempotencyKey(
        v.who.tenant_id,
        v.who.user_id,
        key,
        idempotency.fingerprint({"web": "cancel", "run_id": run_id, "reason": reason}),
    )
    try:
        cancel_request.request_cancel(core, v.who, run_id, reason, ik)
    except NotFound:
        return no_access(v, 404)
    except Conflict as exc:
        text = flow_words.conflict_text(exc.detail, v.tz) + " " + _("Nothing was changed.")
        return run_page(core, v, run_id, RunPageState(cancel_error=text, status=409))
    except Forbidden:
        text = _("You may not cancel this run: only its owner or the people it names can.")
        return run_page(core, v, run_id, RunPageState(cancel_error=text, status=403))
    except ValidationFailed as exc:
        text = flow_words.conflict_text(exc.detail, v.tz)
        return run_page(core, v, run_id, RunPageState(cancel_error=text, status=422))
    return RedirectResponse(f"/runs/{quote(run_id, safe='')}", status_code=303)
