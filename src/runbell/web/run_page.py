"""A run page: the run as it is now, its pending request (answerable here, without
JavaScript), its history and this person's notifications about it; deep links; answers.

=========================================================  =================================
``GET  /n/{id}``                                            deep link: the run, in context
``GET  /runs/{run_id}``                                     the run page
``POST /runs/{run_id}/input-requests/{request_id}/respond``  answer a request
=========================================================  =================================

A deep link ``/n/{id}`` is a pointer, never a grant: it re-checks who you are and what you
may see, then shows the run as it is now, with why its notification can no longer be acted
on when it cannot. Opening records an ``opened`` receipt, never a decision.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from runbell.api.deps import CoreDep
from runbell.domain.errors import Conflict, Forbidden, NotFound, RunbellError, ValidationFailed
from runbell.domain.principal import Principal
from runbell.flows import answers, delegations, inbox, neutral_words, pages, receipts, views
from runbell.flows.context import Core
from runbell.flows.inbox import NotificationDetail
from runbell.flows.inputs import AnswerBody
from runbell.flows.runs import RunSnapshot
from runbell.i18n import N_, _
from runbell.web import flow_words, trace, wording
from runbell.web import run_parts as parts
from runbell.web.edit_view import approved_text, edit_view
from runbell.web.forms import Checked, Session
from runbell.web.ledger import ledger_view
from runbell.web.templating import render
from runbell.web.viewer import Viewer, no_access, viewer

log = structlog.get_logger(__name__)

router = APIRouter(include_in_schema=False)


@dataclass
class RunPageState:
    """What a run page shows around the run itself: the notification it was opened from,
    a banner, an answer just recorded, a refused answer, a form error."""

    highlight: dict[str, Any] | None = None
    banner: list[str] = field(default_factory=list)
    answered_request: str | None = None
    conflict: str | None = None
    form_error: str | None = None
    cancel_error: str | None = None
    amend_error: str | None = None
    delegation_error: str | None = None
    edit_text: str | None = None  # an edited value refused: as typed (web.edit_form)
    edit_error: str | None = None
    status: int = 200


def run_page(core: Core, v: Viewer, run_id: str, state: RunPageState) -> Response:
    try:
        shown = pages.run_page(core, v.who, run_id, state.answered_request)
    except NotFound:
        return no_access(v, 404)
    snapshot, run, pending = shown["snapshot"], shown["run"], shown["pending_request"]
    answered = shown["answered_request"]
    request_view = parts.request_view(v, pending) if pending else None
    report = run.report or {}
    links = [
        {
            "label": str(link.get("label") or link.get("url")),
            "url": parts.safe_link(link.get("url")),
        }
        for link in (report.get("links") or [])
        if isinstance(link, dict)
    ]
    highlight = state.highlight
    ctx = v.base("run", run.title or run_id)
    ctx.update(
        run={
            "run_id": run_id,
            "title": run.title or run_id,
            "objective": run.objective,
            "kind": run.kind,
            "owner": shown["owner_email"],
            "state": run.state,
            "terminal": snapshot["terminal"],
            "version": run.version,
            "subject": run.subject,
            "details": parts.details_text(snapshot.get("details")),
            "progress": None if snapshot["terminal"] else parts.progress_view(v, run.progress),
            "error": run.error,
            "report": report,
            "links": links,
            "created": v.time(run.created_at),
            "updated": v.time(run.updated_at),
            "finished": v.time(run.finished_at),
            # An open stall episode (flows.stalls): silent since then.
            "stalled": v.time(run.stalled_at) if run.stalled_at else None,
        },
        request=request_view,
        # The editable value, when the request offers one (issue 19 item 3).
        edit=edit_view(pending, state.edit_text, state.edit_error) if pending else None,
        badge=_badge(snapshot),
        badge_settled=snapshot["badge"]["key"].startswith("state-"),
        review_decided=parts.decided_view(v, shown["decided_review"]),
        job=parts.job_view(snapshot),
        schedule=snapshot.get("schedule"),  # started under a schedule (issue 18 item 6)
        ledger=ledger_view(
            snapshot, shown["operations"], v, {**shown["people"], **shown["credentials"]}
        ),
        may_answer=shown["answer_refusal"] is None,
        answer_refusal=_(shown["answer_refusal"]) if shown["answer_refusal"] else None,
        cancel=parts.cancel_view(v, run, snapshot, shown, state.cancel_error),
        amendments=[
            {
                "id": a.id,
                "by": _("you") if a.proposed_by == v.who.user_id else a.proposed_by_email,
                "at": v.time(a.created_at),
                "text": a.text,
                "changes": [
                    {
                        "field": name,
                        "now": parts.shown((a.base or {}).get(name)),
                        "to": parts.shown(value),
                    }
                    for name, value in sorted((a.changes or {}).items())
                ],
                "run_version": a.run_version,
                "key": secrets.token_urlsafe(24),
            }
            for a in shown["pending_amendments"]
        ],
        may_decide_amendments=run.owner_user_id == v.who.user_id,
        may_propose=not snapshot["terminal"] and shown["amend_refusal"] is None,
        amend_refusal=(
            _(shown["amend_refusal"])
            if shown["amend_refusal"] and not snapshot["terminal"]
            else None
        ),
        amend_error=state.amend_error,
        delegations=parts.delegations_view(v, _delegations(core, v.who, run_id)),
        delegation_error=state.delegation_error,
        idempotency_key=secrets.token_urlsafe(24),
        timeline=trace.timeline(
            v, shown["trace"], shown["asked"], shown["people"], shown["credentials"]
        ),
        completion_owner={
            "text": trace.owner_text(
                snapshot["completion_owner"], shown["people"], v.who.user_id, shown["credentials"]
            ),
            "previous_may_still_act": bool(snapshot["completion_owner"]["previous_may_still_act"]),
        },
        notes=[
            {
                "id": n["id"],
                "summary": neutral_words.summary(n),
                "attention": n["attention_type"],
                "urgency": n["urgency"],
                "state": n["state"],
                "closed_reason": (
                    views.name_people(
                        n.get("closed_reason"), {**shown["people"], v.who.user_id or "": "you"}
                    )
                    if n["state"] != "open"
                    else None
                ),
                "created": v.time(n["created_at"]),
                "created_iso": views.iso(n["created_at"]),
                "highlight": highlight is not None and highlight["id"] == n["id"],
                "deliveries": parts.deliveries_view(v, n["deliveries"], shown["endpoints"]),
            }
            for n in shown["my_notifications"]
        ],
        highlight=highlight,
        banner=state.banner,
        answered=(
            {
                "decision": answered.decision,
                "value": parts.option_label(answered, answered.value),
                "summary": answered.summary,
                "at": v.time(answered.answered_at),
                "edited": approved_text(answered),  # what will run, when the person fixed it
            }
            if answered
            else None
        ),
        conflict=state.conflict,
        form_error=state.form_error,
        body_data={
            "cursor": str(shown["head_cursor"]),
            "run-id": run_id,
            "run-version": str(run.version),
            "run-state": run.state,
            # What the live notice says when the state did not change (app.js).
            "last-change": parts.last_change(shown["transitions"]),
            "request-id": request_view["id"] if request_view else "",
            "request-version": str(request_view["version"]) if request_view else "",
        },
    )
    return render("run.html.j2", ctx, status=state.status)


def _delegations(core: Core, who: Principal, run_id: str) -> list[delegations.DelegationShown]:
    """This run's delegated tokens for those the flow shows them to (admins); nobody else
    learns whether there are any."""
    try:
        return delegations.shown_for_run(core, who, run_id)
    except (NotFound, Forbidden):
        return []


@router.get("/runs/{run_id}")
def run_view(
    run_id: str, request: Request, session: Session, core: CoreDep, answered: str | None = None
) -> Response:
    v = viewer(core, session)
    page = run_page(core, v, run_id, RunPageState(answered_request=answered))
    if page.status_code == 200 and _navigated(request):
        # Opening the run page is seeing what its notifications point at: each of this
        # person's open ones not seen yet gets an ``opened`` receipt (telemetry, never a
        # decision: invariant 10), as opening it from the inbox or a link would.
        for note_id in pages.unseen_notifications(core, v.who, run_id):
            _record_opened(core, v.who, note_id)
    return page


def _navigated(request: Request) -> bool:
    """Whether a person opened the page (a top-level navigation), not app.js fetching it
    again for a live update (``Sec-Fetch-Dest: empty``)."""
    return request.headers.get("sec-fetch-dest", "document") == "document"


def _record_opened(core: Core, who: Principal, notification_id: str) -> None:
    """An ``opened`` receipt: telemetry that also sets first-seen, never a decision. The
    channel the link came from is unknown here, so none is recorded."""
    try:
        receipts.record_receipt(core, who, notification_id, "opened", None)
    except RunbellError as exc:  # telemetry must never break the page
        log.warning("web.receipt_failed", error=exc.detail)


def _when(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


@router.get("/n/{notification_id}")
def deep_link(notification_id: str, session: Session, core: CoreDep) -> Response:
    v = viewer(core, session)
    try:
        note = inbox.get_notification(core, v.who, notification_id, via="deep_link")
    except NotFound:
        return no_access(v, 404)
    if note["actionable_reason"] == "access lost":
        return no_access(v, 403)
    _record_opened(core, v.who, notification_id)
    if note.get("digest") is not None:
        return digest_page(v, note)
    banner: list[str] = []
    if not note["actionable"] and (
        note["attention_type"] == "input_required" or note["state"] != "open"
    ):
        reason = note["actionable_reason"]
        if reason == "informational":
            reason = note["state"]
        request = note.get("input_request")
        by = request["answered_by"] if request else None
        if request and by:
            who_answered = _("you") if by["id"] == v.who.user_id else by["email"] or _("a machine")
            banner.append(
                _(
                    "This request was already answered by {who} on {at} ({decision}), here "
                    "or on another device."
                ).format(
                    who=who_answered,
                    at=v.time(_when(request["answered_at"])),
                    decision=_decision(request["decision"]),
                )
            )
        else:
            banner.append(wording.why_not_actionable(reason, note.get("closed_reason")))
        run = note["run"]
        if run is not None:  # (None only for a digest, shown above)
            banner.append(
                _("Below is the run as it is now: {state}, version {version}.").format(
                    state=wording.state_label(run["state"]).lower(), version=run["version"]
                )
            )
    highlight = {
        "id": note["id"],
        "summary": neutral_words.summary_words(note["attention_type"], note["summary"]),
        "attention": note["attention_type"],
        "urgency": note["urgency"],
        "state": note["state"],
        "actionable": note["actionable"],
    }
    return run_page(core, v, note["run_id"], RunPageState(highlight=highlight, banner=banner))


def digest_page(v: Viewer, note: NotificationDetail) -> Response:
    """A digest's own page: what it collected, each item a link to its run."""
    digest = note["digest"]
    folded = [str(item["attention_type"]) for item in digest["items"]]
    summary = neutral_words.summary_words("digest", note["summary"], folded)
    ctx = v.base("digest", summary)
    ctx.update(
        note={**note, "summary": summary},
        items=[
            {**item, "when": v.time(_when(item["at"])) if item["at"] else None}
            for item in digest["items"]
        ],
        window_start=v.time(_when(digest["window_start"])) if digest.get("window_start") else None,
        window_end=v.time(_when(digest["window_end"])) if digest.get("window_end") else None,
    )
    return render("digest.html.j2", ctx)


def refusal_text(v: Viewer, exc: Conflict) -> str:
    """Why an answer was refused, in plain words and the person's timezone."""
    current = exc.extra.get("current") or {}
    req = current.get("input_request") or {}
    run = current.get("run") or {}
    state = req.get("state")
    if state == "answered" and req.get("answered_by"):
        by = req["answered_by"]
        who_answered = (
            _("you") if by.get("id") == v.who.user_id else by.get("email") or _("a machine")
        )
        text = _("This request was already answered by {who} on {at} ({decision}).").format(
            who=who_answered,
            at=v.time(_when(req.get("answered_at"))),
            decision=_decision(req.get("decision")),
        )
    elif state == "superseded":
        text = _("A newer request replaced this one.")
    elif state == "cancelled":
        now = wording.state_label(run.get("state") or "changed")
        text = _(
            "This request was cancelled: the run stopped waiting for it (it is now {state})."
        ).format(state=now.lower())
    elif state == "expired":
        text = _("This request expired on {at}.").format(at=v.time(_when(req.get("expires_at"))))
    else:
        text = flow_words.conflict_text(exc.detail, v.tz)
    return (
        text + " " + _("Your answer was not recorded and nothing ran. The current state is below.")
    )


#: What domain.badges adds when the ledger is clean but the agent doubted its own work.
AGENT_DOUBTED = N_("the agent reported that its effects are not verified")


def _badge(snapshot: RunSnapshot) -> dict[str, Any]:
    """The run's badge with its "because" in the reader's language: the ledger's counts
    worded again (web.wording.operation_counts), and the agent's doubt."""
    badge: dict[str, Any] = dict(snapshot["badge"])
    because = badge.get("because")
    if not because:
        return badge
    summary = snapshot.get("operations") or {}
    text, counts = summary.get("text"), summary.get("counts")
    worded = wording.operation_counts(counts) if isinstance(counts, dict) and counts else None
    if worded and text and because.startswith(text):
        because = worded + because[len(text) :]
    because = because.replace(AGENT_DOUBTED, _(AGENT_DOUBTED))
    badge["because"] = because
    return badge


#: The decisions as recorded (``approve``), shown as such in English and worded in others.
DECISIONS_SHOWN = frozenset({N_("approve"), N_("reject"), N_("answer")})


def _decision(decision: object) -> str:
    """A recorded decision as the banner shows it, in the current language."""
    return _(str(decision)) if decision in DECISIONS_SHOWN else str(decision)


@router.post("/runs/{run_id}/input-requests/{request_id}/respond")
def respond_form(run_id: str, request_id: str, signed: Checked, core: CoreDep) -> Response:
    """One answer is one flow in one transaction (``flows.answers``, which also checks
    that the request is this run's); the page is read again only to show a refusal."""
    who, form = signed.session.principal, signed.form
    v = viewer(core, signed.session)  # first: what this answers is in the person's language

    def again(**kw: Any) -> Response:
        return run_page(core, v, run_id, RunPageState(**kw))

    decision = form.first("decision")
    body: AnswerBody = {"decision": decision}
    try:
        body["expected_run_version"] = int(form.first("expected_run_version"))
        body["expected_request_version"] = int(form.first("expected_request_version"))
    except ValueError:
        return again(
            form_error=_("The form was incomplete. Reload the page and try again."), status=422
        )
    if decision == "answer":
        body["value"] = value = form.first("value")
        if not value.strip():
            return again(form_error=_("Choose an option or write an answer first."), status=422)
    key = form.first("idempotency_key")[:200] or secrets.token_urlsafe(24)
    try:
        answers.answer(core, who, request_id, body, key, run_id=run_id)
    except Conflict as exc:
        return again(conflict=refusal_text(v, exc), status=409)
    except Forbidden as exc:
        return again(
            conflict=_("You may not answer this request:")
            + " "
            + flow_words.conflict_text(exc.detail, v.tz),
            status=403,
        )
    except NotFound:
        return no_access(v, 404)
    except ValidationFailed as exc:
        return again(form_error=flow_words.conflict_text(exc.detail, v.tz), status=422)
    return RedirectResponse(
        f"/runs/{quote(run_id, safe='')}?answered={quote(request_id, safe='')}",
        status_code=303,
    )
