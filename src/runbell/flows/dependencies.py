"""Dependencies between jobs: a run that depends on another run's proposal.

A run names ``depends_on: {run, request_id, version}`` — an input request of another run
of the same tenant (an approval: a proposal), at a request version. Nothing blocks on it:
the dependent run's work goes on, its view and page say where the proposal stands now
("depends on a proposal that is not approved yet", approved, rejected, replaced by a
newer version, cancelled, expired; ``domain.jobs``), and when the proposal is decided,
cancelled, expires or is replaced, the dependent run's owner gets one attention
(``dependency``) saying what happened.

Called inside the callers' transactions: :func:`check` by ``flows.runs.put_run``;
:func:`tell_dependents` wherever a request closes (answers, amendments, a run leaving
``input_required`` or finishing, a newer request superseding it, expiry).

Invariants kept here (DESIGN §2):

- 1: at most one ``dependency`` notification per dependent run, run version and
  recipient: a request closes once, and a dependent run's dependency changes only with
  a new version of that run (``PUT``), so the unique constraint is the guard.
- 12: the notification and its outbox rows commit with the close that caused it.
- 2 and "cancelling one job never changes another": telling a dependent run changes none
  of its columns — no state, no version; only a notification and a feed event.
- 11: the neutral summary goes out; the reason (ids and the sentence) after sign-in.
- Tenant isolation: the run named must be one the caller may see in its own tenant;
  another tenant's run answers like a run that does not exist (422 naming the field).
"""

from __future__ import annotations

import structlog
from sqlalchemy.engine import Connection

from runbell.domain.channels import offered
from runbell.domain.errors import ValidationFailed
from runbell.domain.jobs import dependency_state, dependency_text
from runbell.domain.principal import Principal
from runbell.domain.records import Run, RunChanges
from runbell.domain.runs import RunState
from runbell.flows import views
from runbell.flows.attention import raise_attention
from runbell.flows.context import Core
from runbell.flows.inputs import DependsOnBody
from runbell.flows.policy import policy_in
from runbell.store import input_requests as requests
from runbell.store import runs
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)

ATTENTION = "dependency"


class DependencyView(views.DependsOnView):
    """Where the dependency stands now: ``state`` (``domain.jobs.DEPENDENCY_STATES``),
    the sentence a page shows, the newer request that replaced it (if one did), and when
    it was decided or closed."""

    state: str
    text: str
    superseded_by: str | None
    decided_at: str | None


def check(conn: Connection, who: Principal, run_id: str, body: DependsOnBody | None) -> RunChanges:
    """The run columns a ``depends_on`` sets (or clears, for None): 422 naming the field
    for a run the caller cannot see (another tenant's included), a request that is not
    that run's, not an approval, or a version it never had."""
    if body is None:
        return {"depends_on_run": None, "depends_on_request": None, "depends_on_version": None}
    other, request_id = body.get("run"), body.get("request_id")
    if not isinstance(other, str) or not other:
        raise ValidationFailed("depends_on.run is the id of another run", field="depends_on.run")
    if not isinstance(request_id, str) or not request_id:
        raise ValidationFailed(
            "depends_on.request_id is the id of that run's input request",
            field="depends_on.request_id",
        )
    if other == run_id:
        raise ValidationFailed("a run does not depend on its own proposal", field="depends_on.run")
    if runs.get_run(conn, who.tenant_id, other) is None or not runs.can_see_run(conn, who, other):
        raise ValidationFailed(f"depends_on.run: no run {other!r}", field="depends_on.run")
    req = requests.get(conn, who.tenant_id, request_id)
    if req is None or req.run_id != other:
        raise ValidationFailed(
            f"depends_on.request_id: run {other!r} has no input request {request_id!r}",
            field="depends_on.request_id",
        )
    if req.kind != "approval":
        raise ValidationFailed(
            "depends_on.request_id: a dependency is on a proposal (an approval request), "
            f"not a {req.kind}",
            field="depends_on.request_id",
        )
    version = body.get("version")
    if version is None:
        version = req.version
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= req.version:
        raise ValidationFailed(
            f"depends_on.version: request {request_id!r} is at version {req.version}",
            field="depends_on.version",
        )
    return {
        "depends_on_run": other,
        "depends_on_request": request_id,
        "depends_on_version": version,
    }


def view(conn: Connection, run: Run) -> DependencyView | None:
    """Where the run's dependency stands now (read from the request as it is)."""
    named = views.depends_on_view(run)
    if named is None:
        return None
    req = requests.get(conn, run.tenant_id, named["request_id"])
    if req is None:  # (requests are never deleted; checked when named, so unreachable)
        return {
            **named,
            "state": "cancelled",
            "text": dependency_text("cancelled"),
            "superseded_by": None,
            "decided_at": None,
        }
    state = dependency_state(req.state, req.decision, req.version, named["version"])
    decided = req.answered_at or req.closed_at
    return {
        **named,
        "state": state,
        "text": dependency_text(state, req.superseded_by),
        "superseded_by": req.superseded_by,
        "decided_at": None if state == "pending" else views.iso(decided),
    }


def tell_dependents(core: Core, tx: Tx, tenant_id: str, request_ids: list[str]) -> int:
    """The requests ``request_ids`` just closed (in ``tx``): each run that depends on one
    gets one ``dependency`` attention saying what happened, and a ``run.dependency``
    feed event. A cancelled dependent run is not told (nobody waits on it). Changes no
    run. Returns how many runs were told."""
    told = 0
    for dependent in runs.dependents_of(tx.conn, tenant_id, request_ids):
        now = view(tx.conn, dependent)
        if now is None or now["state"] == "pending":
            continue
        tx.emit(
            tenant_id,
            PendingEvent(
                "run.dependency",
                {
                    "run_id": dependent.run_id,
                    "version": dependent.version,
                    "depends_on": {
                        "run": now["run"],
                        "request_id": now["request_id"],
                        "version": now["version"],
                    },
                    "state": now["state"],
                },
                run_id=dependent.run_id,
            ),
        )
        if dependent.state == RunState.CANCELLED:
            continue
        reason = (
            f"{now['text']}: request {now['request_id']} (version {now['version']}) "
            f"of run {now['run']}"
        )
        raised = raise_attention(
            tx,
            policy_in(core, tx, tenant_id),
            dependent,
            attention=ATTENTION,
            version=dependent.version,
            facts={},
            reason=reason[:500],
            owner_present=core.presence.is_present(tenant_id, dependent.owner_user_id, tx.conn),
            channels=offered(core.settings),
        )
        if raised.note is not None:
            tx.written[raised.note["id"]] = raised.note
        told += 1
        log.info(
            "dependency.told",
            run_id=dependent.run_id,
            request_id=now["request_id"],
            state=now["state"],
        )
    return told
