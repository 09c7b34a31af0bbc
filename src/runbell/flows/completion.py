"""Completion owned by the run: what a ``completed`` report means given its operations,
and the review that follows when an operation settles after the run finished.

Called inside the caller's transaction: :func:`judge` by ``flows.transitions.apply`` for
every terminal transition, :func:`review` by ``flows.operations`` after a ledger change.

Invariants kept here (DESIGN §2):

- 3 and 15: a run with operations completes as *verified* only when every operation is
  confirmed (or confirmed absent). Otherwise the attention is ``needs_review`` whose
  reason carries the counts ("9 confirmed, 2 conflicts, 1 uncertain; …") and no
  ``completed`` notification exists; operations still planned or sent make the outcome
  ``unknown`` ("outcome unknown" in the reason), never success.
- 1: a later resolution is one new run version (a ``review`` transition, the state
  unchanged: terminal runs stay terminal) with at most one notification for it; the
  review it replaces is closed as superseded — updated, not duplicated. When the review
  leaves everything confirmed, it is closed as resolved and the success alert the run
  had been refused is raised then, through the policy like any completion.
- 3 (what counts as done): a run whose ``done_when`` names operations is verified only
  when each of those is ``confirmed`` (declared and confirmed: ``absent`` or never
  declared is not done); the reason names the ones that are not.
- 11: only counts, states and operation ids reach notifications and the feed; an
  operation's ``details`` never do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import structlog

from runbell.domain.channels import offered
from runbell.domain.jobs import unmet
from runbell.domain.operations import (
    IN_FLIGHT,
    Completion,
    OpState,
    Outcome,
    counts_text,
    normalized,
    outcome,
)
from runbell.domain.records import Run
from runbell.domain.runs import RunState
from runbell.flows import review as review_request
from runbell.flows.attention import close_notification, raise_attention
from runbell.flows.context import Core
from runbell.flows.operation_views import OperationsSummary
from runbell.flows.policy import policy_in
from runbell.store import notifications as notes
from runbell.store import operations as ledger
from runbell.store import runs
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)

#: Operation states whose ids a review names.
NAMED = ("conflict", "failed", "uncertain", "unresolved", *sorted(IN_FLIGHT))
REASON_MAX = 500
#: Outcomes a later ledger change may still change.
OPEN_OUTCOMES = (Outcome.NEEDS_REVIEW.value, Outcome.UNKNOWN.value)


@dataclass(frozen=True)
class Judged:
    """A terminal transition's operations: what they count, and (for a completion) the
    attention and notification reason they call for, and the outcome to store."""

    operations: OperationsSummary  # the thin summary events carry
    outcome: str | None
    attention: str | None = None  # None: what ``attention_for`` said stands
    reason: str | None = None


def operations_summary(counts: dict[str, int]) -> OperationsSummary:
    counts = normalized(counts)
    return {"counts": counts, "text": counts_text(counts)}


def completion_of(tx: Tx, run: Run, counts: dict[str, int]) -> Completion:
    named = ledger.ids_by_state(tx.conn, run.tenant_id, run.run_id, NAMED)
    excluded = _excluded(tx, run) if counts.get(OpState.NOT_STARTED) else []
    return outcome(counts, named, required_unmet(tx, run, excluded), excluded)


def _excluded(tx: Tx, run: Run) -> list[str]:
    """The run's operations an approved amendment left out (``not_started`` with the
    amendment as evidence; ``flows.amendment_changes.exclude``)."""
    return ledger.excluded_by_amendment(tx.conn, run.tenant_id, run.run_id)


def required_unmet(tx: Tx, run: Run, excluded: list[str] | None = None) -> dict[str, str | None]:
    """The operations the run's ``done_when`` requires that are not confirmed (read only
    for a run whose ``done_when`` names some: other completions read nothing more).
    One an approved amendment ``excluded`` is no longer required: the job changed."""
    required = run.done_when["operations"] if run.done_when else []
    required = [op for op in required if op not in (excluded or [])]
    if not required:
        return {}
    states = (
        ledger.states_of(tx.conn, run.tenant_id, run.run_id, required) if run.has_operations else {}
    )
    return unmet(required, states)


def judge(tx: Tx, run: Run, state: str, effects_verified: bool | None) -> Judged:
    """What the run's operations say about a transition into the terminal ``state``.

    A run without operations keeps today's meaning: ``effects_verified: false`` is a
    ``needs_review`` (outcome ``needs_review``), anything else a plain completion
    (outcome None: nothing was declared to verify)."""
    # A run that never declared an operation has no ledger to read (runs.has_operations).
    counts = ledger.counts(tx.conn, run.tenant_id, run.run_id) if run.has_operations else {}
    summary = operations_summary(counts)
    if state != RunState.COMPLETED:
        return Judged(summary, None)
    if not summary["counts"]:
        missing = required_unmet(tx, run)
        if missing:  # done_when names operations the run never declared
            done = outcome({}, None, missing)
            runs.set_outcome(tx.conn, run.tenant_id, run.run_id, done.outcome.value)
            return Judged(summary, done.outcome.value, "needs_review", done.text[:REASON_MAX])
        if effects_verified is False:
            runs.set_outcome(tx.conn, run.tenant_id, run.run_id, Outcome.NEEDS_REVIEW)
            return Judged(summary, Outcome.NEEDS_REVIEW.value)
        return Judged(summary, None)
    done = completion_of(tx, run, counts)
    result = done.outcome
    if done.verified and effects_verified is False:
        result = Outcome.NEEDS_REVIEW  # the runtime's own doubt keeps today's meaning
    runs.set_outcome(tx.conn, run.tenant_id, run.run_id, result.value)
    if result is Outcome.VERIFIED:
        return Judged(summary, result.value, "completed", done.text)
    return Judged(summary, result.value, "needs_review", done.text[:REASON_MAX])


def review(core: Core, tx: Tx, run: Run, actor: dict[str, str] | None = None) -> Run:
    """After a ledger change of a completed run whose review is open: one new version
    (a ``review`` transition, state unchanged), the open review superseded by one new
    ``needs_review`` notification — or, when every operation is now confirmed, closed as
    resolved and followed by the completion's own attention. Returns the run as it now
    is. Does nothing for runs that are not completed with an open outcome."""
    if run.state != RunState.COMPLETED or run.outcome not in OPEN_OUTCOMES:
        return run
    tenant_id, run_id = run.tenant_id, run.run_id
    counts = ledger.counts(tx.conn, tenant_id, run_id)
    done = completion_of(tx, run, counts)
    version = run.version + 1
    run = replace(run, version=version, updated_at=tx.now, outcome=done.outcome.value)
    runs.move_run(tx.conn, run)
    runs.set_outcome(tx.conn, tenant_id, run_id, done.outcome.value)
    reason = done.text[:REASON_MAX]
    summary = operations_summary(counts)
    tx.emit(
        tenant_id,
        PendingEvent(
            "run.reviewed",
            {
                "run_id": run_id,
                "state": run.state,
                "version": version,
                "outcome": done.outcome.value,
                "operations": summary,
            },
            run_id=run_id,
        ),
    )
    verified = done.verified
    for note in notes.open_for_run(tx.conn, tenant_id, run_id):
        if note["attention_type"] != "needs_review":
            continue
        if verified:
            close_notification(tx, note, "resolved", f"every operation settled: {done.text}")
        else:
            close_notification(tx, note, "superseded", f"review updated at version {version}")
    if verified:
        review_request.close_reviews(tx, run, "every operation settled")
        link = None
    else:  # the decision the person faces changed with the ledger: a new review
        link = review_request.open_review(tx, run, counts, version)
    raised = raise_attention(
        tx,
        policy_in(core, tx, tenant_id),
        run,
        attention="completed" if verified else "needs_review",
        request=link,
        version=version,
        facts={"effects_verified": verified},
        reason=reason,
        owner_present=core.presence.is_present(tenant_id, run.owner_user_id, tx.conn),
        channels=offered(core.settings),
    )
    if raised.note is not None:
        tx.written[raised.note["id"]] = raised.note
    runs.defer_transition(
        tx,
        {
            "tenant_id": tenant_id,
            "run_id": run_id,
            "version": version,
            "kind": "review",
            "from_state": run.state,
            "to_state": run.state,
            "reason": reason,
            "decision": raised.decision.as_dict(),
            "at": tx.now,
            "actor": actor,  # whoever settled the operation that made this review
        },
    )
    log.info("run.reviewed", run_id=run_id, version=version, outcome=done.outcome.value)
    return run
