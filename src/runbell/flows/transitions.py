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

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import structlog

from runbell.domain.runs import AttentionType, RunState, attention_for, is_terminal
from runbell.flows import cancel_outcome, completion, stalls, views
from runbell.flows.attention import (
    RequestLink,
    close_notification,
    raise_attention,
    supersede_actionable,
)
from runbell.flows.context import Core
from runbell.flows.policy import policy_in
from runbell.store import amendments, runs
from runbell.store import input_requests as requests
from runbell.store import notifications as notes
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)


def error_facts(error: Mapping[str, Any] | None) -> dict[str, bool]:
    error = error or {}
    return {
        "error_retryable": bool(error.get("retryable")),
        "error_user_action": bool(error.get("user_action_required")),
        "data_inconsistent": bool(error.get("data_inconsistent")),
    }


def apply(
    core: Core,
    tx: Tx,
    run: dict[str, Any],
    state: str,
    *,
    sequence: int | None,
    source_id: str | None,
    event_id: str | None,
    reason: str | None,
    error: dict[str, Any] | None,
    effects_verified: bool | None,
    reported_at: datetime | None = None,
    report: dict[str, Any] | None = None,
    kind: str = "state",
    request: RequestLink | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Apply one judged transition: run row, history, attention, feed. Inside ``tx``.

    ``request`` links the ``input_required`` notification to the input request that
    caused it; ``kind`` is ``request`` when a new request replaces a pending one
    without a change of state (still a new version, so older approvals are stale).
    """
    tenant_id, run_id = run["tenant_id"], run["run_id"]
    version = run["version"] + 1
    changes: dict[str, Any] = {"state": state, "version": version, "updated_at": tx.now}
    if sequence is not None:
        changes["sequence"] = sequence
    if report:
        changes["report"] = {**(run.get("report") or {}), **report}
    if state == "working" and run.get("started_at") is None:
        changes["started_at"] = tx.now
    if is_terminal(state):
        changes.update(finished_at=tx.now, stop_reason=reason, error=error)
    # Any accepted signal is a sign of life: the stall clock restarts (and ends an episode).
    changes.update(stalls.restart_clock(core, tx, run, state))
    before, before_run = run["state"], run
    run = {**run, **changes}
    runs.move_run(tx.conn, run)

    ids: list[str] = []
    # --- completion owned by the run (issue 10, flows.completion) ------------------------
    # A terminal transition carries its operations' counts (run.finished says what they
    # count); a completion with operations is verified, or needs review, by the ledger.
    judged = completion.judge(tx, run, state, effects_verified) if is_terminal(state) else None
    note_reason = reason
    event = {**views.run_event(run), "from": before, "reason": reason, "notification_ids": ids}
    if judged is not None:
        run = {**run, "outcome": judged.outcome}
        event["operations"] = judged.operations
        event["outcome"] = judged.outcome
        if judged.reason is not None:
            note_reason = judged.reason
    # --- end of the completion block ---------------------------------------------------
    # The transition's own event goes first, so the feed reads cause before effect.
    tx.emit(tenant_id, PendingEvent("run.transitioned", event, run_id=run_id))
    open_notes = notes.open_for_run(tx.conn, tenant_id, run_id)  # read once, used twice
    superseded = set(supersede_actionable(tx, tenant_id, run_id, version, open_notes))
    stalls.end_episode(tx, before_run, run, f"run is now {state}", open_notes)
    if before == RunState.INPUT_REQUIRED and state != RunState.INPUT_REQUIRED:
        cancel_pending(tx, run)  # nobody can answer those any more
    decision = None
    facts: dict[str, Any] = {"effects_verified": effects_verified, **error_facts(error)}
    if state == RunState.CANCELLED:
        # Cancellation is a request with an outcome (invariant 16): the notification says
        # what was kept and what stays uncertain, and the policy who asked.
        run = cancel_outcome.settle(tx, run)
        facts["cancelled_by_owner"] = cancel_outcome.requested_by_person(run)
        note_reason = run["cancel_summary"]["text"]
    attention = attention_for(state, effects_verified)
    if judged is not None and judged.attention is not None:
        attention = AttentionType(judged.attention)
    if attention is not None:
        raised = raise_attention(
            tx,
            policy_in(core, tx, tenant_id),
            run,
            attention=attention.value,
            version=version,
            facts=facts,
            reason=note_reason,
            owner_present=core.presence.is_present(tenant_id, run["owner_user_id"], tx.conn),
            request=request,
            email=bool(core.settings.smtp_host),
        )
        decision = raised.decision.as_dict()
        if raised.notification_id:
            ids.append(raised.notification_id)
        if raised.note is not None:
            tx.written[raised.note["id"]] = raised.note
    if is_terminal(state):
        # A mismatch alert about a run that has now finished is moot. (A notification
        # this transition raised is not among ``open_notes``: they were read before it.)
        for note in open_notes:
            if note["id"] not in superseded and note["attention_type"] in _MOOT_WHEN_FINISHED:
                close_notification(tx, note, "resolved", f"run is {state}")
        if any(note["attention_type"] == "amendment" for note in open_notes):
            _cancel_amendments(tx, run)  # a finished run is not amended
    runs.defer_transition(
        tx,
        {
            "tenant_id": tenant_id,
            "run_id": run_id,
            "version": version,
            "kind": kind,
            "from_state": before,
            "to_state": state,
            "source_id": source_id,
            "event_id": event_id,
            "sequence": sequence,
            "reason": reason,
            "decision": decision,
            "at": tx.now,
            "reported_at": reported_at,
        },
    )
    log.debug(
        "run.transitioned",
        run_id=run_id,
        from_state=before,
        to_state=state,
        version=version,
        notifications=len(ids),
    )
    return run, ids


# Open notifications that a run's finish makes moot: a mismatch about its state, and a
# proposed change to it (flows.amendments).
_MOOT_WHEN_FINISHED = ("mismatch", "amendment")


def _cancel_amendments(tx: Tx, run: dict[str, Any]) -> None:
    """The run finished with proposed changes pending: they can no longer apply. (Looked
    for only when one had an open notification, so an ordinary finish reads nothing more;
    one that had none is cancelled when someone answers it.)"""
    tenant_id = run["tenant_id"]
    for pending in amendments.for_run(tx.conn, tenant_id, run["run_id"]):
        requests.close(tx.conn, tenant_id, pending.input_request_id, "cancelled", tx.now)
        amendments.decide(tx.conn, tenant_id, pending.id, "cancelled", by=None, at=tx.now)


def cancel_pending(tx: Tx, run: dict[str, Any]) -> list[str]:
    """The run left ``input_required`` without an answer (a signal, a reconciliation):
    its pending requests can no longer be answered. Called by the core's transition."""
    tenant_id, run_id = run["tenant_id"], run["run_id"]
    cancelled = []
    for req in requests.pending_for_run(tx.conn, tenant_id, run_id):
        if not requests.close(tx.conn, tenant_id, req["id"], "cancelled", tx.now):
            continue
        cancelled.append(req["id"])
        # Its notifications belong to an older run version: the transition's own
        # supersede_actionable has closed them already.
        tx.emit(
            tenant_id,
            PendingEvent(
                "input_request.cancelled",
                {
                    "input_request_id": req["id"],
                    "run_id": run_id,
                    "state": "cancelled",
                    "reason": f"run is now {run['state']}",
                    "version": run["version"],
                    "request_version": req["version"],
                },
                run_id=run_id,
            ),
        )
    return cancelled
