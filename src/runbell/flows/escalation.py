"""Escalation that retracts: a notification nobody acted on reaches further, step by
step; once someone acts, the steps stop and the pushes it already showed are replaced.

A policy rule's ladder (``domain.escalation``) becomes ``escalation_steps`` rows written
with the notification (``flows.attention.raise_attention``), each with its due time —
scheduled, never slept on. The scheduler's escalation sweep (:func:`sweep`) fires due
steps by queueing deliveries on the step's channel through the normal outbox, so the
dispatcher checks consent, quiet hours and access at send time as for any delivery.
Every close of the notification (acknowledged, answered/resolved, expired, superseded,
revoked) goes through ``flows.attention.close_notification``, which cancels the pending
steps in the same transaction; a step is re-checked under its row lock before it fires,
so a close that commits first always wins and a second scheduler finds nothing to do.

Invariants kept here (DESIGN §2): 6 (an acknowledgement anywhere stops every channel,
escalations included), 7 and 8 (escalated sends pass the same dispatch gate), 11 (the
replacement push says only that the matter was handled), 12 (steps commit with their
notification).
"""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

import structlog

from runbell import metrics
from runbell.domain.channels import offered
from runbell.domain.records import EscalationStep, Notification
from runbell.flows import push_actions, views
from runbell.flows.attention import notification_event
from runbell.flows.context import Core
from runbell.store import destinations, escalations, outbox
from runbell.store import notifications as notes
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)


def sweep(core: Core, now: datetime, limit: int = 500) -> int:
    """Fire every pending step due by ``now``; returns how many fired."""
    with core.db.read() as conn:
        due = escalations.due(conn, now, limit)
    fired = 0
    for step_id in due:
        with core.db.transaction(now=now) as tx:
            step = escalations.lock(tx.conn, step_id)
            if step is None or step["status"] != "pending" or step["due_at"] > tx.now:
                continue  # cancelled by a close, or fired by another scheduler meanwhile
            note = notes.find(tx.conn, step["tenant_id"], step["notification_id"])
            if note is None or note["state"] != "open":
                state = "gone" if note is None else note["state"]
                escalations.settle(
                    tx.conn, step_id, "cancelled", tx.now, f"notification {state}", 0
                )
                continue
            fired += fire(core, tx, step, note)
    return fired


def fire(
    core: Core,
    tx: Tx,
    step: EscalationStep,
    note: Notification,
    *,
    trigger: str = "time",
    because: str | None = None,
) -> int:
    """Queue the step's deliveries and settle it as fired, in ``tx`` (the caller holds
    the step's row lock). ``trigger``/``because``: what fired it when it was not its time
    (a fallback, ``flows.fallback``), as the trail says it."""
    tenant_id, user_id, channel = note["tenant_id"], note["recipient_user_id"], step["channel"]
    targets = _destinations(core, tx, tenant_id, user_id, channel)
    if step.get("purpose") == push_actions.SNOOZE:
        # A snoozed notification comes back to the person's browsers, shown before or not.
        rows = push_actions.repush_rows(note, targets, step["step_no"], tx.now)
        because, trigger = because or step["reason"] or "snoozed", "snooze"
    else:
        used = escalations.destinations_used(tx.conn, tenant_id, note["id"], channel)
        rows = [
            outbox.delivery_row(tenant_id, note["id"], channel, dest, "queued", tx.now)
            for dest in targets
            if dest not in used
        ]
        for row in rows:
            row.update({"run_id": note["run_id"], "urgency": note["urgency"]})
    outbox.add_deliveries(tx.conn, rows)
    if rows:
        tx.wake_outbox = True
    why = because or f"not acknowledged within {step['after_s']} s"
    reason = (
        f"{why}: {len(rows)} {channel} deliveries queued"
        if rows
        else f"{why}: no {channel} destination to add"
    )
    escalations.settle(tx.conn, step["id"], "fired", tx.now, reason, len(rows), trigger)
    attention = note["attention_type"]
    tx.after_commit.append(lambda: metrics.ESCALATIONS.labels(attention, channel).inc())
    tx.emit(
        tenant_id,
        PendingEvent(
            "notification.escalated",
            {
                **notification_event(note),
                "step_no": step["step_no"],
                "channel": channel,
                "deliveries": len(rows),
                "trigger": trigger,
            },
            run_id=note["run_id"],
            notification_id=note["id"],
            user_id=user_id,
        ),
    )
    log.info(
        "notification.escalated",
        notification_id=note["id"],
        step_no=step["step_no"],
        channel=channel,
        deliveries=len(rows),
        trigger=trigger,
    )
    return 1


def _destinations(core: Core, tx: Tx, tenant_id: str, user_id: str, channel: str) -> list[str]:
    """Where the step's channel reaches the person now; none when this server does not
    send on it (email without SMTP)."""
    if channel not in offered(core.settings):
        return []
    return destinations.destination_ids(tx.conn, channel, tenant_id, user_id)


class StepView(TypedDict):
    """One escalation step as the trail shows it."""

    step_no: int
    channel: str
    after_s: int
    due_at: str | None
    status: str
    deliveries: int | None
    reason: str | None
    settled_at: str | None
    # time | failed | dead | unknown: what fired it (a fallback names the failure)
    trigger: str | None
    on_failure: bool  # the rule's fallback: may fire at once when a channel fails


def step_view(step: EscalationStep) -> StepView:
    return {
        "step_no": step["step_no"],
        "channel": step["channel"],
        "after_s": step["after_s"],
        "due_at": views.iso(step["due_at"]),
        "status": step["status"],
        "deliveries": step["deliveries"],
        "reason": step["reason"],
        "settled_at": views.iso(step["settled_at"]),
        "trigger": step["trigger"] or ("time" if step["status"] == "fired" else None),
        "on_failure": bool(step["on_failure"]),
    }
