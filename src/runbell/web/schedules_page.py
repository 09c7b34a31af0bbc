"""The schedules pages: scheduled work (issue 18 item 6) as a person sees and changes it.

===============================================  ============================================
``GET  /schedules``, ``POST /schedules``          the schedules this person may see; create one
``GET  /schedules/{id}``                          one schedule: its instruction and every
                                                  version, authority, firings, runs it started
``POST /schedules/{id}/instruction``              a new version of the standing instruction
``POST /schedules/{id}/{pause|resume|revoke}``    change its state (a reason is optional)
===============================================  ============================================

Each form calls the flow the API calls (``flows.schedule_create``, ``flows.schedule_edit``,
``flows.schedule_state``), validated by the API's own body models first: the flow decides
who may do what, and a refused or invalid form is shown again as it was sent, with why,
and nothing written. A schedule another tenant owns, or one this person may not see,
answers the same 404 page as a run they cannot see.
"""

from __future__ import annotations

import json
import re
import secrets
from datetime import datetime
from typing import Any, cast
from urllib.parse import quote

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError

from runbell import i18n
from runbell.api.deps import CoreDep
from runbell.api.routers.schedules import ScheduleIn, SchedulePatch, StateIn
from runbell.domain.errors import NotFound, RunbellError
from runbell.flows import idempotency, schedule_create, schedule_edit, schedule_state
from runbell.flows import schedule_views as views
from runbell.flows.context import Core
from runbell.flows.idempotency import IdempotencyKey
from runbell.flows.inputs import ScheduleBody, ScheduleEdit
from runbell.flows.schedule_views import ScheduleView, StartedRun
from runbell.i18n import N_, _
from runbell.web import flow_words, wording
from runbell.web.forms import Checked, Form, Session
from runbell.web.runs_page import ago
from runbell.web.templating import render
from runbell.web.viewer import Viewer, no_access, viewer

router = APIRouter(include_in_schema=False)

PAGE_SIZE = 50
STATE_LABEL = i18n.Labels(
    {"active": N_("Active"), "paused": N_("Paused"), "revoked": N_("Revoked")}
)
MODE_LABEL = i18n.Labels({"record_only": N_("Record only"), "webhook": N_("Webhook")})
MODE_HELP = i18n.Labels(
    {
        "record_only": N_(
            "Runbell fires nothing: your runtime starts runs itself and names this schedule."
        ),
        "webhook": N_(
            "When an occurrence is due, Runbell sends a signed request to your runtime's "
            "URL; the runtime starts the run."
        ),
    }
)
ACTIONS = {"pause": "paused", "resume": "resumed", "revoke": "revoked"}
SAVED = i18n.Labels(
    {
        "created": N_("The schedule was created."),
        "instruction": N_("The new instruction was saved as a new version."),
        "paused": N_("The schedule is paused: it starts nothing until resumed."),
        "resumed": N_("The schedule is active again, from its next occurrence."),
        "revoked": N_(
            "The schedule is revoked: it starts nothing, and runs started under it are flagged."
        ),
    }
)
#: Why a change of state was refused, per action.
NOT_CHANGED = {
    "pause": N_("The schedule was not paused:"),
    "resume": N_("The schedule was not resumed:"),
    "revoke": N_("The schedule was not revoked:"),
}
EMPTY_DRAFT = {
    "name": "",
    "instruction": "",
    "cadence": "",
    "mode": "record_only",
    "url": "",
    "owner": "",
    "authority": "",
}


def _at(v: Viewer, value: str | None) -> dict[str, str] | None:
    """An instant as the page shows it: local time, and how long ago or until."""
    if not value:
        return None
    at = datetime.fromisoformat(value)
    relative = wording.relative(at, v.now) if at > v.now else ago(at, v.now)
    return {"iso": value, "time": v.time(at), "relative": relative}


def _who(people: dict[str, str], ref: str) -> str:
    return people.get(ref, ref)


def _authority(people: dict[str, str], authority: dict[str, Any] | None) -> list[str]:
    """``["Users: a@x, b@x", "Roles: admin"]``: what the authority names, for a person."""
    out = []
    for key, label in (
        ("users", N_("Users")),
        ("roles", N_("Roles")),
        ("approvers", N_("Approvers")),
        ("amenders", N_("Amenders")),
        ("viewers", N_("Viewers")),
    ):
        named = (authority or {}).get(key) or []
        if isinstance(named, list) and named:
            out.append(f"{_(label)}: " + ", ".join(_who(people, str(n)) for n in named))
    return out


def _runs(v: Viewer, started: list[StartedRun]) -> list[dict[str, Any]]:
    return [
        {
            "run_id": r["run_id"],
            "title": r["title"] or r["run_id"],
            "state": r["state"],
            "instruction_version": r["instruction_version"],
            "at": _at(v, r["created_at"]),
        }
        for r in started
    ]


def _may_manage(v: Viewer, s: ScheduleView) -> bool:
    """Whether to offer the forms (``views.check_manager`` decides again on every post)."""
    return v.who.is_admin or v.who.user_id == s["owner"]


def _shown(v: Viewer, s: ScheduleView, people: dict[str, str]) -> dict[str, Any]:
    return {
        "id": s["id"],
        "name": s["name"] or s["id"],
        "state": s["state"],
        "state_label": STATE_LABEL.get(s["state"], s["state"]),
        "state_reason": s["state_reason"],
        "mode": s["mode"],
        "mode_label": MODE_LABEL.get(s["mode"], s["mode"]),
        "mode_help": MODE_HELP.get(s["mode"], ""),
        "url": s["url"],
        "cadence": s["cadence"],
        "next": _at(v, s["next_fire_at"]),
        "owner": _who(people, s["owner"]),
        "mine": v.who.user_id == s["owner"],
        "instruction": s["instruction"],
        "authority": _authority(people, s["authority"]),
        "authority_version": s["authority_version"],
        "created": _at(v, s["created_at"]),
        "updated": _at(v, s["updated_at"]),
        "revoked": _at(v, s["revoked_at"]),
        "may_manage": _may_manage(v, s) and s["state"] != "revoked",
    }


def _error_text(exc: RunbellError | ValidationError) -> str:
    if isinstance(exc, RunbellError):
        return flow_words.conflict_text(exc.detail)
    errors = exc.errors()
    if not errors:
        return _("The form is not valid.")
    where = ".".join(str(p) for p in errors[0]["loc"])
    what = errors[0]["msg"]
    return flow_words.conflict_text(f"{where}: {what}" if where else what)


def _status(exc: RunbellError | ValidationError) -> int:
    return exc.status if isinstance(exc, RunbellError) else 422


# --- the list, and creating one ------------------------------------------------------


def schedules_view(
    core: Core,
    v: Viewer,
    *,
    after: str | None = None,
    saved: str | None = None,
    error: str | None = None,
    draft: dict[str, str] | None = None,
    status: int = 200,
) -> Response:
    shown = views.schedules_page(core, v.who, after=after, limit=PAGE_SIZE)
    people = shown["people"]
    rows = [
        {**_shown(v, s, people), "runs": _runs(v, shown["runs"].get(s["id"], []))}
        for s in shown["schedules"]
    ]
    ctx = v.base("schedules", _("Schedules"))
    ctx.update(
        schedules=rows,
        next_cursor=shown["next_cursor"],
        paged=after is not None,
        saved=saved,
        error=error,
        draft=draft or {**EMPTY_DRAFT},
        is_admin=v.who.is_admin,
        me=v.email,
        idempotency_key=secrets.token_urlsafe(24),
        mode_label=MODE_LABEL,
        mode_help=MODE_HELP,
    )
    return render("schedules.html.j2", ctx, status=status)


@router.get("/schedules")
def schedules_list(session: Session, core: CoreDep, after: str | None = None) -> Response:
    return schedules_view(core, viewer(core, session), after=after)


def _people(text: str) -> list[str]:
    """Emails or user ids, one per line or separated by commas or spaces."""
    return [p for p in re.split(r"[\s,;]+", text.strip()) if p]


def _draft(form: Form) -> dict[str, str]:
    return {key: form.first(key) for key in EMPTY_DRAFT}


@router.post("/schedules")
def schedules_create(signed: Checked, core: CoreDep) -> Response:
    v = viewer(core, signed.session)
    draft = _draft(signed.form)
    fields: dict[str, Any] = {
        "instruction": draft["instruction"],
        "cadence": draft["cadence"].strip(),
        "mode": draft["mode"] or "record_only",
    }
    for key in ("name", "url", "owner"):
        if draft[key].strip():
            fields[key] = draft[key].strip()
    users = _people(draft["authority"])
    if users:
        fields["authority"] = {"users": users}
    key = signed.form.first("idempotency_key")[:200] or secrets.token_urlsafe(24)
    assert v.who.user_id is not None
    ik = IdempotencyKey(
        v.who.tenant_id,
        v.who.user_id,
        key,
        idempotency.fingerprint({"web": "schedule.create", **fields}),
    )
    try:
        body = ScheduleIn.model_validate(fields)
        checked = cast(ScheduleBody, body.model_dump(exclude_unset=True, mode="json"))
        answer = schedule_create.create_schedule(core, v.who, checked, ik)
    except (RunbellError, ValidationError) as exc:
        text = " ".join(
            (_("The schedule was not created:"), _error_text(exc), _("Nothing was saved."))
        )
        return schedules_view(core, v, error=text, draft=draft, status=_status(exc))
    made = json.loads(answer.body)
    if made.get("secret"):
        # Shown once: on this answer (and on a replay of it), never again.
        return schedule_view(
            core, v, made["id"], saved=SAVED["created"], secret=made["secret"], status=201
        )
    return RedirectResponse(f"/schedules/{quote(made['id'], safe='')}?saved=created", 303)


# --- one schedule ----------------------------------------------------------------------


def schedule_view(
    core: Core,
    v: Viewer,
    schedule_id: str,
    *,
    saved: str | None = None,
    error: str | None = None,
    error_form: str | None = None,
    draft: dict[str, str] | None = None,
    secret: str | None = None,
    status: int = 200,
) -> Response:
    try:
        shown = views.schedule_page(core, v.who, schedule_id)
    except NotFound:
        return no_access(v, 404)
    s, people = shown["schedule"], shown["people"]
    ctx = v.base("schedules", s["name"] or s["id"])
    ctx.update(
        schedule=_shown(v, s, people),
        versions=[
            {
                "version": i["version"],
                "text": i["text"],
                "by": _who(people, (i["created_by"] or {}).get("user_id", "")) or "an API key",
                "at": _at(v, i["created_at"]),
                "current": i["version"] == s["instruction"]["version"],
            }
            for i in s.get("versions", [])
        ],
        firings=[
            {**f, "due": _at(v, f["due_at"]), "settled": _at(v, f["settled_at"])}
            for f in s.get("firings", [])
        ],
        runs=_runs(v, shown["runs"]),
        saved=saved,
        error=error,
        error_form=error_form,
        draft={"instruction": s["instruction"]["text"], "reason": "", **(draft or {})},
        secret=secret,
    )
    return render("schedule.html.j2", ctx, status=status)


@router.get("/schedules/{schedule_id}")
def schedule_detail(
    schedule_id: str, session: Session, core: CoreDep, saved: str | None = None
) -> Response:
    v = viewer(core, session)
    return schedule_view(core, v, schedule_id, saved=SAVED.get(saved or ""))


@router.post("/schedules/{schedule_id}/instruction")
def schedule_instruction(schedule_id: str, signed: Checked, core: CoreDep) -> Response:
    v = viewer(core, signed.session)
    text = signed.form.first("instruction")
    try:
        body = SchedulePatch.model_validate({"instruction": text})
        changes = cast(ScheduleEdit, body.model_dump(exclude_unset=True, mode="json"))
        schedule_edit.edit_schedule(core, v.who, schedule_id, changes)
    except NotFound:
        return no_access(v, 404)
    except (RunbellError, ValidationError) as exc:
        return schedule_view(
            core,
            v,
            schedule_id,
            error=" ".join(
                (_("The instruction was not changed:"), _error_text(exc), _("Nothing was saved."))
            ),
            error_form="instruction",
            draft={"instruction": text},
            status=_status(exc),
        )
    return RedirectResponse(f"/schedules/{quote(schedule_id, safe='')}?saved=instruction", 303)


def _state_route(action: str) -> None:
    def change(schedule_id: str, signed: Checked, core: CoreDep) -> Response:
        v = viewer(core, signed.session)
        reason = signed.form.first("reason").strip() or None
        try:
            body = StateIn.model_validate({"reason": reason})
            schedule_state.change_state(core, v.who, schedule_id, action, body.reason)
        except NotFound:
            return no_access(v, 404)
        except (RunbellError, ValidationError) as exc:
            return schedule_view(
                core,
                v,
                schedule_id,
                error=" ".join(
                    (_(NOT_CHANGED[action]), _error_text(exc), _("Nothing was changed."))
                ),
                error_form="state",
                draft={"reason": reason or ""},
                status=_status(exc),
            )
        done = ACTIONS[action]
        return RedirectResponse(f"/schedules/{quote(schedule_id, safe='')}?saved={done}", 303)

    router.post(f"/schedules/{{schedule_id}}/{action}", name=f"schedule_{action}_form")(change)


for _action in ACTIONS:
    _state_route(_action)
