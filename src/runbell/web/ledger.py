"""The run page's Operations section (issue 10): what the ledger's counts count, the
outcome they give a completion, each group of operations with its evidence, and — for an
operation that was ever in doubt — its history, so the page keeps showing what was
uncertain and how it was settled after a lookup (issue 16)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from runbell.flows import views
from runbell.flows.operation_views import OperationView
from runbell.i18n import N_, _, ngettext
from runbell.web import wording
from runbell.web.trace import actor_text
from runbell.web.viewer import Viewer

#: The Operations section's groups, in the order a reader needs them (issue 10).
LEDGER_GROUPS = (
    ("confirmed", N_("Confirmed"), ("confirmed",)),
    ("absent", N_("Confirmed absent"), ("absent",)),
    ("conflicts", N_("Conflicts"), ("conflict",)),
    ("uncertain", N_("Uncertain: may have landed, being checked"), ("uncertain", "unresolved")),
    ("in-flight", N_("Sent or planned, no reply yet"), ("sent", "planned")),
    ("not-started", N_("Not started"), ("not_started",)),
    ("failed", N_("Failed"), ("failed",)),
)
OP_STATE_LABEL = {
    "planned": N_("planned"),
    "sent": N_("sent"),
    "confirmed": N_("confirmed"),
    "conflict": N_("conflict"),
    "failed": N_("failed"),
    "uncertain": N_("uncertain"),
    "absent": N_("confirmed absent"),
    "unresolved": N_("unresolved after lookup"),
    "not_started": N_("not started"),
}
OUTCOME_LINE = {
    "verified": N_("Verified: every operation is confirmed."),
    "needs_review": N_(
        "Needs review: the run finished, but not every operation is confirmed. An "
        "uncertain one is looked up by the runtime; this page shows the answer when it comes."
    ),
    "unknown": N_("Outcome unknown: the run finished while operations were still in flight."),
}


#: States an operation passes through on its way to a settled answer that a reader must
#: be able to see afterwards: what was in doubt, and how it was settled.
DOUBTED = ("uncertain", "unresolved", "conflict", "absent", "failed")


def _history_view(
    v: Viewer, op: OperationView, people: dict[str, str]
) -> list[dict[str, Any]] | None:
    """The operation's steps (state, when, evidence) when one of them was a doubt, so the
    run page keeps showing what was uncertain and how it was settled; None otherwise."""
    steps = [s for s in op.get("history") or [] if isinstance(s, dict)]
    if not any(s.get("state") in DOUBTED for s in steps):
        return None
    out = []
    for i, step in enumerate(steps):
        evidence = step.get("evidence")
        if isinstance(evidence, dict) and i < len(steps) - 1:
            # "What happens next" was true then; once the next step came, it is history.
            evidence = {k: val for k, val in evidence.items() if k != "next"}
        try:
            at = datetime.fromisoformat(str(step.get("at")))
        except ValueError:
            at = None
        state = str(step.get("state"))
        out.append(
            {
                "state": state,
                "state_label": _label(OP_STATE_LABEL, state),
                "at": v.time(at, seconds=True),
                "at_iso": views.iso(at),
                "evidence": wording.evidence_rows(evidence, people),
            }
        )
    return out


def _trace_view(op: OperationView, people: dict[str, str], v: Viewer | None) -> dict[str, Any]:
    """What others reported about the operation (findings, which change nothing) and the
    owner's supersede, each naming who (``web.trace.actor_text``)."""
    me = v.who.user_id if v is not None else None
    findings = [
        {
            "finding": str(f.get("finding")),
            "by": actor_text(f.get("actor"), people, me, people),
            "evidence": wording.evidence_rows(f.get("evidence"), people),
        }
        for f in op.get("reports") or []
        if isinstance(f, dict)
    ]
    sup = op.get("superseded")
    superseded = (
        {"reason": sup.get("reason"), "by": actor_text(sup.get("actor"), people, me, people)}
        if isinstance(sup, dict)
        else None
    )
    return {"findings": findings, "superseded": superseded}


def _settled_note(ops: Sequence[OperationView]) -> str | None:
    """One sentence for the operations that were in doubt and are settled now."""
    settled = [
        op
        for op in ops
        if op["state"] in ("confirmed", "absent")
        and any(s.get("state") == "uncertain" for s in op.get("history") or [])
    ]
    if not settled:
        return None
    n = len(settled)
    which = ", ".join(op["operation_id"] for op in settled[:5]) + (" …" if n > 5 else "")
    return ngettext(
        "{n} operation ({which}) was uncertain and was settled by a lookup: see its history below.",
        "{n} operations ({which}) were uncertain and were settled by a lookup: see "
        "their history below.",
        n,
    ).format(n=n, which=which)


def _label(table: Mapping[str, str], key: str) -> str:
    known = table.get(key)
    return _(known) if known else key


def ledger_view(
    snapshot: Mapping[str, Any],
    ops: Sequence[OperationView],
    v: Viewer | None = None,
    people: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The Operations section: the counts text, the outcome, each group with its items
    (and, for an item that was ever in doubt, its history). ``people``: user ids and
    credential ids to the email or name shown for them."""
    people = people or {}
    groups = []
    for key, label, states in LEDGER_GROUPS:
        items = []
        for op in ops:
            if op["state"] not in states:
                continue
            intent, target = wording.operation_line(op["intent"], op["target"])
            items.append(
                {
                    "operation_id": op["operation_id"],
                    "state": op["state"],
                    "state_label": _label(OP_STATE_LABEL, op["state"]),
                    "intent": intent,
                    "target": target,
                    "evidence": wording.evidence_rows(op.get("evidence"), people),
                    "history": _history_view(v, op, people) if v is not None else None,
                    **_trace_view(op, people, v),
                }
            )
        if items:
            groups.append({"key": key, "label": _(label), "ops": items})
    summary = snapshot.get("operations") or {}
    outcome = snapshot.get("outcome")
    return {
        "text": wording.operation_counts(summary.get("counts") or {}) or summary.get("text"),
        "outcome": outcome,
        "outcome_line": _label(OUTCOME_LINE, outcome) if ops and outcome in OUTCOME_LINE else None,
        "settled_note": _settled_note(ops),
        "previous_worker_may_still_act": bool(snapshot.get("previous_worker_may_still_act")),
        "groups": groups,
    }
