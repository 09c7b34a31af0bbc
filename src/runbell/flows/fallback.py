"""Fallback on failure: when a channel fails for good, the next consented channel at once.

A policy rule with an escalation ladder may say ``fallback = true`` (or
``fallback = { unknown_after_s = 600 }``): its rungs are then written with ``on_failure``
(``flows.attention.follow_up``). When the worker's record step (``flows.delivery_record``)
settles a delivery of the notification as failed for good — a permanent error (a push
subscription gone: 404/410, an address refused) or retries exhausted (dead-lettered) — or,
with ``unknown_after_s``, records another unknown outcome that long after the delivery was
queued, :func:`after_failure` fires the first pending rung on another channel the
recipient can be reached on, in the same transaction, instead of waiting for its time.

- Only when nothing else of the notification reaches the person or still may (a second
  device, another channel already accepted or on its way): a fallback replaces a channel
  that failed, it never adds a second one beside a working one.
- Once: the record step settles only a delivery its worker still holds (a replayed or late
  record does nothing), the notification and the rungs are locked (two workers failing
  two devices at once serialise here, and the second sees the first's failure), a fired
  rung is no longer pending, and ``uq_delivery_once`` (notification, channel, destination)
  makes a second row for the same destination impossible.
- Like any delivery: the rung's deliveries go through the outbox, so the dispatch gate
  checks consent, quiet hours, urgency and access at send time (DESIGN §2, 7 and 8); the
  choice itself skips channels the person did not consent to at the notification's
  urgency, or has no destination on. One notification, one attention record (invariant
  1): a fallback adds deliveries, never a notification.

The rung's reason in the trail says what happened ("web push failed permanently; fell
back to email: 1 email deliveries queued"), its ``trigger`` names the failure, and
``runbell_fallbacks_total`` counts it once the transaction commits.
"""

from __future__ import annotations

import structlog

from runbell import metrics
from runbell.domain.channels import PERSON_CHANNELS, consented_urgencies, offered
from runbell.domain.escalation import choose_fallback
from runbell.domain.records import Delivery
from runbell.flows.context import Core
from runbell.flows.escalation import fire
from runbell.store import destinations, escalations
from runbell.store import notifications as notes
from runbell.store.db import Tx

log = structlog.get_logger(__name__)

#: What a failure that may fall back is called: a permanent error, retries exhausted, an
#: outcome still unknown past the rule's bound.
TRIGGERS = ("failed", "dead", "unknown")


def after_failure(core: Core, tx: Tx, row: Delivery, trigger: str) -> bool:
    """Fall back from ``row``'s channel if its notification's rule says so; True when a
    rung fired. Called by the record step inside its transaction, with the notification
    and the delivery locked."""
    note_id = row["notification_id"]
    if (
        note_id is None
        or row["event_type"] is not None  # a retraction is not the person's alert
        or row["channel"] not in PERSON_CHANNELS
    ):
        return False
    tenant_id = row["tenant_id"]
    steps = escalations.fallback_steps(tx.conn, tenant_id, note_id)
    if not steps:
        return False
    if trigger == "unknown":
        bound = steps[0]["unknown_after_s"]
        if bound is None or (tx.now - row["created_at"]).total_seconds() < bound:
            return False
    note = notes.find(tx.conn, tenant_id, note_id)
    if note is None or note["state"] != "open":
        return False  # handled meanwhile: the close cancels the rungs anyway
    if escalations.reaches_elsewhere(tx.conn, tenant_id, note_id, PERSON_CHANNELS, row["id"]):
        return False
    user_id, urgency = note["recipient_user_id"], note["urgency"]
    consent = destinations.consent_of(tx.conn, tenant_id, user_id)
    usable = {
        channel
        for channel in offered(core.settings) & set(PERSON_CHANNELS)
        if urgency in consented_urgencies(consent, channel)
        and destinations.destination_ids(tx.conn, channel, tenant_id, user_id)
    }
    choice = choose_fallback(
        row["channel"], trigger, [(s["step_no"], s["channel"]) for s in steps], usable
    )
    if choice is None:
        return False
    step = next(s for s in steps if s["step_no"] == choice.step_no)
    fire(core, tx, step, note, trigger=trigger, because=choice.reason)
    labels = (note["attention_type"], row["channel"], choice.channel, trigger)
    tx.after_commit.append(lambda: metrics.FALLBACKS.labels(*labels).inc())
    log.info(
        "notification.fell_back",
        notification_id=note_id,
        delivery_id=row["id"],
        from_channel=row["channel"],
        to_channel=choice.channel,
        trigger=trigger,
    )
    return True
