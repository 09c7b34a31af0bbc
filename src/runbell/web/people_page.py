"""The people page (admins): every member with their role and their subject grants, a form
to grant a member a subject, and a Revoke button per grant (``flows.grants``, the flow
``/v1/subject-grants`` calls).

=========================================================  =================================
``GET  /people``                                            members, their grants, the form
``POST /people/grants``                                     grant a member a subject
``POST /people/grants/{grant_id}/revoke``                   revoke a grant
=========================================================  =================================

Admins only, as the API: anyone else gets a 403 page and nothing changes. A member sees
the grants they hold, read-only, on their settings page. A refused form is shown again as
it was sent, with why; a grant that is not this tenant's (or no longer exists) is a 404.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from runbell import i18n
from runbell.api.deps import CoreDep
from runbell.domain import limits
from runbell.domain.errors import NotFound, ValidationFailed
from runbell.flows import grants
from runbell.flows.context import Core
from runbell.flows.grants import GrantBody
from runbell.i18n import N_, _, ngettext
from runbell.web import flow_words, wording
from runbell.web.forms import Checked, Session
from runbell.web.templating import render
from runbell.web.viewer import Viewer, message, viewer

router = APIRouter(include_in_schema=False)

ROLE_TEXT = i18n.Labels(wording.GRANT_ROLE_TEXT)
MEMBER_ROLE = i18n.Labels(
    {"owner": N_("Owner"), "admin": N_("Administrator"), "member": N_("Member")}
)


def people_page(
    core: Core,
    v: Viewer,
    *,
    saved: str | None = None,
    error: str | None = None,
    draft: dict[str, str] | None = None,
    status: int = 200,
) -> Response:
    shown = grants.people(core, v.who)
    ctx = v.base("people", _("People"))
    ctx.update(
        members=shown["members"],
        former=shown["former"],
        roles=[(r, ROLE_TEXT.get(r, r)) for r in shown["roles"]],
        role_text=ROLE_TEXT,
        member_role=MEMBER_ROLE,
        saved=saved,
        error=error,
        draft=draft or {"user": "", "subject_type": "", "subject_id": "", "role": "viewer"},
        limits={"type": limits.SUBJECT_TYPE, "id": limits.SUBJECT_ID},
    )
    return render("people.html.j2", ctx, status=status)


def admins_only(v: Viewer) -> Response:
    """The API's 403 for a member who is not an administrator, as a page."""
    return message(
        _("Only administrators manage people"),
        [
            _(
                "Granting members a subject is for the workspace's owners and administrators. "
                "Nothing was changed."
            ),
            _("The subjects granted to you are listed on your settings page."),
        ],
        status=403,
        link=("/settings#my-grants", _("Go to your settings")),
        v=v,
    )


@router.get("/people")
def people_view(
    session: Session, core: CoreDep, saved: str | None = None, runs: int | None = None
) -> Response:
    v = viewer(core, session)
    if not v.who.is_admin:
        return admins_only(v)
    covered = (
        ""
        if runs is None
        else " "
        + ngettext("It covers {n} run now.", "It covers {n} runs now.", runs).format(n=runs)
    )
    words = {
        "granted": _("The subject was granted.") + covered,
        "existing": _("That member already had this grant; nothing changed.") + covered,
        "revoked": _(
            "The grant was revoked: what it gave is withdrawn from every run of the subject."
        ),
    }
    return people_page(core, v, saved=words.get(saved or ""))


def _body(draft: dict[str, str]) -> GrantBody:
    """The form as ``POST /v1/subject-grants`` takes it, with the API's limits."""
    if len(draft["subject_type"]) > limits.SUBJECT_TYPE:
        raise ValidationFailed(
            f"the subject type is at most {limits.SUBJECT_TYPE} characters", field="subject"
        )
    if len(draft["subject_id"]) > limits.SUBJECT_ID:
        raise ValidationFailed(
            f"the subject id is at most {limits.SUBJECT_ID} characters", field="subject"
        )
    if len(draft["user"]) > limits.EMAIL:
        raise ValidationFailed("choose a member", field="user")
    return {
        "user": draft["user"],
        "subject": {"type": draft["subject_type"], "id": draft["subject_id"]},
        "role": draft["role"],
    }


@router.post("/people/grants")
def grant_form(signed: Checked, core: CoreDep) -> Response:
    v = viewer(core, signed.session)
    if not v.who.is_admin:
        return admins_only(v)
    draft = {
        "user": signed.form.first("user").strip(),
        "subject_type": signed.form.first("subject_type").strip(),
        "subject_id": signed.form.first("subject_id").strip(),
        "role": signed.form.first("role"),
    }
    try:
        answer = grants.grant(core, v.who, _body(draft))
    except ValidationFailed as exc:
        text = _("That grant was not made: {why}. Nothing changed.").format(
            why=flow_words.worded(exc.detail).strip().rstrip(".")
        )
        return people_page(core, v, error=text, draft=draft, status=422)
    made: dict[str, Any] = json.loads(answer.body)
    saved = "granted" if answer.status == 201 else "existing"
    return RedirectResponse(
        f"/people?saved={saved}&runs={int(made.get('runs', 0))}", status_code=303
    )


@router.post("/people/grants/{grant_id}/revoke")
def revoke_form(grant_id: str, signed: Checked, core: CoreDep) -> Response:
    v = viewer(core, signed.session)
    if not v.who.is_admin:
        return admins_only(v)
    try:
        if len(grant_id) > limits.ID:
            raise NotFound("no such grant")
        grants.revoke(core, v.who, grant_id)
    except NotFound:
        text = _("There is no such grant: it may have been revoked already. Nothing was changed.")
        return people_page(core, v, error=text, status=404)
    return RedirectResponse("/people?saved=revoked", status_code=303)
