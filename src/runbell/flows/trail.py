"""The trail of one notification, for support: why it exists, where it went, and
whether its recipient could still act on it.

Invariants kept here (DESIGN §2): 10 — receipts (telemetry) are shown apart from the
decision; 8 — "could still act" is computed for the recipient's current access, not for
the administrator asking. Administrators only; another tenant's id answers 404.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from runbell.domain.principal import Principal
from runbell.domain.records import Run
from runbell.flows import digests, views
from runbell.flows.context import Core
from runbell.flows.escalation import step_view
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


def trail(core: Core, who: Principal, notification_id: str) -> dict[str, Any]:
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
    out = views.notification_view(note)
    # "answered by usr_…" names the person: support reads who it was (members only).
    out["closed_reason"] = views.name_people(note.get("closed_reason"), people)
    # "Could the user still act?": the recipient's answer, not the admin asking.
    out["actionable"], out["actionable_reason"] = actionable(core, note, run, request, sees)
    if digest is not None:
        out["digest"] = digest
    out["why"] = {
        "rule_id": note["rule_id"],
        "decision": note["decision"],
        "inputs": note["inputs"],
    }
    out["transition"] = (
        None
        if transition is None
        else {
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
    out["deliveries"] = [
        {
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
        for d in deliveries
    ]
    out["lifecycle"] = [
        {
            "cursor": str(e["seq"]),
            "type": e["type"],
            "at": views.iso(e["created_at"]),
            "data": e["data"],
        }
        for e in lifecycle
    ]
    out["receipts"] = [{**views.receipt_view(r), "user_id": r["user_id"]} for r in receipts]
    # The escalation ladder as scheduled, and the neutral pushes that replaced this one
    # on the devices that showed it once someone handled it.
    out["escalation"] = [step_view(s) for s in steps]
    out["retractions"] = [
        {
            "id": d["id"],
            "destination": d["destination"],
            "status": d["status"],
            "attempt_count": d["attempt_count"],
            "last_error": d["last_error"],
            "updated_at": views.iso(d["updated_at"]),
        }
        for d in retractions
    ]
    return out
