"""The trail of one notification, for support: why it exists, where it went, and
whether its recipient could still act on it.

Invariants kept here (DESIGN §2): 10 — receipts (telemetry) are shown apart from the
decision; 8 — "could still act" is computed for the recipient's current access, not for
the administrator asking. Administrators only; another tenant's id answers 404.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NotRequired, TypedDict

from sqlalchemy.engine import Connection

from runbell.domain.principal import Principal
from runbell.domain.records import DeliveryAttempts, Run, Transition
from runbell.flows import digests, views
from runbell.flows.context import Core
from runbell.flows.digests import DigestView
from runbell.flows.escalation import StepView, step_view
from runbell.flows.inbox import actionable, recipient_sees_run
from runbell.flows.input_requests import get_for_notification
from runbell.store import accounts, destinations, escalations, feed, runs
from runbell.store import input_requests as requests
from runbell.store import notifications as notes


def members(conn: Connection, tenant_id: str, user_ids: Iterable[str]) -> dict[str, str]:
    """``{user id: email}`` for the members of the tenant among ``user_ids`` (at most 50):
    an id a runtime wrote into evidence never reveals a person of another tenant."""
    out = {}
    for user_id in sorted(user_ids)[:50]:
        if accounts.membership_role(conn, tenant_id, user_id) is not None:
            email = destinations.email_of(conn, user_id)
            if email is not None:
                out[user_id] = email
    return out


class Why(TypedDict):
    rule_id: str
    decision: str
    inputs: dict[str, Any]
    # Why a push was not pushed: its rule's throttle folded it (flows.pacing).
    throttled: NotRequired[str]


# ("from" is a keyword: the functional form can name it.)
TransitionView = TypedDict(
    "TransitionView",
    {
        "version": int,
        "kind": str,
        "from": str | None,
        "to": str,
        "source_id": str | None,
        "event_id": str | None,
        "reason": str | None,
        "at": str | None,
        "reported_at": str | None,
    },
)


class DeliveryTrail(TypedDict):
    id: str
    channel: str
    destination: str
    event_type: str | None
    status: str
    attempt_count: int
    next_attempt_at: str | None
    last_error: str | None
    created_at: str | None
    updated_at: str | None
    attempts: list[dict[str, Any]]  # each attempt's columns, times as ISO text


class LifecycleEvent(TypedDict):
    cursor: str
    type: str
    at: str | None
    data: dict[str, Any]


class ReceiptTrail(views.ReceiptView):
    user_id: str | None


class Retraction(TypedDict):
    id: str
    destination: str
    status: str
    attempt_count: int
    last_error: str | None
    updated_at: str | None


class Trail(views.NotificationView):
    """``GET /v1/notifications/{id}/trail``: why it exists and what became of it."""

    actionable: bool
    actionable_reason: str
    digest: NotRequired[DigestView]
    why: Why
    transition: TransitionView | None
    deliveries: list[DeliveryTrail]
    lifecycle: list[LifecycleEvent]
    receipts: list[ReceiptTrail]
    escalation: list[StepView]
    retractions: list[Retraction]


def trail(core: Core, who: Principal, notification_id: str) -> Trail:
    """Why it was created (rule, inputs, transition), its deliveries with their attempts,
    its lifecycle on the feed, its receipts, and whether the recipient could still act."""
    with core.db.read() as conn:
        note = notes.get(conn, who.tenant_id, notification_id)
        transition = runs.get_transition(
            conn, who.tenant_id, note["run_id"], note["transition_version"]
        )
        deliveries = notes.deliveries_for(conn, who.tenant_id, notification_id)
        lifecycle = feed.for_notification(conn, who.tenant_id, notification_id)
        receipts = requests.receipts_for(conn, who.tenant_id, notification_id)
        sees = recipient_sees_run(conn, note)
        digest = None
        if digests.is_digest(note):
            run: Run | None = None
            request = None
            role = accounts.membership_role(conn, who.tenant_id, note["recipient_user_id"])
            digest = digests.digest_view(conn, digests.recipient(note, role or "member"), note)
        else:
            run = runs.require_run(conn, who.tenant_id, note["run_id"])
            request = get_for_notification(conn, note)
        steps = escalations.for_notification(conn, who.tenant_id, notification_id)
        retractions = escalations.retractions_for(conn, who.tenant_id, notification_id)
        people = members(conn, who.tenant_id, views.user_ids_in([note.get("closed_reason")]))
    # "Could the user still act?": the recipient's answer, not the admin asking.
    ok, reason = actionable(core, note, run, request, sees)
    out: Trail = {
        **views.notification_view(note),  # type: ignore[typeddict-item]  # (no "digest" in it)
        # "answered by usr_…" names the person: support reads who it was (members only).
        "closed_reason": views.name_people(note.get("closed_reason"), people),
        "actionable": ok,
        "actionable_reason": reason,
        "why": {
            "rule_id": note["rule_id"],
            "decision": note["decision"],
            "inputs": note["inputs"],
        },
        "transition": None if transition is None else _transition_view(transition),
        "deliveries": [_delivery_trail(d) for d in deliveries],
        "lifecycle": [
            {
                "cursor": str(e["seq"]),
                "type": e["type"],
                "at": views.iso(e["created_at"]),
                "data": e["data"],
            }
            for e in lifecycle
        ],
        "receipts": [{**views.receipt_view(r), "user_id": r["user_id"]} for r in receipts],
        # The escalation ladder as scheduled, and the neutral pushes that replaced this
        # one on the devices that showed it once someone handled it.
        "escalation": [step_view(s) for s in steps],
        "retractions": [
            {
                "id": d["id"],
                "destination": d["destination"],
                "status": d["status"],
                "attempt_count": d["attempt_count"],
                "last_error": d["last_error"],
                "updated_at": views.iso(d["updated_at"]),
            }
            for d in retractions
        ],
    }
    if digest is not None:
        out["digest"] = digest
    folded = (note["inputs"] or {}).get("throttled")
    if isinstance(folded, dict) and folded.get("reason"):
        out["why"]["throttled"] = str(folded["reason"])
    return out


def _transition_view(transition: Transition) -> TransitionView:
    return TransitionView(
        {
            "version": transition.version,
            "kind": transition.kind,
            "from": transition.from_state,
            "to": transition.to_state,
            "source_id": transition.source_id,
            "event_id": transition.event_id,
            "reason": transition.reason,
            "at": views.iso(transition.at),
            "reported_at": views.iso(transition.reported_at),
        }
    )


def _delivery_trail(d: DeliveryAttempts) -> DeliveryTrail:
    return {
        "id": d["id"],
        "channel": d["channel"],
        "destination": d["destination"],
        "event_type": d["event_type"],
        "status": d["status"],
        "attempt_count": d["attempt_count"],
        "next_attempt_at": views.iso(d["next_attempt_at"]),
        "last_error": d["last_error"],
        "created_at": views.iso(d["created_at"]),
        "updated_at": views.iso(d["updated_at"]),
        "attempts": [
            {
                k: (views.iso(v) if isinstance(v, datetime) else v)
                for k, v in a.items()
                if k not in ("tenant_id",)
            }
            for a in d.get("attempts", [])
        ],
    }
