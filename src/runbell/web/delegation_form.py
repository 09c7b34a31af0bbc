"""Revoking a delegated token from the run page: ``POST
/runs/{run_id}/delegations/{delegation_id}/revoke`` (a form with the session's CSRF
token), through ``flows.delegations.revoke``, the flow ``DELETE /v1/delegations/{id}``
calls. Its next request answers 401.

The Revoke button is on the run page only for those the flow lets revoke (an admin;
:func:`runbell.web.run_parts.delegations_view`); the flow checks again. A token that is
not this tenant's, or of a run this person may not see, is the "no access" page (404).
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from runbell.api.deps import CoreDep
from runbell.domain import limits
from runbell.domain.errors import Forbidden, NotFound
from runbell.flows import delegations
from runbell.i18n import _
from runbell.web import flow_words
from runbell.web.forms import Checked
from runbell.web.run_page import RunPageState, run_page
from runbell.web.viewer import no_access, viewer

router = APIRouter(include_in_schema=False)


@router.post("/runs/{run_id}/delegations/{delegation_id}/revoke")
def revoke_delegation_form(
    run_id: str, delegation_id: str, signed: Checked, core: CoreDep
) -> Response:
    v = viewer(core, signed.session)
    if len(delegation_id) > limits.ID:
        return no_access(v, 404)
    try:
        revoked = delegations.revoke(core, v.who, delegation_id)
    except NotFound:
        return no_access(v, 404)
    except Forbidden as exc:
        text = (
            _("You may not revoke this token:")
            + " "
            + flow_words.conflict_text(exc.detail, v.tz)
            + " "
            + _("Nothing was changed.")
        )
        return run_page(core, v, run_id, RunPageState(delegation_error=text, status=403))
    return RedirectResponse(
        f"/runs/{quote(revoked['run_id'], safe='')}#delegations", status_code=303
    )
