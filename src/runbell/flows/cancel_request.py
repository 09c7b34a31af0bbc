"""Cancelling a run: a request with an outcome (DESIGN §2 invariant 16).

:func:`request_cancel` is one unit of work: lock the run, check who asks, and move it to
``stopping`` (a transition of kind ``cancel``) with who asked, when and why on the run
row, a ``run.cancel_requested`` feed event (and tenant webhook), and the operations seam
(:func:`runbell.flows.cancel_outcome._on_cancel_requested`). The runtime sees the request on
the feed or long-poll and in ``GET /v1/runs/{id}`` (``cancel_requested``), lets in-flight
work settle, and reports ``cancelled`` (or ``completed`` / ``failed``, which the state
machine also accepts from ``stopping``); reaching ``cancelled`` stores and notifies the
summary of what was kept (``flows.transitions.apply`` → ``flows.cancel_outcome``).

Who may ask: the run's owner and the people its authority names (users, or members of
the roles it names) — others who can see the run get 403, anyone else 404; an API key of
the tenant (the runtime stopping its own run, or an operator's admin key) may too, and
then the ``cancelled`` notification is decided by ``cancelled.default``, not
``cancelled.by_owner``: the owner did not ask.

Invariants kept here (DESIGN §2):

- 16: ``stopping`` until the runtime says how in-flight work settled; nothing claims the
  work was undone.
- 9 (its "a repeated action returns the original result" for every act POST): with an
  ``Idempotency-Key`` a retry gets the original answer byte for byte; without one, asking
  again while the run is stopping answers 200 with the run as it is (the first request
  stands).
- 2: a finished run is not cancelled (409 with ``current``).
- 9: the transition bumps the version and supersedes the run's open actionable
  notifications; leaving ``input_required`` cancels its pending requests.

Example::

    request_cancel(core, person, "fix-42", "wrong branch", key)
    # {"outcome": "requested", "run": {..., "state": "stopping",
    #  "cancel_requested": {"at": "…", "by": "usr_…", "by_kind": "user",
    #                       "reason": "wrong branch"}}}
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypedDict

import structlog

from runbell.domain import capabilities
from runbell.domain.errors import Conflict, Forbidden, NotFound
from runbell.domain.principal import Principal
from runbell.domain.records import Run, RunChanges
from runbell.domain.runs import RunState, is_terminal
from runbell.domain.text import REASON_MAX, public_text
from runbell.flows import cancel_outcome, scope, transitions, views, written
from runbell.flows.approvers import may_answer
from runbell.flows.context import Core
from runbell.flows.idempotency import Act, Answer, IdempotencyKey
from runbell.flows.ownership import actor_of
from runbell.store import runs
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)

NOT_AUTHORIZED = "only the run's owner or the people its authority names can cancel it"


class CancelAnswer(TypedDict):
    """``POST /v1/runs/{id}/cancel``: ``requested`` (202) or ``already_stopping`` (200)."""

    outcome: str
    run: views.RunView


def may_cancel(conn: Any, who: Principal, run: Run) -> bool:
    """The run's authority (as for answers), or one of the tenant's API keys."""
    return who.kind == "key" or may_answer(conn, who, run)


def request_cancel(
    core: Core,
    who: Principal,
    run_id: str,
    reason: str | None,
    key: IdempotencyKey | None = None,
) -> Answer:
    """Ask the run to stop. 202 ``{outcome: "requested", run}`` when it moves to
    ``stopping``; 200 ``{outcome: "already_stopping", run}`` when it was stopping already;
    404 / 403 / 409 as the module docstring says."""
    reason = public_text(reason, REASON_MAX)  # public: feed, webhooks, the run page
    who.require(capabilities.CANCEL)  # a runtime credential's; people: their authority

    def prepare() -> Act:
        return lambda tx: _cancel_in(core, tx, who, run_id, reason)

    return written.act_once(core, key, (who.tenant_id, run_id), prepare)  # a unit of the writer


def _cancel_in(
    core: Core, tx: Tx, who: Principal, run_id: str, reason: str | None
) -> tuple[int, CancelAnswer]:
    conn, tenant_id = tx.conn, who.tenant_id
    run = scope.check_run(who, runs.get_run(conn, tenant_id, run_id, for_update=True), run_id)
    if not may_cancel(conn, who, run):
        if not runs.can_see_run(conn, who, run_id):
            raise NotFound(f"no run {run_id!r}")
        raise Forbidden(NOT_AUTHORIZED)
    if is_terminal(run.state):
        raise Conflict(
            f"run {run_id!r} is {run.state}; a finished run cannot be cancelled (and "
            "cancelling never undoes work that was kept)",
            current={"run": views.run_view(run)},
        )
    first = run.cancel_requested_at is None
    if first:
        requested: RunChanges = {
            "cancel_requested_at": tx.now,
            "cancel_requested_by": who.user_id if who.is_user else None,
            "cancel_reason": reason,
        }
        runs.update_run(conn, tenant_id, run_id, requested)
        run = replace(run, **requested)
    if run.state == RunState.STOPPING:
        # Stopping already: the first request stands. (A run the runtime itself put in
        # stopping records this request, so the runtime learns it should cancel.)
        if first:
            _announce(tx, run)
        return 200, {"outcome": "already_stopping", "run": views.run_view(run)}
    run, _ = transitions.apply(
        core,
        tx,
        run,
        transitions.TransitionRequest(
            state=RunState.STOPPING.value,
            sequence=None,
            source_id=who.source_id,
            event_id=None,
            reason="cancellation requested" + (f": {reason}" if reason else ""),
            error=None,
            effects_verified=None,
            kind="cancel",
            actor=actor_of(who),
        ),
    )
    _announce(tx, run)
    cancel_outcome._on_cancel_requested(tx, run, actor_of(who))
    return 202, {"outcome": "requested", "run": views.run_view(run)}


def _announce(tx: Tx, run: Run) -> None:
    """``run.cancel_requested`` on the feed (and to tenant webhooks): the runtime's cue."""
    tx.emit(
        run.tenant_id,
        PendingEvent(
            "run.cancel_requested",
            {
                "run_id": run.run_id,
                "state": run.state,
                "version": run.version,
                "terminal": False,
                "cancel_requested": views.cancel_requested_view(run),
            },
            run_id=run.run_id,
        ),
    )
