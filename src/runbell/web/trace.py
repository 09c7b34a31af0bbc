"""The run page's timeline as a per-step trace (issue 18 item 8): every transition,
operation change, finding, owner change, answer and amendment, newest first, each saying
who or what caused it — a person by their email, a credential by its kind and id, a worker
by its id, a verified source, the state reader, a sweep. Never a secret (the trace holds
none)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from runbell.flows.run_history import TraceStep
from runbell.i18n import N_, _
from runbell.web import wording
from runbell.web.viewer import Viewer

#: What each kind of credential is called on the page.
_CREDENTIAL = {"admin": N_("admin key"), "runtime": N_("runtime key")}
_ANY_CREDENTIAL = N_("credential")
_NO_NAMES: Mapping[str, str] = {}
_ACTION = {
    "declared": N_("declared"),
    "moved": N_("moved"),
    "finding": N_("finding reported"),
    "superseded": N_("superseded: new work on its target may go ahead"),
}


def actor_text(
    actor: Mapping[str, Any] | None,
    people: Mapping[str, str],
    me: str | None,
    names: Mapping[str, str] = _NO_NAMES,
) -> str:
    """Who or what caused a step, in words ("worker worker-a (runtime key “ci”)", "you",
    "delegated token “reviewer”", "the state reader"); "not recorded" for a step from
    before the trace. ``names``: credential id → its name (else the id is shown)."""
    if not actor:
        return _("not recorded")
    kind = actor.get("kind")
    worker = actor.get("worker_id")
    if kind == "user":
        user = actor.get("user_id")
        who = _("you") if user and user == me else people.get(str(user), _("a person"))
        return who if not worker else _("{who} (worker {worker})").format(who=who, worker=worker)
    if kind == "source":
        return _("the verified source {source}").format(source=actor.get("source_id"))
    if kind == "state_reader":
        return _("the state reader")
    if kind == "sweep":
        return _("the {sweep} sweep").format(sweep=actor.get("sweep", "scheduled"))
    credential = actor.get("credential_id")
    if kind == "delegated":
        what = _("delegated token")
    elif kind == "callback":  # a machine answered through a callback URL (issue 19)
        what = _("callback URL")
    else:
        what = _(_CREDENTIAL.get(str(actor.get("role")), _ANY_CREDENTIAL))
    name = names.get(str(credential)) if credential else None
    named = f"{what} “{name}”" if name else f"{what} {credential}" if credential else what
    if worker:
        return _("worker {worker} ({named})").format(worker=worker, named=named)
    return named


def owner_text(
    owner: Mapping[str, Any],
    people: Mapping[str, str],
    me: str | None,
    names: Mapping[str, str] = _NO_NAMES,
) -> str:
    """The run's completion owner in words."""
    if not owner.get("credential_id"):
        return _("not recorded (any credential of the tenant may act, as before owners existed)")
    credential = str(owner["credential_id"])
    return actor_text(
        {
            "kind": "delegated" if credential.startswith("dlg_") else "key",
            "role": "runtime",
            "credential_id": credential,
            "worker_id": owner["worker_id"],
        },
        people,
        me,
        names,
    )


def timeline(
    v: Viewer,
    steps: list[TraceStep],
    asked: dict[str, str],
    people: Mapping[str, str],
    names: Mapping[str, str] = _NO_NAMES,
) -> list[dict[str, Any]]:
    """The trace as the page's timeline rows, newest first. An answer to the run's own
    question is its ``answered`` transition already (same person, same moment), so it is
    one row; an answer to a proposed change (which may move nothing) is its own."""
    me = v.who.user_id
    rows = []
    edited: str | None = None  # the decision of an edited answer whose transition is next
    for step in reversed(steps):
        if step["kind"] == "answer" and step.get("purpose") != "amendment":
            # The run's own "answered" transition is this step, by the same person; it
            # only says the answer was edited when this step tells it (newest first, the
            # answer comes just before its transition).
            edited = str(step.get("decision") or "") if step.get("edited") else None
            continue
        at = _at(step.get("at"))
        row: dict[str, Any] = {
            "kind": step["kind"],
            "at": v.time(at) if at else "",
            "at_iso": step.get("at"),
            "by": actor_text(step.get("actor"), people, me, names),
            "reason": None,
            "version": None,
        }
        row.update(_what(step, asked, people, me))
        if edited is not None and step["kind"] == "transition":
            if str(step.get("reason") or "").startswith("answered:"):
                known = wording.DECISION_WORD.get(edited)
                row["reason"] = _("the request was {decision} with an edited value").format(
                    decision=_(known) if known else edited
                )
            edited = None
        rows.append(row)
    return rows


def _what(
    step: TraceStep, asked: dict[str, str], people: Mapping[str, str], me: str | None
) -> dict[str, Any]:
    kind = step["kind"]
    if kind == "transition":
        what, why = wording.transition_text(
            step.get("transition", "state"),
            step.get("from_state"),
            step.get("to_state", ""),
            step.get("reason"),
            asked,
        )
        return {"version": step.get("version"), "what": what, "reason": why}
    if kind == "operation":
        action = step.get("action", "moved")
        known = _ACTION.get(action)
        label = _(known) if known else action
        what = _("operation {id}: {label}").format(id=step.get("operation_id"), label=label)
        if action == "finding":
            what += " " + _("({finding}; its state stays {state})").format(
                finding=step.get("finding"), state=step.get("state")
            )
        elif action in ("declared", "moved"):
            what += f" → {step.get('state')}"
        return {"what": what, "reason": step.get("reason")}
    if kind == "owner_change":
        owner = step.get("owner") or {}
        previous = step.get("previous") or {}
        if step.get("change") == "takeover":
            what = _("took the run over for worker {worker} (epoch {epoch})")
        else:
            what = _("claimed the run for worker {worker} (epoch {epoch})")
        what = what.format(worker=owner.get("worker_id"), epoch=step.get("epoch"))
        if previous.get("worker_id"):
            if step.get("previous_may_still_act"):
                more = _(
                    "previous worker {worker}, which may still act (an operation it sent "
                    "has not settled)"
                )
            else:
                more = _("previous worker {worker}, with nothing left in flight")
            what += "; " + more.format(worker=previous.get("worker_id"))
        return {"what": what, "reason": step.get("reason")}
    if kind == "answer":
        decision = step.get("decision", "")
        known = wording.DECISION_WORD.get(decision)
        word = _(known) if known else decision
        amendment = step.get("purpose") == "amendment"
        if step.get("edited"):
            text = (
                _("a proposed change was {decision} with an edited value")
                if amendment
                else _("a request was {decision} with an edited value")
            )
        else:
            text = (
                _("a proposed change was {decision}")
                if amendment
                else _("a request was {decision}")
            )
        return {"what": text.format(decision=word)}
    if kind == "amendment":
        return {"what": _("a change was proposed (now {state})").format(state=step.get("state"))}
    return {"what": kind}


def _at(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
