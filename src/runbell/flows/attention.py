"""From an accepted transition to durable attention, inside the caller's transaction.

:func:`raise_attention` asks the policy, writes at most one notification per
(recipient, run, version, attention type), its outbox rows and its feed event, and
supersedes the run's older actionable notifications. It never commits: the flow that
called it owns the transaction, so the transition, the notification and the
outbox commit together or not at all (invariant 12). A decision's escalation ladder is
written here too, as ``escalation_steps`` rows (fired by ``flows.escalation``), and
:func:`close_notification` — the one way a notification closes — cancels them (inv. 6).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict

import structlog

from runbell import metrics
from runbell.domain import digests as digest_rules
from runbell.domain.channels import INBOX, PERSON_CHANNELS, consented_urgencies
from runbell.domain.escalation import held_back, schedule
from runbell.domain.policy import Decision, Facts, Policy, TransitionFacts
from runbell.domain.records import Delivery, Notification, Run
from runbell.flows import pacing
from runbell.i18n import N_
from runbell.ids import new_id
from runbell.store import accounts, destinations, digests, escalations, outbox
from runbell.store import notifications as notes
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)

# Lock-screen safe texts (invariant 11): no titles, no arguments, no run details. Stored
# and kept in English; flows.neutral_words words them in the recipient's language.
NEUTRAL_BODY = {
    "input_required": N_("A run is waiting for your decision. Open Runbell to see the request."),
    "failed": N_("A run stopped with an error. Open Runbell for details."),
    "completed": N_("A run finished. Open Runbell for the result."),
    "needs_review": N_("A run finished, but its effects need a check. Open Runbell to review."),
    "stalled": N_("A run has not reported progress for a while. Open Runbell to check on it."),
    "cancelled": N_("A run was cancelled. Open Runbell for what was kept."),
    "mismatch": N_("What a run reported and its actual state disagree. Open Runbell to check."),
    "digest": N_("Several runs finished. Open Runbell to see them."),
    "amendment": N_("Someone proposed a change to one of your runs. Open Runbell to decide."),
    "dependency": N_("A proposal one of your runs depends on changed. Open Runbell to see it."),
}

NEUTRAL_SUMMARY = {
    "input_required": N_("A run needs your input"),
    "failed": N_("A run failed"),
    "completed": N_("A run finished"),
    "needs_review": N_("A run finished and needs review"),
    "stalled": N_("A run has stopped making progress"),
    "cancelled": N_("A run was cancelled"),
    "mismatch": N_("A run's reported state could not be confirmed"),
    "digest": N_("Several runs finished"),
    "amendment": N_("A change to your run was proposed"),
    "dependency": N_("A proposal your run depends on changed"),
}

# What replaces a handled notification's push on every device that showed it (inv. 11).
RETRACTED_TITLE = N_("Handled")
RETRACTED_BODY = N_("This no longer needs your attention.")
# Closes by a person acting (an acknowledgement, an answer, a recovery that resolves it)
# replace the push they made obsolete; an expiry or a newer alert for the run does not
# need to (the newer alert replaces it by its tag anyway).
RETRACT_ON = frozenset({"acknowledged", "resolved"})


@dataclass(frozen=True)
class RequestLink:
    """The input request an ``input_required`` notification points at.

    It gives the notification its ``input_request_id`` and expiry, and the policy its
    ``blocks_work`` and ``has_expiry`` facts (DESIGN §7: time-sensitive when it blocks
    work and expires).
    """

    id: str
    expires_at: datetime | None
    blocks_work: bool = True
    # Who is told (issue 18 item 4): the people who may answer it; empty: the run's owner.
    answerers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Raised:
    decision: Decision
    notification_id: str | None
    created: bool
    note: Notification | None = None  # the notification as written, when created here
    # The notifications written for the other recipients of a request (its answerers).
    others: tuple[Notification, ...] = ()


class NotificationEvent(TypedDict):
    """The feed/webhook view of a notification: ids and labels, nothing sensitive."""

    notification_id: str
    run_id: str
    attention_type: str
    urgency: str
    decision: str
    state: str
    transition_version: int
    summary: str


def notification_event(note: Notification) -> NotificationEvent:
    """The feed/webhook view of a notification: ids and labels, nothing sensitive."""
    return {
        "notification_id": note["id"],
        "run_id": note["run_id"],
        "attention_type": note["attention_type"],
        "urgency": note["urgency"],
        "decision": note["decision"],
        "state": note["state"],
        "transition_version": note["transition_version"],
        "summary": note["summary"],
    }


def close_notification(tx: Tx, note: Notification, state: str, reason: str) -> bool:
    """Close an open notification, cancel its queued deliveries, and tell the feed.

    The one way notifications close, so every close leaves the same trace: its pending
    escalation steps are cancelled here too, and when a person handled it the web pushes
    it already showed are replaced by a neutral "handled" one (same tag/Topic).
    """
    if not notes.close(tx.conn, note["tenant_id"], note["id"], state, reason, tx.now):
        return False
    escalations.cancel_pending(tx.conn, note["tenant_id"], note["id"], tx.now, f"{state}: {reason}")
    closed: Notification = {**note, "state": state, "closed_at": tx.now, "closed_reason": reason}
    if state in RETRACT_ON:
        shown = escalations.delivered_collapsing(tx.conn, note["tenant_id"], note["id"])
        if escalations.add_retractions(tx.conn, closed, shown, tx.now):
            tx.wake_outbox = True
    tx.emit(
        note["tenant_id"],
        PendingEvent(
            "notification.closed",
            {**notification_event(closed), "reason": reason},
            run_id=note["run_id"],
            notification_id=note["id"],
            user_id=note["recipient_user_id"],
        ),
    )
    log.debug("notification.closed", notification_id=note["id"], state=state)
    return True


def supersede_actionable(
    tx: Tx,
    tenant_id: str,
    run_id: str,
    version: int,
    open_notes: list[Notification] | None = None,
) -> list[str]:
    """Close the run's open actionable notifications from older versions as superseded.

    ``open_notes``: the run's open notifications, when the caller has read them already."""
    if open_notes is None:
        open_notes = notes.open_for_run(tx.conn, tenant_id, run_id)
    return [
        note["id"]
        for note in open_notes
        if note["attention_type"] in notes.ACTIONABLE_TYPES
        and note["transition_version"] < version
        and close_notification(tx, note, "superseded", f"run moved to version {version}")
    ]


def raise_attention(
    tx: Tx,
    policy: Policy,
    run: Run,
    *,
    attention: str,
    version: int,
    facts: TransitionFacts,
    reason: str | None,
    owner_present: bool,
    request: RequestLink | None = None,
    channels: Collection[str] = PERSON_CHANNELS,
    new_version: bool = False,
) -> Raised:
    """The policy decides what ``attention`` on ``run`` at ``version`` calls for; when
    it notifies, the one notification (invariant 1), its outbox rows, its digest item or
    escalation ladder and its feed event, all in ``tx`` (invariant 12). ``channels``:
    the person channels this server sends on (``domain.channels.offered``: email only
    with SMTP configured); no row is queued for another — the worker would only mark it
    skipped, two writes for nothing. ``new_version``: ``tx`` moved the run to ``version``
    itself (``store.notifications.insert_once``)."""
    facts = policy_facts(facts, request)
    decision = decide(tx, policy, run, attention, facts, owner_present)
    if not decision.notifies:
        _suppressed(tx, run, attention, decision)
        return Raised(decision, None, False)
    # A request is told to the people who may answer it when it names them; anything
    # else (and a request that names nobody) to the run's owner.
    recipients = (request.answerers if request is not None else ()) or (run.owner_user_id,)
    raised = [
        _raise_for(
            tx, run, attention, version, decision, reason, request, channels, recipient, new_version
        )
        for recipient in recipients
    ]
    first = raised[0]
    others = tuple(r.note for r in raised[1:] if r.note is not None)
    return Raised(decision, first.notification_id, first.created, first.note, others)


def _raise_for(
    tx: Tx,
    run: Run,
    attention: str,
    version: int,
    decision: Decision,
    reason: str | None,
    request: RequestLink | None,
    channels: Collection[str],
    recipient: str,
    new_version: bool = False,
) -> Raised:
    """The one notification for ``recipient`` (invariant 1), its outbox rows, follow-ups
    and feed event."""
    if _cached(tx, ("role", run.tenant_id, recipient), accounts.membership_role) is None:
        # The recipient left the tenant: nobody to tell. The decision stays on the transition.
        log.info("attention.recipient_gone", run_id=run.run_id, rule_id=decision.rule_id)
        return Raised(decision, None, False)
    values = notification_row(run, attention, version, decision, reason, request, tx.now)
    values["recipient_user_id"] = recipient
    note_id, created = notes.insert_once(tx.conn, values, new_version=new_version)
    if not created:
        tx.after_commit.append(metrics.bound(metrics.DUPLICATES, "notification").inc)
        return Raised(decision, note_id, False)
    # Over its throttle (counted once the notification exists), a push is folded.
    sent = pacing.throttled(tx, run, values, decision) or decision
    tx.after_commit.append(metrics.bound(metrics.NOTIFICATIONS, attention, sent.kind).inc)
    queue_deliveries(tx, values, sent, channels)
    follow_up(tx, values, sent, channels)
    announce_created(tx, values)
    return Raised(decision, note_id, True, note=values)


def policy_facts(facts: TransitionFacts, request: RequestLink | None) -> TransitionFacts:
    """The transition's facts, and the request's when it links one (pure): DESIGN §7
    calls an alert time-sensitive when it blocks work and expires."""
    if request is None:
        return facts
    return {
        **facts,
        "blocks_work": request.blocks_work,
        "has_expiry": request.expires_at is not None,
    }


def decide(
    tx: Tx,
    policy: Policy,
    run: Run,
    attention: str,
    facts: TransitionFacts,
    owner_present: bool,
) -> Decision:
    """Ask the policy, with what it may need of the run and the owner's recent alerts."""
    recent = 0
    if attention == "completed" and policy.recent_completions_cap:
        # Counted only as far as a rule can tell the difference (Policy.count_cap).
        recent = _recent(
            tx, run.tenant_id, run.owner_user_id, "completed", policy.recent_completions_cap
        )
    started = run.started_at
    return policy.decide(
        Facts(
            attention=attention,
            notify_on_complete=bool(run.notify_on_complete),
            duration_s=None if started is None else (tx.now - started).total_seconds(),
            owner_present=owner_present,
            recent_completions=recent,
            **facts,
        )
    )


def _suppressed(tx: Tx, run: Run, attention: str, decision: Decision) -> None:
    tx.after_commit.append(metrics.bound(metrics.SUPPRESSED, attention, decision.kind).inc)
    log.debug(
        "attention.no_notification",
        run_id=run.run_id,
        rule_id=decision.rule_id,
        decision=decision.kind,
    )


def notification_row(
    run: Run,
    attention: str,
    version: int,
    decision: Decision,
    reason: str | None,
    request: RequestLink | None,
    now: datetime,
) -> Notification:
    """The notification as it is inserted (pure but for its new id). Its summary is the
    neutral text of its type (invariant 11); it expires with the request it points at,
    else after the policy's expiry."""
    expires_at = None
    if decision.expires_after_s is not None:
        expires_at = now + timedelta(seconds=decision.expires_after_s)
    if request is not None and request.expires_at is not None:
        expires_at = request.expires_at
    subject = run.subject or {}
    subject_version = None
    if subject.get("type") and subject.get("id"):
        subject_version = f"{subject['type']}:{subject['id']}:{subject.get('version', '')}"
    return {
        "id": new_id("ntf"),
        "tenant_id": run.tenant_id,
        "recipient_user_id": run.owner_user_id,
        "run_id": run.run_id,
        "transition_version": version,
        "attention_type": attention,
        "urgency": decision.urgency or "low",
        "decision": decision.kind,
        "rule_id": decision.rule_id,
        "inputs": decision.inputs,
        "summary": NEUTRAL_SUMMARY.get(attention, "A run changed"),
        "subject_version": subject_version,
        "input_request_id": request.id if request is not None else None,
        "reason": (reason or "")[:500] or None,
        "expires_at": expires_at,
        "state": "open",
        "closed_at": None,
        "closed_reason": None,
        "created_at": now,
        "first_delivered_at": None,
        "first_seen_at": None,
    }


def queue_deliveries(
    tx: Tx, note: Notification, decision: Decision, channels: Collection[str]
) -> None:
    """The outbox rows: the inbox always; the person's channels when the policy pushes."""
    tenant_id, note_id, recipient = note["tenant_id"], note["id"], note["recipient_user_id"]
    rows = [outbox.delivery_row(tenant_id, note_id, INBOX, recipient, "accepted", tx.now)]
    if decision.kind == "push":
        rows += _push_deliveries(
            tx,
            tenant_id,
            recipient,
            note_id,
            decision.urgency or "low",
            channels=channels,
            held=held_back(decision.escalation),
        )
    for row in rows:
        row.update({"run_id": note["run_id"], "urgency": note["urgency"]})
    outbox.add_deliveries(tx.conn, rows)


def follow_up(tx: Tx, note: Notification, decision: Decision, channels: Collection[str]) -> None:
    """What comes later, scheduled now in this transaction so a crash cannot lose it: a
    digest decision's item, an escalation ladder's steps."""
    if decision.kind == "digest":
        _collect(tx, decision, note)
    if decision.escalation and decision.kind in ("push", "inbox"):
        ladder = [
            (no, step.channel, step.after_s, due)
            for no, step, due in schedule(decision.escalation, tx.now)
            if step.channel in channels
        ]
        fallback = decision.fallback
        escalations.add_steps(
            tx.conn,
            note,
            ladder,
            on_failure=fallback is not None,
            unknown_after_s=None if fallback is None else fallback.unknown_after_s,
        )


def announce_created(tx: Tx, note: Notification) -> None:
    tx.emit(
        note["tenant_id"],
        PendingEvent(
            "notification.created",
            notification_event(note),
            run_id=note["run_id"],
            notification_id=note["id"],
            user_id=note["recipient_user_id"],
        ),
    )
    log.debug(
        "notification.created",
        notification_id=note["id"],
        run_id=note["run_id"],
        attention_type=note["attention_type"],
        rule_id=note["rule_id"],
        decision=note["decision"],
    )


def _collect(tx: Tx, decision: Decision, note: Notification) -> None:
    """A digest decision: the item waits for its recipient's digest of its key, written
    in this transaction (its own notification stays in the inbox, never pushed; the
    digest that lists it is what goes out on the channels — ``flows.digests``)."""
    start, end = pacing.digest_window(tx, decision, note["tenant_id"], note["recipient_user_id"])
    digests.defer_item(
        tx,
        {
            "id": new_id("dgi"),
            "tenant_id": note["tenant_id"],
            "recipient_user_id": note["recipient_user_id"],
            "digest_key": decision.digest_key or note["attention_type"],
            "window_start": start,
            "closes_at": end,
            "max_items": decision.digest_max_items or digest_rules.DEFAULT_MAX_ITEMS,
            "run_id": note["run_id"],
            "transition_version": note["transition_version"],
            "attention_type": note["attention_type"],
            "urgency": note["urgency"],
            "rule_id": note["rule_id"],
            "notification_id": note["id"],
            "created_at": tx.now,
        },
    )


def _recent(tx: Tx, tenant_id: str, recipient: str, attention: str, up_to: int) -> int:
    """Notifications of ``attention`` for ``recipient`` in the last hour, counted up to
    ``up_to``: read once per transaction, plus what this transaction wrote since (a batch
    of signals for one person counts each other without a statement each)."""
    key = ("recent", tenant_id, recipient, attention)
    if key not in tx.cache:
        since = tx.now - timedelta(hours=1)
        counted = notes.count_recent(tx.conn, tenant_id, recipient, attention, since, up_to=up_to)
        tx.cache[key] = (counted, len(tx.written))
    counted, seen = tx.cache[key]
    if counted >= up_to:
        return int(counted)
    since = tx.now - timedelta(hours=1)
    later = sum(
        1
        for note in list(tx.written.values())[seen:]
        if note["tenant_id"] == tenant_id
        and note["recipient_user_id"] == recipient
        and note["attention_type"] == attention
        and note["created_at"] >= since
    )
    return int(min(up_to, counted + later))


def _cached(tx: Tx, key: tuple[str, str, str], read: Any) -> Any:
    """A member's fact read once per transaction (a batch of signals shares it)."""
    if key not in tx.cache:
        tx.cache[key] = read(tx.conn, key[1], key[2])
    return tx.cache[key]


def _push_deliveries(
    tx: Tx,
    tenant_id: str,
    user_id: str,
    note_id: str,
    urgency: str,
    *,
    channels: Collection[str],
    held: frozenset[str] = frozenset(),
) -> list[Delivery]:
    """Outbox rows for every person channel of ``channels`` the recipient consented to at
    this urgency, one per destination they have on it, but those ``held`` back for a later
    escalation step.

    Consent, access and quiet hours are checked again at dispatch (they may change
    meanwhile); this only decides which rows exist, so a crash after commit loses none.
    """
    consent = _cached(tx, ("consent", tenant_id, user_id), destinations.consent_of)
    rows = []
    for channel in PERSON_CHANNELS:
        if (
            channel not in channels
            or channel in held
            or urgency not in consented_urgencies(consent, channel)
        ):
            continue
        found = _cached(
            tx,
            (channel, tenant_id, user_id),
            lambda c, t, u, ch=channel: destinations.destination_ids(c, ch, t, u),
        )
        rows += [
            outbox.delivery_row(tenant_id, note_id, channel, dest, "queued", tx.now)
            for dest in found
        ]
    if rows:
        tx.wake_outbox = True
    return rows
