"""What a cancellation settles to: the facts the policy sees, and the summary of the work
that was kept and what stays uncertain. Called inside the caller's transaction by
:mod:`runbell.flows.cancel_request` (the request) and :func:`runbell.flows.transitions.apply`
(the run reaching ``cancelled``), so it imports neither.

Invariants kept here (DESIGN §2):

- 16: cancellation is a request with an outcome — :func:`cancel_summary` says what was
  already kept (never "undone": Runbell cannot take back an effect that landed) and what
  stays uncertain, and that text is what the ``cancelled`` notification and the run page
  show.
- 15: nothing is assumed done or not done: without a record of the run's individual
  effects the summary says so, rather than "nothing is uncertain".

The operations ledger comes in at two points: :func:`_on_cancel_requested` marks the
run's operations still ``planned`` as ``not_started``, and :func:`cancel_summary` counts
the ledger (``flows.operations.summary``) and names what stays uncertain.
"""

from __future__ import annotations

from dataclasses import replace

import structlog

from runbell.domain.cancellation import CancelSummary, outcome
from runbell.domain.operations import OpState
from runbell.domain.records import Run
from runbell.flows import operations
from runbell.store import operations as ledger
from runbell.store import runs
from runbell.store.db import Tx

log = structlog.get_logger(__name__)


def requested_by_person(run: Run) -> bool:
    """The ``cancelled_by_owner`` fact: a person with the run's authority (its owner or
    someone its authority names) asked for this cancellation. A runtime that stopped on
    its own, or asked through its API key, is not: ``cancelled.default`` decides then."""
    return run.cancel_requested_at is not None and bool(run.cancel_requested_by)


def _on_cancel_requested(tx: Tx, run: Run, actor: dict[str, str] | None = None) -> None:
    """The run was just asked to stop (it is ``stopping`` in ``tx``): its operations still
    ``planned`` become ``not_started`` — work that will not begin is said so, not left
    looking pending (invariant 16). Operations already ``sent`` settle as the runtime
    reports them."""
    marked = operations.mark_not_started(tx, run, actor=actor)
    log.info(
        "run.cancel_requested",
        run_id=run.run_id,
        version=run.version,
        by_person=requested_by_person(run),
        not_started=marked,
    )


# At most this many operation ids are named in a summary line (the rest are counted).
NAMED_MAX = 10


def cancel_summary(tx: Tx, run: Run) -> CancelSummary:
    """What was kept and what stays uncertain, for a run reaching ``cancelled`` in ``tx``.

    ``{"kept", "uncertain", "counts", "tracked", "text"}``: ``kept`` is the runtime's own
    account (the ``report.summary`` of the signal that settled it, or of an earlier one);
    ``counts`` the run's operations per state, when it declared any (``tracked``);
    ``uncertain`` names the operations that may or may not have landed — ``uncertain``,
    ``unresolved``, or still ``sent`` with no reply — (None when none is, or when nothing
    was tracked); ``text`` one line for the notification and the run page
    (:func:`runbell.domain.cancellation.outcome`). The wording never claims to undo
    anything.
    """
    report = run.report or {}
    kept = report.get("summary") if isinstance(report.get("summary"), str) else None
    tenant_id, run_id = run.tenant_id, run.run_id
    if not run.has_operations:
        return outcome(kept or None, tracked=False)
    counted = operations.summary(tx.conn, tenant_id, run_id)
    if not counted["counts"]:
        return outcome(kept or None, tracked=False)
    in_flight = ledger.ids_by_state(tx.conn, tenant_id, run_id, (OpState.SENT.value,))
    named = [*counted["uncertain"], *in_flight.get(OpState.SENT.value, [])]
    uncertain = None
    if named:
        shown = ", ".join(named[:NAMED_MAX])
        more = len(named) - NAMED_MAX
        uncertain = f"{shown} and {more} more" if more > 0 else shown
    return outcome(
        kept or None,
        tracked=True,
        counts=counted["counts"],
        counts_text=counted["text"],
        uncertain=uncertain,
    )


def settle(tx: Tx, run: Run) -> Run:
    """The run reached ``cancelled`` in ``tx``: store its summary on the run and return
    the run as it is now (with ``cancel_summary``)."""
    summary = cancel_summary(tx, run)
    runs.update_run(tx.conn, run.tenant_id, run.run_id, {"cancel_summary": summary})
    return replace(run, cancel_summary=summary)
