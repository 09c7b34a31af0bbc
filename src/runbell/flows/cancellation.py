"""What a cancellation settles to: the facts the policy sees, and the summary of the work
that was kept and what stays uncertain. Called inside the caller's transaction by
:mod:`runbell.flows.cancel` (the request) and :func:`runbell.flows.transitions.apply`
(the run reaching ``cancelled``), so it imports neither.

Invariants kept here (DESIGN §2):

- 16: cancellation is a request with an outcome — :func:`cancel_summary` says what was
  already kept (never "undone": Runbell cannot take back an effect that landed) and what
  stays uncertain, and that text is what the ``cancelled`` notification and the run page
  show.
- 15: nothing is assumed done or not done: without a record of the run's individual
  effects the summary says so, rather than "nothing is uncertain".

The two touch points of the operations ledger (built in parallel, wired at merge) are
:func:`_on_cancel_requested` and :func:`cancel_summary`; each says what it will do once
operations exist.
"""

from __future__ import annotations

from typing import Any

import structlog

from runbell.domain.cancellation import outcome
from runbell.store import runs
from runbell.store.db import Tx

log = structlog.get_logger(__name__)


def requested_by_person(run: dict[str, Any]) -> bool:
    """The ``cancelled_by_owner`` fact: a person with the run's authority (its owner or
    someone its authority names) asked for this cancellation. A runtime that stopped on
    its own, or asked through its API key, is not: ``cancelled.default`` decides then."""
    return run.get("cancel_requested_at") is not None and bool(run.get("cancel_requested_by"))


def _on_cancel_requested(tx: Tx, run: dict[str, Any]) -> None:
    """The run was just asked to stop (it is ``stopping`` in ``tx``).

    SEAM (operations ledger): once operations exist, this marks the run's operations
    still ``planned`` as ``not_started`` — work that will not begin is not "in flight".
    Until then there is nothing recorded to mark: the run row (who asked, when, why) and
    the ``run.cancel_requested`` event, written by the caller, are the whole request.
    """
    log.info(
        "run.cancel_requested",
        run_id=run["run_id"],
        version=run["version"],
        by_person=requested_by_person(run),
    )


def cancel_summary(tx: Tx, run: dict[str, Any]) -> dict[str, Any]:
    """What was kept and what stays uncertain, for a run reaching ``cancelled`` in ``tx``.

    ``{"kept", "uncertain", "counts", "tracked", "text"}``: ``kept`` is the runtime's own
    account (the ``report.summary`` of the signal that settled it, or of an earlier one);
    ``uncertain`` what may or may not have landed (None when unknown); ``counts`` the
    operations per outcome (None until there is a ledger); ``tracked`` whether Runbell
    knows the run's individual effects; ``text`` one line for the notification and the
    run page. The wording never claims to undo anything.

    SEAM (operations ledger): once operations exist, this counts them and calls
    ``outcome(kept, tracked=True, counts=…, counts_text=<the ledger's one text function>,
    uncertain=<the uncertain ones named, or None>)``; the wording is
    :func:`runbell.domain.cancellation.outcome`'s either way.
    """
    report = run.get("report") or {}
    kept = report.get("summary") if isinstance(report.get("summary"), str) else None
    return outcome(kept or None, tracked=False)


def settle(tx: Tx, run: dict[str, Any]) -> dict[str, Any]:
    """The run reached ``cancelled`` in ``tx``: store its summary on the run and return
    the run as it is now (with ``cancel_summary``)."""
    summary = cancel_summary(tx, run)
    runs.update_run(tx.conn, run["tenant_id"], run["run_id"], {"cancel_summary": summary})
    return {**run, "cancel_summary": summary}
