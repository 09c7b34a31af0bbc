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
- Jobs (issue 18 item 5): ``done_when`` and ``depends_on`` are versioned like the
  objective; ``links`` are not (linking a message changes nothing an approval was about);
  a ``depends_on`` naming a run the caller cannot see reads as one that does not exist.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NotRequired, TypedDict, cast

import structlog

from runbell.domain import capabilities
from runbell.domain.errors import Conflict, NotFound, ValidationFailed
from runbell.domain.jobs import RunLink, check_done_when, check_links, parse_link
from runbell.domain.people import named_refs, run_people
from runbell.domain.principal import Principal
from runbell.domain.records import Run, RunChanges
from runbell.domain.runs import is_terminal
from runbell.domain.text import public_text
from runbell.flows import (
    amendment_views,
    dependencies,
    operations,
    review,
    schedule_start,
    schedule_views,
    scope,
    stalls,
    views,
    written,
)
from runbell.flows.amendment_views import AmendmentView
from runbell.flows.attention import supersede_actionable
from runbell.flows.context import Core
from runbell.flows.input_requests import pending_view
from runbell.flows.inputs import RunFields
from runbell.flows.operation_views import OperationsSummary
from runbell.flows.ownership import actor_of
from runbell.store import access as people
from runbell.store import accounts, mismatches, runs
from runbell.store import links as run_links
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
# (done_when and depends_on are checked by _job_fields; links live in run_links.)


def put_run(core: Core, who: Principal, run_id: str, body: RunFields) -> tuple[Run, bool]:
    """Create a run, or update its descriptive fields. State changes go through signals.

    One unit of the process's writer (:mod:`runbell.flows.written`), committed with
    whatever other writes are waiting and answered once that commit is durable. Two
    creating PUTs may race across processes (``FOR UPDATE`` locks nothing that does not
    exist yet): the loser's insert hits the primary key, and it is retried once as an
    update. (Within one batch the second sees the first's row and updates it.)
    """
    who.require(capabilities.REPORT)
    links = check_links(body["links"]) if "links" in body else None
    return written.write_retried(
        core,
        who.tenant_id,
        run_id,
        lambda tx: put_run_in_tx(core, tx, who, run_id, body, links),
    )


def put_run_in_tx(
    core: Core,
    tx: Tx,
    who: Principal,
    run_id: str,
    body: RunFields,
    links: list[RunLink] | None,
) -> tuple[Run, bool]:
    """:func:`put_run` in the caller's transaction (``links`` checked by ``check_links``)."""
    run = runs.get_run(tx.conn, who.tenant_id, run_id, for_update=True)
    under = None
    if run is None:  # started under a schedule: its owner and authority by default
        scope.may_create(who, run_id)
        under = schedule_start.started_under(tx, who, body.get("schedule"))
        body = schedule_start.with_defaults(body, under) if under else body
    else:
        if not scope.in_scope(who, run):
            raise NotFound(f"no run {run_id!r} in this credential's scope")
        schedule_start.check_unchanged(body, run.schedule_id)
    owner = body.get("owner")
    owner_id = _member(tx, who.tenant_id, owner, "owner") if owner else None
    access = _named(tx, who.tenant_id, named_refs(body.get("authority")))
    job = _job_fields(tx, who, run_id, body)
    if run is None:
        if owner_id is None:
            raise ValidationFailed("owner is required when a run is created", field="owner")
        created = _create_run(core, tx, who, run_id, owner_id, body, access, job, under)
        _set_links(tx, who, created, links)
        return created, True
    updated = _update_run(core, tx, who, run, owner_id, body, access, job)
    _set_links(tx, who, updated, links)
    return updated, False


def _job_fields(tx: Tx, who: Principal, run_id: str, body: RunFields) -> RunChanges:
    """What counts as done and what the run depends on, checked (issue 18 item 5)."""
    job: RunChanges = {}
    if "done_when" in body:
        job["done_when"] = check_done_when(body["done_when"])
    if "depends_on" in body:
        job.update(dependencies.check(tx.conn, who, run_id, body["depends_on"]))
    return job


def _set_links(tx: Tx, who: Principal, run: Run, links: list[RunLink] | None) -> None:
    """The run's links, replaced when given. Not a new version (a message linked to a job
    changes nothing a pending approval was about), so a finished job can still be linked
    to where it was discussed."""
    if links is None or links == run_links.links_of(tx.conn, who.tenant_id, run.run_id):
        return
    run_links.replace_links(tx.conn, who.tenant_id, run.run_id, links, tx.now)
    tx.emit(
        who.tenant_id,
        PendingEvent(
            "run.linked",
            {"run_id": run.run_id, "version": run.version, "links": len(links)},
            run_id=run.run_id,
        ),
    )


def _named(
    tx: Tx, tenant_id: str, lists: dict[str, list[str]], *, strict: bool = True
) -> dict[str, list[str]]:
    """The people the authority's lists name (``users``, ``viewers``, ``approvers``,
    ``amenders``: ``domain.people.named_refs``), as member ids: 422 naming the list for
    anyone not a current member (``strict=False``, for an authority stored earlier: they
    are left out)."""
    named: dict[str, list[str]] = {}
    for name, refs in lists.items():
        named[name] = []
        for ref in refs:
            try:
                named[name].append(_member(tx, tenant_id, ref, f"authority.{name}"))
            except ValidationFailed:
                if strict:
                    raise
    return named


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
    access: dict[str, list[str]],
    job: RunChanges,
    under: schedule_start.StartedUnder | None = None,
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
        created_by_credential=who.credential_id,
        # The completion owner: the creating credential, and its worker when named
        # (flows.ownership; changed only by an explicit takeover).
        owner_credential_id=who.credential_id,
        worker_id=body.get("worker_id"),
    )
    values.update(job)
    if under is not None:
        values.update(under.columns())
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
    people.set_run_people(tx.conn, who.tenant_id, run_id, run_people(owner_id, access))
    people.apply_grants(tx.conn, who.tenant_id, run_id, run.subject)
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
    access: dict[str, list[str]],
    job: RunChanges,
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
    for name, value in job.items():  # done_when, depends_on_*: checked by _job_fields
        if value != getattr(run, name):
            changes[name] = value  # type: ignore[literal-required]
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
        owner = changes.get("owner_user_id", run.owner_user_id)
        if "authority" not in changes:  # the same people, under a new owner
            access = _named(tx, who.tenant_id, named_refs(run.authority), strict=False)
        people.set_run_people(tx.conn, who.tenant_id, run.run_id, run_people(owner, access))
    if "subject" in changes:
        people.apply_grants(tx.conn, who.tenant_id, run.run_id, changes["subject"])
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
    badge: views.BadgeView  # what the run's state and ledger say at a glance
    pending_review: views.InputRequestView | None  # a finished run's review (flows.review)
    links: list[RunLink]
    dependency: dependencies.DependencyView | None  # where depends_on stands now
    schedule: schedule_views.RunSchedule | None  # the schedule it started under (issue 18)
    completion_owner: dict[str, str | bool | None]


class RunsById(TypedDict):
    runs: list[views.RunView]
    next_cursor: str | None


def get_run(
    core: Core, who: Principal, run_id: str, *, capability: str = capabilities.READ
) -> RunSnapshot:
    """The run snapshot (404 if ``who`` may not see it). A runtime credential needs
    ``capability``: ``runs.read``, or the one the write it answers needed."""
    who.require(capability)
    with core.db.read() as conn:
        run = runs.get_run(conn, who.tenant_id, run_id)
        if run is None or not runs.can_see_run(conn, who, run_id):
            raise NotFound(f"no run {run_id!r}")
        ledger = operations.snapshot(conn, run)
        waiting = review.pending(conn, run)
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
            **ledger,  # {counts, text}, fencing (issue 10)
            "badge": views.badge_view(run.state, run.outcome, ledger["operations"]["counts"]),
            "pending_review": None if waiting is None else views.input_request_view(waiting),
            "links": run_links.links_of(conn, who.tenant_id, run_id),
            "dependency": dependencies.view(conn, run),
            "schedule": schedule_views.run_schedule(conn, run),
        }


def list_runs(
    core: Core,
    who: Principal,
    *,
    states: list[str] | None,
    after: str | None,
    limit: int,
    link: str | None = None,
) -> RunsById:
    """A page of the runs ``who`` may see, by run id; ``link`` (``kind:id``): only the
    runs linked to it (every job of one conversation, in one indexed query)."""
    who.require(capabilities.READ)
    linked = None
    if link is not None:
        kind, link_id = parse_link(link)
        linked = run_links.linked_runs(who.tenant_id, kind, link_id)
    with core.db.read() as conn:
        rows = runs.list_runs(conn, who, states=states, after=after, limit=limit + 1, linked=linked)
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
    """A heartbeat: updates last_progress_at and the live feed. Never a notification.

    One unit of the process's writer (:mod:`runbell.flows.written`)."""
    who.require(capabilities.REPORT)  # before the lock: a scoped key without it, 403
    message = public_text(message, PROGRESS_MAX)
    return written.write(
        core,
        who.tenant_id,
        run_id,
        lambda tx: progress_in_tx(core, tx, who, run_id, message, counts),
    )


def progress_in_tx(
    core: Core, tx: Tx, who: Principal, run_id: str, message: str | None, counts: Counts | None
) -> ProgressAnswer:
    """:func:`record_progress` in the caller's transaction (``message`` already made safe)."""
    run = scope.require_run(tx.conn, who, run_id, capabilities.REPORT, for_update=True)
    if is_terminal(run.state):
        return {
            "accepted": False,
            "reason": f"run is {run.state}",
            "run": views.run_view(run),
        }
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
