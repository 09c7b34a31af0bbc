"""The parts of a run page (:mod:`runbell.web.run_page`) as template context: the
request and its answer, the cancellation block, the job's own fields, progress, the
deliveries of each notification. Pure functions of what the flow returned and the viewer
(times in their timezone); no I/O."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

from runbell.domain.records import DeliveryAttempts, InputRequest, Run, Transition
from runbell.flows import views
from runbell.flows.delegations import DelegationShown
from runbell.flows.pages import RunPageShown
from runbell.flows.runs import RunSnapshot
from runbell.i18n import N_, _
from runbell.web import flow_words, wording
from runbell.web.action_view import action_view
from runbell.web.viewer import Viewer


def cancel_view(
    v: Viewer,
    run: Run,
    snapshot: RunSnapshot,
    shown: RunPageShown,
    cancel_error: str | None,
) -> dict[str, Any]:
    """The Cancellation block: the request (who, when, why), the outcome once cancelled,
    and whether this person may still ask (the run's authority, while it goes on and
    nobody has asked yet)."""
    requested = snapshot.get("cancel_requested")
    by = None
    if requested:
        by = (
            _("the runtime")
            if requested["by_kind"] == "runtime"
            else shown["cancel_requested_by_email"]
        )
        if requested.get("by") == v.who.user_id:
            by = "you"
    outcome = snapshot["cancellation"]
    return {
        "requested": bool(requested),
        "by": by,
        "at": v.time(run.cancel_requested_at),
        "reason": requested["reason"] if requested else None,
        "stopping": run.state == "stopping",
        "summary": (
            flow_words.cancel_outcome(outcome) if outcome and run.state == "cancelled" else None
        ),
        "allowed": shown["may_answer"] and not snapshot["terminal"] and not requested,
        "error": cancel_error,
    }


def details_text(details: Any) -> str | None:
    if details in (None, {}, []):
        return None
    if isinstance(details, str):
        return details
    return json.dumps(details, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def safe_link(url: Any) -> str | None:
    """Only http(s) links become clickable: a run's links come from a runtime."""
    if not isinstance(url, str):
        return None
    return url if urlsplit(url).scheme in ("http", "https") else None


def shown(value: Any) -> Any:
    """A proposed change's value as a person reads it: a done_when as its words and the
    operations it needs confirmed; anything else as it is."""
    if isinstance(value, dict) and "text" in value:
        ops = value.get("operations") or []
        needs = " " + _("(needs confirmed: {ops})").format(ops=", ".join(ops)) if ops else ""
        return str(value["text"]) + needs
    return value


def job_view(snapshot: RunSnapshot) -> dict[str, Any] | None:
    """The Job block (issue 18 item 5): what counts as done, where the run's links point,
    and where the proposal it depends on stands now. None when the run names none."""
    done_when = snapshot["done_when"]
    links = [
        {"label": f"{link['kind']} {link['id']}", "url": safe_link(link["url"])}
        for link in snapshot["links"]
    ]
    dependency = snapshot["dependency"]
    if not (done_when or links or dependency):
        return None
    return {
        "done_when": done_when,
        "links": links,
        "dependency": dependency,
        "dependency_href": (
            f"/runs/{quote(dependency['run'], safe='')}" if dependency is not None else None
        ),
    }


def progress_view(v: Viewer, progress: Any) -> dict[str, Any] | None:
    """The run's last progress note (message, what its counts count) and when it came."""
    if not isinstance(progress, dict):
        return None
    text = wording.progress_text(progress.get("message"), progress.get("counts"))
    if not text:
        return None
    try:
        at = datetime.fromisoformat(str(progress.get("at")))
    except ValueError:
        at = None
    return {"text": text, "at": v.time(at), "at_iso": views.iso(at)}


def option_label(req: InputRequest, value: Any) -> Any:
    for option in req.options or []:
        if isinstance(option, dict) and option.get("id") == value:
            return option.get("label") or value
    return value


def request_view(v: Viewer, req: InputRequest) -> dict[str, Any]:
    expires = req.expires_at
    options = req.options or []
    return {
        "id": req.id,
        "kind": req.kind,
        # An amendment's summary is Runbell's own words ("… proposes a change"): worded
        # for the reader; a runtime's summary stays as it wrote it.
        "summary": flow_words.worded(req.summary) if req.purpose == "amendment" else req.summary,
        "details": details_text(req.details),
        "action": action_view(req.action, req.risks),  # shown first (issue 19 item 1)
        "options": [
            {"id": str(o.get("id")), "label": str(o.get("label") or o.get("id"))}
            for o in options
            if isinstance(o, dict) and o.get("id") is not None
        ],
        "version": req.version,
        "state": req.state,
        "purpose": req.purpose,
        "expires": v.time(expires) if expires else None,
        "expires_iso": views.iso(expires),
        "expires_in": wording.relative(expires, v.now) if expires else None,
        "expired": bool(expires and expires <= v.now),
    }


def decided_view(v: Viewer, req: InputRequest | None) -> dict[str, Any] | None:
    """The last review decision: who chose what, when."""
    if req is None:
        return None
    by = _("you") if req.answered_by_id == v.who.user_id else req.answered_by_email
    return {"by": by, "label": option_label(req, req.value), "at": v.time(req.answered_at)}


def last_change(transitions: list[Transition]) -> str:
    if not transitions:
        return ""
    tr = transitions[-1]
    return wording.change_sentence(tr.kind, tr.from_state, tr.to_state, tr.reason)


def deliveries_view(
    v: Viewer, deliveries: list[DeliveryAttempts], endpoints: dict[str, str]
) -> list[dict[str, Any]]:
    """A notification's deliveries, each row telling itself apart from the others: a
    tenant webhook carries one message when the notification was made and one when it
    closed (two rows, "new notification" and "notification closed"), per endpoint (named when
    there are several)."""
    hooks = {d["destination"] for d in deliveries if d["channel"] == "webhook"}
    out = []
    for d in deliveries:
        detail = None
        if d["channel"] == "webhook":
            event = d.get("event_type") or ""
            known = wording.WEBHOOK_EVENT_LABEL.get(event)
            parts = [_(known) if known else d.get("event_type")]
            if len(hooks) > 1:
                where = endpoints.get(d["destination"]) or _("another endpoint")
                parts.append(_("to {endpoint}").format(endpoint=where))
            detail = " ".join(p for p in parts if p) or None
        out.append(
            {
                "channel": d["channel"],
                "detail": detail,
                "status": d["status"],
                "attempts": d["attempt_count"],
                "updated": v.time(d["updated_at"]),
            }
        )
    return out


DELEGATION_STATE = {"active": N_("Active"), "expired": N_("Expired"), "revoked": N_("Revoked")}


def delegations_view(v: Viewer, found: list[DelegationShown]) -> list[dict[str, Any]]:
    """The Delegated tokens block: each token's name, the key that minted it (its name,
    never a secret), what it may do, when it expires, its state and whether this person
    may revoke it. Never the token's secret or hash (the flow never returns them)."""

    def at(value: str | None) -> str | None:
        return v.time(datetime.fromisoformat(value)) if value else None

    return [
        {
            "id": d["id"],
            "name": d["name"],
            "minted_by": d["minted_by_name"] or _("an unnamed key"),
            "key_id": d["minted_by"],
            "capabilities": ", ".join(d["capabilities"]),
            "created": at(d["created_at"]),
            "expires": at(d["expires_at"]),
            "revoked": at(d["revoked_at"]),
            "state": d["state"],
            "state_label": _(DELEGATION_STATE[d["state"]])
            if d["state"] in DELEGATION_STATE
            else d["state"],
            "may_revoke": d["may_revoke"] and d["state"] == "active",
        }
        for d in found
    ]
