"""A run's completion owner: who it is, the owner rule, an explicit takeover (claim) and
the owner's supersede of an operation that blocks new work (issue 18 items 2 and 3).

Every public function is one unit of work: one transaction, the run row locked first (as
in ``flows.operations``), then the ledger rows.

Invariants kept here (DESIGN §2):

- 15 (with issue 18): new work on a target and intent waits while an earlier operation
  there is ``sent``, ``uncertain`` or ``unresolved``; only the completion owner lifts that
  (:func:`supersede`, with a stated reason recorded in the operation's history and the
  trace) — the operation keeps its state, because nobody knows more about it than before.
- Fencing: a claim by another worker (or another credential) is a *takeover*: the epoch is
  bumped, the change is recorded (``owner_changes``: who did it, the previous owner, and
  whether it may still act) and shown on the run's history and page.
- The owner rule (``domain.ownership``): only the owner reports ``completed``, moves an
  operation to a final state or supersedes; others report findings
  (``flows.findings``). A refusal is a 403 problem with ``rule: completion_owner``.
"""

from __future__ import annotations

from typing import Any, TypedDict

import structlog

from runbell.domain import capabilities
from runbell.domain.errors import Conflict, Forbidden, NotFound, ValidationFailed
from runbell.domain.operations import BLOCKS_NEW_WORK
from runbell.domain.ownership import Caller, Owner, change_kind, owner_refusal
from runbell.domain.principal import Principal
from runbell.domain.records import Run
from runbell.domain.runs import is_terminal
from runbell.domain.text import REASON_MAX, public_text
from runbell.flows import scope, views
from runbell.flows.context import Core
from runbell.flows.idempotency import Answer, IdempotencyKey, act_once
from runbell.flows.operation_views import ClaimAnswer, OperationView, operation_view
from runbell.store import operations as ledger
from runbell.store import ownership, runs
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)

ID_MAX = 200
#: The rule a refusal names (the problem's ``rule`` member).
RULE = "completion_owner"


class SupersededAnswer(TypedDict):
    """``POST /v1/runs/{id}/operations/{op}/supersede``."""

    operation: OperationView
    changed: bool


def actor_of(who: Principal, worker_id: str | None = None) -> dict[str, str]:
    """Who caused a step, as the trace records it: the credential's kind and id, the
    person, the role, the worker when known. Never a secret."""
    out = who.actor()
    out["role"] = who.role
    if worker_id:
        out["worker_id"] = worker_id
    return out


def owner_of(run: Run) -> Owner:
    return Owner(run.owner_credential_id, run.worker_id)


def caller_of(who: Principal, worker_id: str | None = None) -> Caller:
    return Caller(who.credential_id, worker_id, who.is_admin)


def caller_in(actor: dict[str, str]) -> Caller:
    """The caller an :func:`actor_of` record names (the signal path carries only that)."""
    return Caller(
        actor.get("credential_id"), actor.get("worker_id"), actor.get("role") in ADMIN_ROLES
    )


ADMIN_ROLES = ("admin", "owner")


def require_owner(run: Run, caller: Caller, doing: str) -> None:
    """Refuse (403, ``rule: completion_owner``) unless ``caller`` may act as the run's
    completion owner (``domain.ownership.owner_refusal``)."""
    refusal = owner_refusal(owner_of(run), caller, doing)
    if refusal is not None:
        raise Forbidden(
            refusal,
            rule=RULE,
            owner={"credential_id": run.owner_credential_id, "worker_id": run.worker_id},
        )


def checked_id(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > ID_MAX:
        raise ValidationFailed(f"{field} is 1 to {ID_MAX} characters", field=field)
    return value


def _reason(value: str | None, *, required: bool) -> str | None:
    text = public_text(value, REASON_MAX) if isinstance(value, str) else None
    if required and not text:
        raise ValidationFailed("reason is a short, non-empty text", field="reason")
    return text or None


# --- taking a run (the owner's worker) -----------------------------------------------


def claim(
    core: Core,
    who: Principal,
    run_id: str,
    worker_id: str,
    key: IdempotencyKey | None = None,
    reason: str | None = None,
) -> Answer:
    """A worker takes the run: ``{epoch, owner, takeover}``. The same worker behind the same
    credential keeps its epoch; another worker (or another credential) takes the run over:
    the next epoch, the completion ownership moves to it, and the change is recorded with
    who did it and whether the previous owner may still act. Updates carrying an older
    epoch are then refused."""
    worker_id = checked_id(worker_id, "worker_id")
    why = _reason(reason, required=False)
    who.require(capabilities.SETTLE)  # a claim supersedes the worker that settles

    def act(tx: Tx) -> tuple[int, ClaimAnswer]:
        run = scope.require_run(tx.conn, who, run_id, capabilities.SETTLE, for_update=True)
        if is_terminal(run.state):
            raise Conflict(
                f"run {run_id!r} is {run.state}; a finished run is not claimed",
                current={"run": views.run_view(run)},
            )
        before = owner_of(run)
        credential = who.credential_id or run.owner_credential_id
        after = Owner(credential, worker_id)
        kind = change_kind(before, after)
        epoch = int(run.worker_epoch or 0)
        previous = run.worker_id
        if previous != worker_id or kind == "takeover":
            epoch += 1
        if kind is not None or epoch != run.worker_epoch:
            runs.set_worker(tx.conn, who.tenant_id, run_id, worker_id, epoch, credential)
        stale = ledger.older_epoch_in_flight(tx.conn, who.tenant_id, run_id, epoch) > 0
        if kind is not None:
            ownership.add(
                tx.conn,
                {
                    "tenant_id": who.tenant_id,
                    "run_id": run_id,
                    "seq": ownership.next_seq(tx.conn, who.tenant_id, run_id),
                    "kind": kind,
                    "from_credential_id": before.credential_id,
                    "from_worker_id": before.worker_id,
                    "to_credential_id": credential,
                    "to_worker_id": worker_id,
                    "epoch": epoch,
                    "previous_may_still_act": stale,
                    "reason": why,
                    "actor": actor_of(who, worker_id),
                    "at": tx.now,
                },
            )
            log.info("run.claimed", run_id=run_id, epoch=epoch, kind=kind)
            _emit_owner_changed(tx, who.tenant_id, run, kind, after, epoch, stale)
        return 200, {
            "run_id": run_id,
            "worker_id": worker_id,
            "epoch": epoch,
            "previous_worker_id": previous if previous != worker_id else None,
            "previous_worker_may_still_act": stale,
            "owner": {"credential_id": credential, "worker_id": worker_id},
            "takeover": kind == "takeover",
        }

    return act_once(core.db, core.box, key, lambda: act)


def _emit_owner_changed(
    tx: Tx, tenant_id: str, run: Run, kind: str, after: Owner, epoch: int, stale: bool
) -> None:
    """``run.owner_changed`` in the claim's transaction, so an open run page and a
    runtime on the feed learn of a takeover at once. Ids only (credential and worker
    ids), never a secret."""
    tx.emit(
        tenant_id,
        PendingEvent(
            "run.owner_changed",
            {
                "run_id": run.run_id,
                "version": run.version,
                "change": kind,
                "owner": {"credential_id": after.credential_id, "worker_id": after.worker_id},
                "previous": {
                    "credential_id": run.owner_credential_id,
                    "worker_id": run.worker_id,
                },
                "epoch": epoch,
                "previous_may_still_act": stale,
            },
            run_id=run.run_id,
        ),
    )


# --- lifting a block (the owner's supersede) ------------------------------------------


def supersede(
    core: Core,
    who: Principal,
    run_id: str,
    operation_id: str,
    reason: str | None,
    worker_id: str | None = None,
) -> SupersededAnswer:
    """The completion owner lets new work through on the target of an operation that is
    still ``sent``, ``uncertain`` or ``unresolved``, with a stated reason. The operation
    keeps its state (it may still land: the ledger keeps saying so); the supersede is in
    its history and the trace. Repeating it with the same reason answers ``changed:
    false``."""
    why = _reason(reason, required=True)
    with core.db.transaction() as tx:
        run = scope.require_run(tx.conn, who, run_id, capabilities.SETTLE, for_update=True)
        op = ledger.get(tx.conn, who.tenant_id, run_id, operation_id)
        if op is None:
            raise NotFound(f"no operation {operation_id!r} in run {run_id!r}")
        require_owner(run, caller_of(who, worker_id), "supersede an operation")
        if op.superseded is not None:
            if op.superseded.get("reason") == why:
                return {"operation": operation_view(op), "changed": False}
            raise Conflict(
                f"operation {operation_id!r} was already superseded",
                current={"operation": operation_view(op)},
            )
        if op.state not in BLOCKS_NEW_WORK:
            raise Conflict(
                f"operation {operation_id!r} is {op.state}: it blocks no new work, so there "
                "is nothing to supersede",
                current={"operation": operation_view(op)},
            )
        actor = actor_of(who, worker_id)
        at = views.iso(tx.now)
        step: dict[str, Any] = {"state": op.state, "from": op.state, "at": at}
        step.update({"epoch": op.epoch, "action": "superseded", "reason": why, "actor": actor})
        op = ledger.set_trace(
            tx.conn,
            op,
            history=[*(op.history or []), step],
            updated_at=tx.now,
            superseded={"reason": why, "actor": actor, "at": at},
        )
        log.info("operation.superseded", run_id=run_id, state=op.state)
        # Ids, the state and the owner's stated (public) reason: never details/evidence.
        tx.emit(
            who.tenant_id,
            PendingEvent(
                "operation.superseded",
                {
                    "run_id": run_id,
                    "operation_id": operation_id,
                    "state": op.state,
                    "reason": why,
                },
                run_id=run_id,
            ),
        )
        return {"operation": operation_view(op), "changed": True}
