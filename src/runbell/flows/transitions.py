"""One judged transition applied inside the caller's transaction.

:func:`apply` is the one way a run's state moves, whoever moved it (a signal, a
reconciliation, an input request opened or answered): the run row, its immutable history
row, the attention the policy decides, and the feed events, all in ``tx``.

Invariants kept here (DESIGN §2):

- 1 and 12: the notification, its outbox rows and the feed event commit with the
  transition (``raise_attention`` inserts at most one notification per recipient, run,
  version and attention type).
- 2: callers judge first (``domain.runs.judge``); terminal states are absorbing.
- 9: every applied transition bumps the version and supersedes the run's older actionable
  notifications; leaving ``input_required`` cancels its pending requests.
- 4: each transition gets its own version and history row; nothing is merged.
- 16: reaching ``cancelled`` stores what was kept and what stays uncertain
  (``flows.cancel_outcome``) and that text is the notification's reason; the policy sees
  ``cancelled_by_owner`` when a person with the run's authority asked.
- 13: a transition restarts the run's stall clock and ends an open stall episode
  (``flows.stalls``: the stalled notification resolves, ``run.recovered``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NotRequired, TypedDict

import structlog

from runbell.domain.channels import offered
from runbell.domain.policy import TransitionFacts
from runbell.domain.records import Notification, ReportedError, Run, RunChanges, RunReport
from runbell.domain.runs import AttentionType, RunState, attention_for, is_terminal
from runbell.flows import cancel_outcome, completion, dependencies, review, stalls, views
from runbell.flows.attention import (
    RequestLink,
    close_notification,
    raise_attention,
    supersede_actionable,
)
from runbell.flows.context import Core
from runbell.flows.operation_views import OperationsSummary
from runbell.flows.policy import policy_in
from runbell.store import amendments, runs
from runbell.store import input_requests as requests
from runbell.store import notifications as notes
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)


#: The ``run.transitioned`` payload: the run's thin view, where it came from, why, the
#: notifications raised and, for a finished run, its operations ("from" is a keyword).
TransitionEvent = TypedDict(
    "TransitionEvent",
    {
        "run_id": str,
        "state": str,
        "version": int,
        "kind": str | None,
        "terminal": bool,
        "stop_reason": str | None,
        "report": RunReport | None,
        "from": str,
        "reason": str | None,
        "notification_ids": list[str],
        "operations": NotRequired[OperationsSummary],
        "outcome": NotRequired[str | None],
    },
)


def error_facts(error: ReportedError | None) -> TransitionFacts:
    error = error or {}
    return {
        "error_retryable": bool(error.get("retryable")),
        "error_user_action": bool(error.get("user_action_required")),
        "data_inconsistent": bool(error.get("data_inconsistent")),
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class TransitionRequest:
    """One judged move of a run, as its caller knows it (a signal, a reconciliation, an
    input request opened or answered, a cancellation request).

    ``request`` links the ``input_required`` notification to the input request that
    caused it; ``kind`` is ``request`` when a new request replaces a pending one without
    a change of state (still a new version, so older approvals are stale).
    """

    state: str
    sequence: int | None
    source_id: str | None
    event_id: str | None
    reason: str | None
    error: ReportedError | None
    effects_verified: bool | None
    reported_at: datetime | None = None
    report: RunReport | None = None
    kind: str = "state"
    request: RequestLink | None = None
    #: Who or what caused it (``flows.ownership.actor_of``; a source, a sweep); recorded
    #: on the history row. Never a secret.
    actor: dict[str, str] | None = None


@dataclass
class Moving:
    """A transition on its way through the steps of :func:`apply`: what each step reads
    from the ones before it."""

    core: Core
    tx: Tx
    move: TransitionRequest
    before: Run  # the run as it was
    run: Run  # the run as it is becoming
    version: int
    note_reason: str | None  # the notification's reason (the ledger or a cancellation may say more)
    ids: list[str] = field(default_factory=list)  # notifications raised
    event: TransitionEvent | None = None  # run.transitioned, once judged
    judged: completion.Judged | None = None
    open_notes: list[Notification] = field(default_factory=list)
    superseded: set[str] = field(default_factory=set)
    facts: TransitionFacts = field(default_factory=lambda: TransitionFacts())
    decision: dict[str, Any] | None = None


def apply(core: Core, tx: Tx, run: Run, move: TransitionRequest) -> tuple[Run, list[str]]:
    """Apply one judged transition, inside ``tx``: the steps below, in this order (each
    reads what the ones before it decided). Returns the run as it is now and the ids of
    the notifications raised."""
    m = Moving(core, tx, move, run, run, run.version + 1, move.reason)
    move_run(m)  # the run row: state, version, times, stall clock
    judge_completion(m)  # a terminal move: what the run's operations say
    announce(m)  # run.transitioned first, so the feed reads cause before effect
    supersede(m)  # older actionable notifications, the stall episode, pending requests
    settle_cancellation(m)  # a cancelled run: what was kept, who asked
    notify(m)  # the attention the policy decides (with the owner's presence)
    close_moot(m)  # a finished run: mismatch alerts and amendments no longer apply
    record_history(m)  # the immutable history row, with the policy's decision
    log.debug(
        "run.transitioned",
        run_id=m.run.run_id,
        from_state=m.before.state,
        to_state=move.state,
        version=m.version,
        notifications=len(m.ids),
    )
    return m.run, m.ids


def run_changes(run: Run, move: TransitionRequest, version: int, now: datetime) -> RunChanges:
    """The run columns a move sets, but the stall clock's (pure)."""
    changes: RunChanges = {"state": move.state, "version": version, "updated_at": now}
    if move.sequence is not None:
        changes["sequence"] = move.sequence
    if move.report:
        changes["report"] = {**(run.report or {}), **move.report}
    if move.state == "working" and run.started_at is None:
        changes["started_at"] = now
    if is_terminal(move.state):
        changes.update({"finished_at": now, "stop_reason": move.reason, "error": move.error})
    return changes


def move_run(m: Moving) -> None:
    """Write the run row. Any accepted signal is a sign of life: the stall clock
    restarts (and :func:`supersede` ends an open episode)."""
    changes = run_changes(m.before, m.move, m.version, m.tx.now)
    changes.update(stalls.restart_clock(m.core, m.tx, m.before, m.move.state))
    m.run = replace(m.before, **changes)
    runs.move_run(m.tx.conn, m.run)


def judge_completion(m: Moving) -> None:
    """A terminal move carries its operations' counts; a completion with operations is
    verified, or needs review, by the ledger (``flows.completion``)."""
    if is_terminal(m.move.state):
        m.judged = completion.judge(m.tx, m.run, m.move.state, m.move.effects_verified)
    m.event = transition_event(m.run, m.before.state, m.move.reason, m.ids, m.judged)
    if m.judged is not None:
        if m.judged.outcome != m.run.outcome:  # a plain completion keeps None: no copy
            m.run = replace(m.run, outcome=m.judged.outcome)
        if m.judged.reason is not None:
            m.note_reason = m.judged.reason


def transition_event(
    run: Run,
    before: str,
    reason: str | None,
    ids: list[str],
    judged: completion.Judged | None,
) -> TransitionEvent:
    """The ``run.transitioned`` payload (pure). ``ids`` is filled in as notifications are
    raised, before the event is written at commit."""
    event: TransitionEvent = {
        **views.run_event(run),  # type: ignore[typeddict-item]  # (has neither optional key)
        "from": before,
        "reason": reason,
        "notification_ids": ids,
    }
    if judged is not None:
        event["operations"] = judged.operations
        event["outcome"] = judged.outcome
    return event


def announce(m: Moving) -> None:
    assert m.event is not None  # judge_completion made it
    m.tx.emit(m.run.tenant_id, PendingEvent("run.transitioned", m.event, run_id=m.run.run_id))


def supersede(m: Moving) -> None:
    """Invariant 9: the run's older actionable notifications close (read once: used here
    and by :func:`close_moot`); an open stall episode ends; leaving ``input_required``
    cancels the requests nobody can answer any more."""
    tenant_id, run_id = m.run.tenant_id, m.run.run_id
    m.open_notes = notes.open_for_run(m.tx.conn, tenant_id, run_id)
    m.superseded = set(supersede_actionable(m.tx, tenant_id, run_id, m.version, m.open_notes))
    stalls.end_episode(m.tx, m.before, m.run, f"run is now {m.move.state}", m.open_notes)
    if m.before.state == RunState.INPUT_REQUIRED and m.move.state != RunState.INPUT_REQUIRED:
        cancelled = cancel_pending(m.tx, m.run)
        if cancelled:  # runs that depend on one of them are told (flows.dependencies)
            dependencies.tell_dependents(m.core, m.tx, tenant_id, cancelled)


def settle_cancellation(m: Moving) -> None:
    """Invariant 16: a cancelled run's notification says what was kept and what stays
    uncertain, and the policy learns whether a person asked."""
    m.facts = {"effects_verified": m.move.effects_verified, **error_facts(m.move.error)}
    if m.move.state == RunState.CANCELLED:
        m.run = cancel_outcome.settle(m.tx, m.run)
        m.facts["cancelled_by_owner"] = cancel_outcome.requested_by_person(m.run)
        summary = m.run.cancel_summary
        m.note_reason = None if summary is None else summary["text"]


def attention_of(
    state: str, effects_verified: bool | None, judged: completion.Judged | None
) -> AttentionType | None:
    """What the move asks of people (pure): the ledger's judgment wins over the state's."""
    if judged is not None and judged.attention is not None:
        return AttentionType(judged.attention)
    return attention_for(state, effects_verified)


def notify(m: Moving) -> None:
    """The policy decides; at most one notification per recipient, run, version and type
    (invariant 1), with its outbox rows, in this transaction (invariant 12)."""
    attention = attention_of(m.move.state, m.move.effects_verified, m.judged)
    if attention is None:
        return
    tenant_id, core = m.run.tenant_id, m.core
    request = m.move.request
    if attention is AttentionType.NEEDS_REVIEW and request is None and m.judged is not None:
        # The person now has a decision to make: it comes as a request (flows.review).
        counts = m.judged.operations["counts"]
        request = review.open_review(m.tx, m.run, counts, m.version)
    # The owner's watching holds back pushes only when the owner is among those told (a
    # request that names its own approvers, without the owner, is theirs: issue 18).
    answerers = m.move.request.answerers if m.move.request is not None else ()
    told = not answerers or m.run.owner_user_id in answerers
    raised = raise_attention(
        m.tx,
        policy_in(core, m.tx, tenant_id),
        m.run,
        attention=attention.value,
        version=m.version,
        facts=m.facts,
        reason=m.note_reason,
        owner_present=told and core.presence.is_present(tenant_id, m.run.owner_user_id, m.tx.conn),
        request=request,
        channels=_offered_in(core, m.tx),
        new_version=True,  # m.version is the one this transaction just gave the run
    )
    m.decision = raised.decision.as_dict()
    if raised.notification_id:
        m.ids.append(raised.notification_id)
    if raised.note is not None:
        m.tx.written[raised.note["id"]] = raised.note
    for other in raised.others:  # a request's other answerers (issue 18 item 4)
        m.ids.append(other["id"])
        m.tx.written[other["id"]] = other


def _offered_in(core: Core, tx: Tx) -> frozenset[str]:
    """``domain.channels.offered``, read once per transaction (a batch of signals shares
    it; a setting changed since — the demo's mail sink — is seen by the next batch)."""
    key = ("offered",)
    if key not in tx.cache:
        tx.cache[key] = offered(core.settings)
    found: frozenset[str] = tx.cache[key]
    return found


def close_moot(m: Moving) -> None:
    """A finished run: a mismatch alert about it is moot, and a proposed change can no
    longer apply. (A notification this move raised is not among ``open_notes``.)"""
    if not is_terminal(m.move.state):
        return
    for note in m.open_notes:
        if note["id"] not in m.superseded and note["attention_type"] in _MOOT_WHEN_FINISHED:
            close_notification(m.tx, note, "resolved", f"run is {m.move.state}")
    if any(note["attention_type"] == "amendment" for note in m.open_notes):
        cancelled = _cancel_amendments(m.tx, m.run)
        dependencies.tell_dependents(m.core, m.tx, m.run.tenant_id, cancelled)


def record_history(m: Moving) -> None:
    """Invariant 4: every transition its own version and history row (written at commit,
    batched with the other units of the writer's transaction)."""
    move = m.move
    runs.defer_transition(
        m.tx,
        {
            "tenant_id": m.run.tenant_id,
            "run_id": m.run.run_id,
            "version": m.version,
            "kind": move.kind,
            "from_state": m.before.state,
            "to_state": move.state,
            "source_id": move.source_id,
            "event_id": move.event_id,
            "sequence": move.sequence,
            "reason": move.reason,
            "decision": m.decision,
            "at": m.tx.now,
            "reported_at": move.reported_at,
            "actor": move.actor,
        },
    )


# Open notifications that a run's finish makes moot: a mismatch about its state, and a
# proposed change to it (flows.amendments).
_MOOT_WHEN_FINISHED = ("mismatch", "amendment")


def _cancel_amendments(tx: Tx, run: Run) -> list[str]:
    """The run finished with proposed changes pending: they can no longer apply. (Looked
    for only when one had an open notification, so an ordinary finish reads nothing more;
    one that had none is cancelled when someone answers it.)"""
    tenant_id = run.tenant_id
    cancelled = []
    for pending in amendments.for_run(tx.conn, tenant_id, run.run_id):
        requests.close(tx.conn, tenant_id, pending.input_request_id, "cancelled", tx.now)
        amendments.decide(tx.conn, tenant_id, pending.id, "cancelled", by=None, at=tx.now)
        cancelled.append(pending.input_request_id)
    return cancelled


def cancel_pending(tx: Tx, run: Run) -> list[str]:
    """The run left ``input_required`` without an answer (a signal, a reconciliation):
    its pending requests can no longer be answered. Called by the core's transition."""
    tenant_id, run_id = run.tenant_id, run.run_id
    cancelled = []
    for req in requests.pending_for_run(tx.conn, tenant_id, run_id):
        if not requests.close(tx.conn, tenant_id, req.id, "cancelled", tx.now):
            continue
        cancelled.append(req.id)
        # Its notifications belong to an older run version: the transition's own
        # supersede_actionable has closed them already.
        tx.emit(
            tenant_id,
            PendingEvent(
                "input_request.cancelled",
                {
                    "input_request_id": req.id,
                    "run_id": run_id,
                    "state": "cancelled",
                    "reason": f"run is now {run.state}",
                    "version": run.version,
                    "request_version": req.version,
                },
                run_id=run_id,
            ),
        )
    return cancelled
