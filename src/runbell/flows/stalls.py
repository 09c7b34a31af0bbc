"""Stall detection: a ``working`` run that stops reporting raises ``stalled``, once per
episode, and the next sign of life resolves it.

Every working run carries a stall clock (``runs.stall_clock_at``): it starts when the run
enters ``working`` and restarts on every accepted signal and every progress report. When
it has run for the run's ``stall_after_seconds`` (else the tenant policy's
``stall_after_seconds``, default 900 s; 0 never), the scheduler's stall sweep
(:func:`sweep`) records a **stall**: a transition of kind ``stall`` that bumps the run's
version with its state unchanged, a ``stalled`` attention through the policy (rule
``stalled.default``), and the feed/webhook event ``run.stalled``. A worker that vanished
without a word is caught the same way: its clock started when the run began working.

An episode maps onto invariant 1's key through that version: the stalled notification
is unique per (tenant, recipient, run, *stall version*, ``stalled``), so one episode makes
one notification however many sweeps see it, and a second episode (after a recovery) is
a new version and so a second notification. The run row's ``stalled_at`` marks the open
episode; the sweep re-checks it under the run lock, so a second scheduler (or a sweep
retried after a crash) finds nothing left to do.

Recovery: progress on a stalled run records a ``recover`` transition (a new version),
closes the stalled notification as ``resolved`` and emits ``run.recovered``; any other
accepted transition ends the episode the same way inside :func:`flows.transitions.apply`
(:func:`end_episode`). Either restarts the clock: the next stall is a new episode.

Invariants kept here (DESIGN §2): 13 (a distinct ``stalled`` attention, once per
episode), 1 and 12 (notification, outbox, feed and history commit together; the unique
key holds under concurrent sweeps), 5 (progress itself still never pushes: recovery only
closes).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import structlog

from runbell.domain.channels import offered
from runbell.domain.records import Notification, Run, RunChanges
from runbell.flows import views
from runbell.flows.attention import close_notification, raise_attention, supersede_actionable
from runbell.flows.context import Core
from runbell.flows.policy import policy_in
from runbell.store import notifications as notes
from runbell.store import runs
from runbell.store import stalls as store
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)


def threshold(core: Core, tx: Tx, run: Run) -> int | None:
    """Seconds of silence after which ``run`` is stalled (None: never)."""
    own = run.stall_after_seconds
    after = own if own is not None else policy_in(core, tx, run.tenant_id).stall_after_s
    return after or None


def restart_clock(core: Core, tx: Tx, run: Run, state: str) -> RunChanges:
    """The run columns of a stall clock restarted now, for a run moving to ``state``:
    running only while ``working``. Ends any open episode (see :func:`end_episode`)."""
    due = store.due_at(tx.now, threshold(core, tx, run)) if state == "working" else None
    return {"stall_clock_at": tx.now, "stall_due_at": due, "stalled_at": None}


def end_episode(
    tx: Tx,
    before: Run,
    run: Run,
    cause: str,
    open_notes: list[Notification] | None = None,
) -> bool:
    """If ``before`` (the run as it was) was stalled: the run showed a sign of life, so the
    stall is over. Close its stalled notifications as resolved and emit ``run.recovered``.
    ``run`` is the run as it is now (its clock already restarted). Inside ``tx``."""
    if before.stalled_at is None:
        return False
    tenant_id, run_id = run.tenant_id, run.run_id
    if open_notes is None:
        open_notes = notes.open_for_run(tx.conn, tenant_id, run_id)
    closed = [
        note["id"]
        for note in open_notes
        if note["attention_type"] == "stalled"
        and close_notification(tx, note, "resolved", f"recovered: {cause}")
    ]
    silent = (tx.now - before.stalled_at).total_seconds()
    tx.emit(
        tenant_id,
        PendingEvent(
            "run.recovered",
            {
                **views.run_event(run),
                "stalled_at": views.iso(before.stalled_at),
                "recovered_at": views.iso(tx.now),
                "stalled_for_s": int(silent),
                "cause": cause,
                "notification_ids": closed,
            },
            run_id=run_id,
        ),
    )
    log.info("run.recovered", run_id=run_id, cause=cause, version=run.version)
    return True


#: Who stalled a run (the trace's actor): the stall sweep, no credential.
SWEEP = {"kind": "sweep", "sweep": "stalls"}


def recover_on_progress(core: Core, tx: Tx, run: Run, actor: dict[str, str] | None = None) -> Run:
    """Progress on a working run: restart its clock; a stalled run recovers, as a
    ``recover`` transition (new version). Returns the run as it is now. Inside ``tx``."""
    changes = restart_clock(core, tx, run, run.state)
    stalled = run.stalled_at is not None
    if stalled:
        changes.update({"version": run.version + 1, "updated_at": tx.now})
    runs.update_run(tx.conn, run.tenant_id, run.run_id, changes)
    after = replace(run, **changes)
    if stalled:
        end_episode(tx, run, after, "progress reported")
        runs.defer_transition(
            tx,
            {
                "tenant_id": run.tenant_id,
                "run_id": run.run_id,
                "version": after.version,
                "kind": "recover",
                "from_state": run.state,
                "to_state": run.state,
                "reason": "progress reported after a stall",
                "at": tx.now,
                "actor": actor,
            },
        )
    return after


def sweep(core: Core, now: datetime, limit: int = 500) -> int:
    """Scheduler sweep: record a stall for every working run whose clock ran out.

    Each run is re-checked in its own transaction under its row lock: a concurrent
    sweep, a progress report or a signal that got there first leaves nothing to do.
    Returns how many stalls were recorded."""
    with core.db.read() as conn:
        due = store.due(conn, now, limit)
    stalled = 0
    for tenant_id, run_id in due:
        with core.db.transaction(now=now) as tx:
            run = runs.get_run(tx.conn, tenant_id, run_id, for_update=True)
            if (
                run is None
                or run.state != "working"
                or run.stalled_at is not None
                or run.stall_due_at is None
                or run.stall_due_at > tx.now
            ):
                continue  # recovered, moved on, or stalled by another sweep meanwhile
            after_s = threshold(core, tx, run)
            due_at = store.due_at(run.stall_clock_at, after_s)
            if due_at is None or due_at > tx.now:
                # The threshold changed since the clock was timed: re-time it.
                runs.update_run(tx.conn, tenant_id, run_id, {"stall_due_at": due_at})
                continue
            _record_stall(core, tx, run, after_s or 0)
            stalled += 1
    return stalled


def _record_stall(core: Core, tx: Tx, run: Run, after_s: int) -> None:
    tenant_id, run_id = run.tenant_id, run.run_id
    version = run.version + 1
    silent = int((tx.now - (run.stall_clock_at or tx.now)).total_seconds())
    changes: RunChanges = {
        "version": version,
        "updated_at": tx.now,
        "stalled_at": tx.now,
        "stall_due_at": None,
    }
    runs.update_run(tx.conn, tenant_id, run_id, changes)
    run = replace(run, **changes)
    reason = f"no progress for {silent} s (stalls after {after_s} s)"
    ids: list[str] = []
    tx.emit(
        tenant_id,
        PendingEvent(
            "run.stalled",
            {
                **views.run_event(run),
                "last_sign_of_life_at": views.iso(run.stall_clock_at),
                "stall_after_seconds": after_s,
                "silent_for_s": silent,
                "reason": reason,
                "notification_ids": ids,
            },
            run_id=run_id,
        ),
    )
    supersede_actionable(tx, tenant_id, run_id, version)
    raised = raise_attention(
        tx,
        policy_in(core, tx, tenant_id),
        run,
        attention="stalled",
        version=version,
        facts={},
        reason=reason,
        owner_present=core.presence.is_present(tenant_id, run.owner_user_id, tx.conn),
        channels=offered(core.settings),
    )
    if raised.notification_id:
        ids.append(raised.notification_id)
    runs.defer_transition(
        tx,
        {
            "tenant_id": tenant_id,
            "run_id": run_id,
            "version": version,
            "kind": "stall",
            "from_state": run.state,
            "to_state": run.state,
            "reason": reason,
            "decision": raised.decision.as_dict(),
            "at": tx.now,
            "actor": SWEEP,
        },
    )
    log.info("run.stalled", run_id=run_id, version=version, silent_for_s=silent)
