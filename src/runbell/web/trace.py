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
from runbell.web import wording
from runbell.web.viewer import Viewer

#: What each kind of credential is called on the page.
_CREDENTIAL = {"admin": "admin key", "runtime": "runtime key"}
_NO_NAMES: Mapping[str, str] = {}
_ACTION = {
    "declared": "declared",
    "moved": "moved",
    "finding": "finding reported",
    "superseded": "superseded: new work on its target may go ahead",
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
        return "not recorded"
    kind = actor.get("kind")
    worker = actor.get("worker_id")
    if kind == "user":
        user = actor.get("user_id")
        who = "you" if user and user == me else people.get(str(user), "a person")
        return who if not worker else f"{who} (worker {worker})"
    if kind == "source":
        return f"the verified source {actor.get('source_id')}"
    if kind == "state_reader":
        return "the state reader"
    if kind == "sweep":
        return f"the {actor.get('sweep', 'scheduled')} sweep"
    credential = actor.get("credential_id")
    if kind == "delegated":
        what = "delegated token"
    elif kind == "callback":  # a machine answered through a callback URL (issue 19)
        what = "callback URL"
    else:
        what = _CREDENTIAL.get(str(actor.get("role")), "credential")
    name = names.get(str(credential)) if credential else None
    named = f"{what} “{name}”" if name else f"{what} {credential}" if credential else what
    return f"worker {worker} ({named})" if worker else named


def owner_text(
    owner: Mapping[str, Any],
    people: Mapping[str, str],
    me: str | None,
    names: Mapping[str, str] = _NO_NAMES,
) -> str:
    """The run's completion owner in words."""
    if not owner.get("credential_id"):
        return "not recorded (any credential of the tenant may act, as before owners existed)"
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
    for step in reversed(steps):
        if step["kind"] == "answer" and step.get("purpose") != "amendment":
            # The run's own "answered" transition is this step, by the same person.
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
        label = _ACTION.get(action, action)
        what = f"operation {step.get('operation_id')}: {label}"
        if action == "finding":
            what += f" ({step.get('finding')}; its state stays {step.get('state')})"
        elif action in ("declared", "moved"):
            what += f" → {step.get('state')}"
        return {"what": what, "reason": step.get("reason")}
    if kind == "owner_change":
        owner = step.get("owner") or {}
        previous = step.get("previous") or {}
        took = "took the run over" if step.get("change") == "takeover" else "claimed the run"
        what = f"{took} for worker {owner.get('worker_id')} (epoch {step.get('epoch')})"
        if previous.get("worker_id"):
            what += f"; previous worker {previous.get('worker_id')}"
            what += (
                ", which may still act (an operation it sent has not settled)"
                if step.get("previous_may_still_act")
                else ", with nothing left in flight"
            )
        return {"what": what, "reason": step.get("reason")}
    if kind == "answer":
        decision = step.get("decision", "")
        word = wording.DECISION_WORD.get(decision, decision)
        about = "a proposed change" if step.get("purpose") == "amendment" else "a request"
        edited = " with an edited value" if step.get("edited") else ""
        return {"what": f"{about} was {word}{edited}"}
    if kind == "amendment":
        return {"what": f"a change was proposed (now {step.get('state')})"}
    return {"what": kind}


def _at(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
