"""Runs: create or edit one (PUT), read one, list them, and record progress.

Invariants kept here (DESIGN §2):

- 2: a finished run is not edited (409); state changes go through signals only.
- 5: progress is a heartbeat — it updates ``last_progress_at`` and the live feed, never a
  notification.
- 13: progress restarts a working run's stall clock; on a stalled run it records the
  recovery (``flows.stalls``), which closes the stalled notification, never opens one.
- 9: an edit of what a run is about bumps its version and supersedes its open actionable
  notifications, so an approval bound to the old version can no longer run.
- Tenant isolation: every read and write is scoped to the caller's tenant; a run the
  caller may not see answers 404.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NotRequired, TypedDict, cast

import structlog
from sqlalchemy.exc import IntegrityError

from runbell.domain.errors import Conflict, NotFound, ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.records import Run, RunChanges
from runbell.domain.runs import is_terminal
from runbell.domain.text import public_text
from runbell.flows import amendment_views, operations, stalls, views
from runbell.flows.amendment_views import AmendmentView
from runbell.flows.attention import supersede_actionable
from runbell.flows.context import Core
from runbell.flows.input_requests import pending_view
from runbell.flows.inputs import RunFields
from runbell.flows.operation_views import OperationsSummary
from runbell.flows.ownership import actor_of
from runbell.store import accounts, mismatches, runs
from runbell.store import notifications as notes
from runbell.store import stalls as stall_store
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)

PROGRESS_MAX = 500

RUN_FIELDS = (
    "title",
    "kind",
    "subject",
    "objective",
    "authority",
    "notify_on_complete",
    "metadata",
    "details",
    "stall_after_seconds",
)


def put_run(core: Core, who: Principal, run_id: str, body: RunFields) -> tuple[Run, bool]:
    """Create a run, or update its descriptive fields. State changes go through signals.

    Two creating PUTs may race (``FOR UPDATE`` locks nothing that does not exist yet):
    the loser's insert hits the primary key, and it is retried once as an update.
    """
    try:
        return _put_run(core, who, run_id, body)
    except IntegrityError:
        return _put_run(core, who, run_id, body)


def _put_run(core: Core, who: Principal, run_id: str, body: RunFields) -> tuple[Run, bool]:
    with core.db.transaction() as tx:
        run = runs.get_run(tx.conn, who.tenant_id, run_id, for_update=True)
        owner = body.get("owner")
        owner_id = _member(tx, who.tenant_id, owner, "owner") if owner else None
        access = {
            _member(tx, who.tenant_id, ref, "authority.users")
            for ref in (body.get("authority") or {}).get("users") or []
        }
        if run is None:
            if owner_id is None:
                raise ValidationFailed("owner is required when a run is created", field="owner")
            created = _create_run(core, tx, who, run_id, owner_id, body, access)
            return created, True
        updated = _update_run(core, tx, who, run, owner_id, body, access)
        return updated, False


def _member(tx: Tx, tenant_id: str, ref: str, field: str) -> str:
    try:
        return accounts.find_user(tx.conn, tenant_id, ref)
    except NotFound as exc:
        raise ValidationFailed(
            f"{field}: {ref!r} is not a member of this tenant", field=field
        ) from exc


def _create_run(
    core: Core,
    tx: Tx,
    who: Principal,
    run_id: str,
    owner_id: str,
    body: RunFields,
    access: set[str],
) -> Run:
    state = body.get("state") or "queued"
    if state not in ("queued", "working"):
        raise ValidationFailed("a new run starts queued or working", field="state")
    values = {k: body.get(k) for k in RUN_FIELDS}
    values["notify_on_complete"] = bool(values["notify_on_complete"])
    values.update(
        tenant_id=who.tenant_id,
        run_id=run_id,
        owner_user_id=owner_id,
        state=state,
        version=1,
        sequence=body.get("sequence"),
        created_at=tx.now,
        updated_at=tx.now,
        started_at=tx.now if state == "working" else None,
        # The completion owner: the creating credential, and its worker when named
        # (flows.ownership; changed only by an explicit takeover).
        owner_credential_id=who.credential_id,
        worker_id=body.get("worker_id"),
    )
    run = runs.new_run(**values)
    run = replace(run, **stalls.restart_clock(core, tx, run, state))
    runs.insert_run(tx.conn, run)
    runs.add_transition(
        tx.conn,
        {
            "tenant_id": who.tenant_id,
            "run_id": run_id,
            "version": 1,
            "kind": "create",
            "from_state": None,
            "to_state": state,
            "source_id": who.source_id,
            "sequence": body.get("sequence"),
            "reason": "created",
            "at": tx.now,
            "actor": actor_of(who, body.get("worker_id")),
        },
    )
    runs.set_access(tx.conn, who.tenant_id, run_id, access | {owner_id})
    tx.emit(who.tenant_id, PendingEvent("run.created", views.run_event(run), run_id=run_id))
    log.info("run.created", run_id=run_id, state=state)
    return run


def _update_run(
    core: Core,
    tx: Tx,
    who: Principal,
    run: Run,
    owner_id: str | None,
    body: RunFields,
    access: set[str],
) -> Run:
    if body.get("worker_id") and body["worker_id"] != run.worker_id:
        raise ValidationFailed(
            "worker_id names the completion owner's worker when a run is created; take "
            f"the run over explicitly with POST /v1/runs/{run.run_id}/claim",
            field="worker_id",
        )
    if body.get("state") and body["state"] != run.state:
        raise ValidationFailed(
            f"the run is {run.state}; change state with POST "
            f"/v1/runs/{run.run_id}/signals, not PUT",
            field="state",
        )
    # Keys from RUN_FIELDS, all columns of runs (the API's RunPut checked their types).
    changes = cast(
        RunChanges,
        {k: v for k, v in body.items() if k in RUN_FIELDS and v != getattr(run, k)},
    )
    if "notify_on_complete" in changes:
        changes["notify_on_complete"] = bool(changes["notify_on_complete"])
    if owner_id is not None and owner_id != run.owner_user_id:
        changes["owner_user_id"] = owner_id
    if not changes:
        return run
    if is_terminal(run.state):
        raise Conflict(
            f"run {run.run_id!r} is {run.state}; a finished run is not edited "
            "(report final details on the signal that finishes it)",
            current=views.run_view(run),
        )
    version = run.version + 1
    changes.update({"version": version, "updated_at": tx.now})
    if "stall_after_seconds" in changes and run.state == "working" and not run.stalled_at:
        # The clock keeps its start; only when it runs out changes.
        after_s = stalls.threshold(core, tx, replace(run, **changes))
        changes["stall_due_at"] = stall_store.due_at(run.stall_clock_at, after_s)
    runs.update_run(tx.conn, who.tenant_id, run.run_id, changes)
    runs.add_transition(
        tx.conn,
        {
            "tenant_id": who.tenant_id,
            "run_id": run.run_id,
            "version": version,
            "kind": "update",
            "from_state": run.state,
            "to_state": run.state,
            "source_id": who.source_id,
            "reason": "updated: "
            + ", ".join(
                sorted(k for k in changes if k not in ("version", "updated_at", "stall_due_at"))
            ),
            "at": tx.now,
            "actor": actor_of(who),
        },
    )
    if "authority" in changes or "owner_user_id" in changes:
        runs.set_access(
            tx.conn,
            who.tenant_id,
            run.run_id,
            access | {changes.get("owner_user_id", run.owner_user_id)},
        )
    # The thing an open request asked about may have changed: its action must not run.
    supersede_actionable(tx, who.tenant_id, run.run_id, version)
    run = replace(run, **changes)
    tx.emit(who.tenant_id, PendingEvent("run.updated", views.run_event(run), run_id=run.run_id))
    return run


class RunSnapshot(views.RunView):
    """``GET /v1/runs/{id}``: the run with what waits on it, and its ledger in counts."""

    pending_input_request: views.InputRequestView | None
    open_notifications: list[views.NotificationView]
    open_mismatches: int
    pending_amendments: list[AmendmentView]
    operations: OperationsSummary
    previous_worker_may_still_act: bool
    completion_owner: dict[str, str | bool | None]


class RunsById(TypedDict):
    runs: list[views.RunView]
    next_cursor: str | None


def get_run(core: Core, who: Principal, run_id: str) -> RunSnapshot:
    with core.db.read() as conn:
        run = runs.get_run(conn, who.tenant_id, run_id)
        if run is None or not runs.can_see_run(conn, who, run_id):
            raise NotFound(f"no run {run_id!r}")
        return {
            **views.run_view(run, include_details=True),
            "pending_input_request": pending_view(
                conn, who.tenant_id, run_id, include_details=True
            ),
            "open_notifications": [
                views.notification_view(n)
                for n in notes.open_for_run(conn, who.tenant_id, run_id)
                if who.sees_all_runs or n["recipient_user_id"] == who.user_id
            ],
            "open_mismatches": mismatches.count_open(conn, who.tenant_id, run_id),
            "pending_amendments": amendment_views.pending_views(conn, who.tenant_id, run_id),
            **operations.snapshot(conn, run),  # {counts, text}, fencing (issue 10)
        }


def list_runs(
    core: Core, who: Principal, *, states: list[str] | None, after: str | None, limit: int
) -> RunsById:
    with core.db.read() as conn:
        rows = runs.list_runs(conn, who, states=states, after=after, limit=limit + 1)
    page = rows[:limit]
    return {
        "runs": [views.run_view(r) for r in page],
        "next_cursor": page[-1].run_id if len(rows) > limit else None,
    }


class ProgressAnswer(TypedDict):
    """``POST /v1/runs/{id}/progress``: live only (``accepted: false`` once finished)."""

    accepted: bool
    decision: NotRequired[str]  # "live": a heartbeat never notifies anyone
    reason: NotRequired[str]
    run: views.RunView


#: What progress counts: ``{"done": 2, "total": 5, "unit": "files"}``.
Counts = dict[str, int | float | str]


def record_progress(
    core: Core, who: Principal, run_id: str, message: str | None, counts: Counts | None
) -> ProgressAnswer:
    """A heartbeat: updates last_progress_at and the live feed. Never a notification."""
    with core.db.transaction() as tx:
        run = runs.require_run(tx.conn, who.tenant_id, run_id, for_update=True)
        if is_terminal(run.state):
            return {
                "accepted": False,
                "reason": f"run is {run.state}",
                "run": views.run_view(run),
            }
        message = public_text(message, PROGRESS_MAX)
        progress = {"message": message, "counts": counts, "at": views.iso(tx.now)}
        runs.update_run(
            tx.conn, who.tenant_id, run_id, {"progress": progress, "last_progress_at": tx.now}
        )
        if run.state == "working":  # a sign of life: the stall clock restarts
            run = stalls.recover_on_progress(core, tx, run, actor_of(who))
        tx.emit(
            who.tenant_id,
            PendingEvent(
                "run.progress",
                {
                    "run_id": run_id,
                    "version": run.version,
                    "message": message,
                    "counts": counts,
                },
                run_id=run_id,
            ),
        )
        run = replace(run, progress=progress, last_progress_at=tx.now)
        return {"accepted": True, "decision": "live", "run": views.run_view(run)}
